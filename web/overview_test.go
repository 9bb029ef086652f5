package web

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eosink/eosink/recovery"
)

// readCounter counts the overview's reads of the state store.
type readCounter struct {
	Engine
	reads *atomic.Int64
}

func (c readCounter) CheckpointRecords(before uint64, limit int) ([]recovery.Checkpoint, error) {
	c.reads.Add(1)
	return c.Engine.CheckpointRecords(before, limit)
}

func (c readCounter) CheckpointRecord(id uint64) (*recovery.Checkpoint, error) {
	c.reads.Add(1)
	return c.Engine.CheckpointRecord(id)
}

// TestOverviewKeptUntilStoreChanges: the overview polled in a loop reads
// the state store once per change of it (it read 100 rows and the files of
// 50 on every load: a dashboard polling it made every write wait), and a
// checkpoint shows at the next load.
func TestOverviewKeptUntilStoreChanges(t *testing.T) {
	var reads atomic.Int64
	r := newRig(t, rigOpts{engine: func(e Engine) Engine { return readCounter{e, &reads} }})
	r.seed()
	if body := r.page(t, "/ui/"); !strings.Contains(body, "clicks") {
		t.Fatalf("overview without the seeded stream clicks:\n%s", body)
	}
	first := reads.Load()
	if first == 0 {
		t.Fatal("the overview read nothing from the state store")
	}
	for range 30 {
		r.page(t, "/ui/")
	}
	if n := reads.Load() - first; n != 0 {
		t.Fatalf("30 loads with no change read the store %d more times, want 0", n)
	}
	r.write("orders", "{\"id\":1}\n")
	if body := r.page(t, "/ui/"); strings.Contains(body, "orders") {
		t.Fatal("orders shown before its checkpoint")
	}
	r.checkpoint()
	if body := r.page(t, "/ui/"); !strings.Contains(body, "orders") {
		t.Fatalf("the overview after a checkpoint does not show its stream orders:\n%s", body)
	}
}
