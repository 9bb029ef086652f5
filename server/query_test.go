package server

import (
	"errors"
	"testing"

	"github.com/eosink/eosink/recovery"
)

// TestCheckpointQueries: the read side's queries give a stored checkpoint
// with its files, pages newest first without files, and ErrNotFound for
// the open one.
func TestCheckpointQueries(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true // records of its own: the end check skips their ranges
	e := r.start(nil)
	var ids []uint64
	for range 3 {
		if _, err := e.Write(Write{Stream: "views", Ext: "txt", Data: []byte("a\n"), Records: 1}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.checkpoint().ID)
	}
	c, err := e.CheckpointRecord(ids[1])
	if err != nil || c.ID != ids[1] || c.State != recovery.Committed || len(c.Files) != 1 {
		t.Fatalf("checkpoint %d: %+v, %v", ids[1], c, err)
	}
	if _, err := e.CheckpointRecord(e.Status().OpenID); !errors.Is(err, recovery.ErrNotFound) {
		t.Fatalf("open checkpoint: %v, want ErrNotFound", err)
	}
	newest, err := e.CheckpointRecords(0, 2)
	if err != nil || len(newest) != 2 || newest[0].ID != ids[2] || newest[1].ID != ids[1] || newest[0].Files != nil {
		t.Fatalf("newest 2: %+v, %v", newest, err)
	}
	older, err := e.CheckpointRecords(newest[1].ID, 10)
	if err != nil || len(older) != 1 || older[0].ID != ids[0] {
		t.Fatalf("before %d: %+v, %v", newest[1].ID, older, err)
	}
}
