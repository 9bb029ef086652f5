package catalog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

// oneState holds checkpoint 3, committed with one file.
type oneState struct{}

func (oneState) CheckpointRecord(id uint64) (*recovery.Checkpoint, error) {
	if id == 3 {
		return &recovery.Checkpoint{ID: 3, State: recovery.Committed, Files: []committer.File{{Final: "s/a.ndjson"}}, Records: 2}, nil
	}
	return nil, fmt.Errorf("checkpoint %d: %w", id, recovery.ErrNotFound)
}
func (oneState) CheckpointRecords(uint64, int) ([]recovery.Checkpoint, error) { return nil, nil }
func (oneState) StateVersion() uint64                                         { return 1 }

// CheckpointAt: the store's row when it has one; else the open checkpoint
// and those between the last ended one and it (since this start) are
// open and running; anything else is not known. The engine's status is
// asked only when the store has no row.
func TestCheckpointAt(t *testing.T) {
	c := newDest(t).catalog(Config{State: oneState{}})
	asked := 0
	live := func() Live {
		asked++
		return Live{Ready: true, OpenID: 9, OpenFiles: 2, OpenRecords: 5, OpenBytes: 50, LastDone: 6, FirstID: 4}
	}
	if ck, err := c.CheckpointAt(3, live); err != nil || ck.State != Committed || ck.FileCount != 1 || asked != 0 {
		t.Fatalf("stored: %+v %v (status asked %d times)", ck, err, asked)
	}
	for id, want := range map[uint64]string{9: Open, 7: Running, 8: Running, 6: "", 5: "", 10: "", 2: ""} {
		ck, err := c.CheckpointAt(id, live)
		switch {
		case want == "" && !errors.Is(err, ErrNoCheckpoint):
			t.Errorf("%d: %+v %v, want ErrNoCheckpoint", id, ck, err)
		case want != "" && (err != nil || ck.State != want):
			t.Errorf("%d: %+v %v, want %s", id, ck, err, want)
		}
	}
	if ck, _ := c.CheckpointAt(9, live); ck.FileCount != 2 || ck.Records != 5 || ck.Bytes != 50 || ck.Empty() {
		t.Errorf("open: %+v", ck)
	}
	notReady := func() Live { return Live{OpenID: 9, LastDone: 6, FirstID: 4} }
	if _, err := c.CheckpointAt(9, notReady); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("open while recovering: %v", err)
	}
}

// versioned is a State whose version the test moves.
type versioned struct {
	oneState
	v *uint64
}

func (s versioned) StateVersion() uint64 { return *s.v }

// Answer keeps a value until the state's version changes; an error is
// not kept.
func TestAnswerKeptUntilStateChanges(t *testing.T) {
	var v uint64 = 1
	c := newDest(t).catalog(Config{State: versioned{v: &v}})
	calls := 0
	get := func(fail bool) (any, error) {
		return c.Answer("k", func() (any, int, error) {
			calls++
			if fail {
				return calls, 8, errors.New("store read failed")
			}
			return calls, 8, nil
		})
	}
	if _, err := get(true); err == nil {
		t.Fatal("the error was lost")
	}
	for range 3 {
		if got, err := get(false); err != nil || got != 2 {
			t.Fatalf("got %v %v, want the second computation kept", got, err)
		}
	}
	v++
	if got, _ := get(false); got != 3 {
		t.Fatalf("after a state change got %v, want a new computation", got)
	}
}
