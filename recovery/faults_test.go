package recovery

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// pointRootOutOfMap rewrites the root page of the bbolt file at p so that
// every leaf element's key lies ~2 GiB past the element (just within bbolt's 2 GiB slice bound): a read of it
// faults on memory that no mapping covers. The layout is bbolt v1's: page
// header {id u64, flags u16, count u16, overflow u32}, meta after it
// {magic, version, pageSize, flags u32; root bucket {root pgid, sequence
// u64}; freelist, pgid, txid, checksum u64},
// leaf elements {flags, pos, ksize, vsize u32}.
func pointRootOutOfMap(t *testing.T, p string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageSize := int(le.Uint32(data[16+8:]))
	var root uint64
	var txid uint64
	for m := range 2 { // the meta page with the newest transaction
		meta := data[m*pageSize+16:]
		if id := le.Uint64(meta[48:]); id >= txid {
			txid, root = id, le.Uint64(meta[16:])
		}
	}
	page := data[int(root)*pageSize:]
	if flags := le.Uint16(page[8:]); flags != 0x02 {
		t.Fatalf("root page %d has flags %#x, want a leaf page: bbolt's layout changed", root, flags)
	}
	count := int(le.Uint16(page[10:]))
	for i := range count {
		le.PutUint32(page[16+16*i+4:], 0x7FFFFE00)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A state store whose pages point outside the file faults inside bbolt
// (a SIGSEGV on its memory map, not a Go panic). Open must still report it
// as ErrCorrupt naming the file; it crashed the process ("unexpected fault
// address", seen once in the suite's -race pass of TestStoreCorruption).
func TestStoreFaultOnOpenIsCorrupt(t *testing.T) {
	s, p := openTemp(t)
	if err := s.Prepare(&Checkpoint{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pointRootOutOfMap(t, p)
	s, err := Open(p)
	if err == nil {
		s.Close()
		t.Fatal("opened a store whose root page points outside the file")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("error does not name the file or the problem: %v", err)
	}
}

// TestStoreDiskFullBesideWriters: a page write refused for space while
// other writers commit is still "disk full", and the store goes on. The
// check that the refused transaction is not visible compared its id with
// the newest one readers see; bbolt gives the next writer the same id, so
// a writer that committed between the rollback and the check made the
// refusal look visible: ErrWriteFailed, and the engine stopped on a full
// disk (TestDiskFullLongEpisode, seed 5: "init producer p2: state store
// write failed: ... no space left on device").
func TestStoreDiskFullBesideWriters(t *testing.T) {
	refused := &os.PathError{Op: "write", Path: "state.db", Err: syscall.ENOSPC}
	s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WriteFault: func(op string, ph Phase) error {
		if op == "init producer" && ph == BeforeCommit {
			return refused
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { // another writer, committing all along
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := s.Reserve(id); err != nil {
				done <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
		_, err := s.InitProducer("a")
		if !errors.Is(err, durable.ErrDiskFull) || errors.Is(err, ErrWriteFailed) {
			close(stop)
			<-done
			t.Fatalf("refusal %d for space beside a committing writer: %v, want disk full", i, err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("the other writer: %v", err)
	}
}
