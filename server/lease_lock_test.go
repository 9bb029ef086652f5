package server

import (
	"context"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// TestOrphanedTableLockOfFormerIncarnation: a process killed while it
// held the lock of a table's version hint (tb/metadata/version-hint.text
// .lock, written like a lease under a lock file naming its writer)
// leaves the lock behind. Every later start on the same data dir knows
// that process dead (the state store's file lock proves it), so its
// lock must be broken at once — not after StaleLock of real time (10 s
// by default, during which every commit of the node is retried and
// held back). Found by the model test with tables (its starts waited on
// such a lock); it holds for the start right after the killed one, but
// that start's first lease write pruned the memo to itself, so the start
// after it no longer knew the killed one, and waited.
func TestOrphanedTableLockOfFormerIncarnation(t *testing.T) {
	r, d := tableLeasedRig(t)
	e := r.start(nil)
	if _, err := e.PutStream(t.Context(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 2)
	r.commit()
	killed := e.lease.doc.Incarnation
	r.stop()
	// Killed holding the hint's lock: the lock, born named, stays.
	lock := rigDest + "/" + layout.TableHintName(tableStream) + ".lock"
	if err := afero.WriteFile(r.fs, lock, []byte(killed), 0o644); err != nil {
		t.Fatal(err)
	}
	d.StaleLock = time.Hour // the age rule out of the way: only knowing the holder dead breaks it
	r.start(nil)            // knows killed dead; its lease write goes through
	r.stop()
	e = r.start(nil)
	mustSend(t, e, nil, tableStream, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint with a lock left by incarnation %s, two starts ago: %v (%+v, stuck %q)", killed, err, res, e.Status().Stuck)
	}
	wantTable(t, d, "after the commit", 2, 2, "4")
}
