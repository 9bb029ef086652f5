package recovery

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/durable"
)

// TestStoreWriteFaults fails the commit of one write transaction as the
// disk can, and checks how the store reports it and whether it goes on.
func TestStoreWriteFaults(t *testing.T) {
	pageWrite := func(errno syscall.Errno) error { return &os.PathError{Op: "write", Path: "state.db", Err: errno} }
	tests := []struct {
		name     string
		phase    Phase
		err      error
		diskFull bool // refused for space with nothing recorded: the store goes on
		visible  bool // the change is seen after the failure
	}{
		{"page write ENOSPC", BeforeCommit, pageWrite(syscall.ENOSPC), true, false},
		{"page write EDQUOT", BeforeCommit, pageWrite(syscall.EDQUOT), true, false},
		{"page write EIO", BeforeCommit, pageWrite(syscall.EIO), false, false},
		{"fdatasync EIO", AfterCommit, syscall.EIO, false, true},
		{"fdatasync ENOSPC", AfterCommit, syscall.ENOSPC, false, true},
		{"ENOSPC once the change is in", AfterCommit, pageWrite(syscall.ENOSPC), false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arm := false
			s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WriteFault: func(op string, ph Phase) error {
				if arm && op == "init producer" && ph == tc.phase {
					arm = false
					return tc.err
				}
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			arm = true
			_, err = s.InitProducer("a")
			if err == nil {
				t.Fatal("init producer: no error")
			}
			if got := errors.Is(err, durable.ErrDiskFull); got != tc.diskFull {
				t.Errorf("disk full %t, want %t: %v", got, tc.diskFull, err)
			}
			if got := errors.Is(err, ErrWriteFailed); got != !tc.diskFull {
				t.Errorf("write failed %t, want %t: %v", got, !tc.diskFull, err)
			}
			a, err := s.Producer("a")
			if err != nil {
				t.Fatal(err)
			}
			if got := a != nil; got != tc.visible {
				t.Errorf("change visible %t, want %t: %+v", got, tc.visible, a)
			}
			// A full disk leaves the store usable; any other failure
			// leaves it in an unknown state: every later write is refused
			// until it is opened again.
			_, err = s.InitProducer("b")
			if tc.diskFull && err != nil {
				t.Fatalf("write after a full disk: %v", err)
			}
			if !tc.diskFull && !errors.Is(err, ErrWriteFailed) {
				t.Fatalf("write after a failed commit: %v, want ErrWriteFailed", err)
			}
		})
	}
}

// TestStoreRefusalIsNotAFailure: a transaction its own code refuses wrote
// nothing; the store goes on.
func TestStoreRefusalIsNotAFailure(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if err := s.Abort(&Checkpoint{ID: 3, StartedAt: time.Now()}, "x"); err != nil {
		t.Fatal(err)
	}
	err := s.Commit(3, time.Now(), 1, 10)
	if err == nil || errors.Is(err, ErrWriteFailed) {
		t.Fatalf("commit of an aborted checkpoint: %v", err)
	}
	if err := s.Reserve(9); err != nil {
		t.Fatalf("reserve after a refusal: %v", err)
	}
}
