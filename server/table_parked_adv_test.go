package server

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// Adversarial tests of parked tables (docs/tables.md "Parked tables").

// TestTableParkedOlderStoreCopyLandsOnce: a copy of the state store taken
// while stream A is parked (its row A/N) comes back after the row landed
// and A's table took later commits, which expired N's snapshot
// (keep_snapshots 1; the node's newest snapshot always stays). The start
// finds the row again; landing it must see that the table holds it (a
// later checkpoint of this node is in A's table: A's later table commits
// came after its rows, in order), not append N's files a second time (I2).
func TestTableParkedOlderStoreCopyLandsOnce(t *testing.T) {
	r, d := parkRig(t)
	e := r.start(nil)
	conf := tableConf
	conf.KeepSnapshots = 1
	if _, err := e.PutStream(context.Background(), tableStream, conf); err != nil {
		t.Fatal(err)
	}
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	must := func(seq int64) {
		t.Helper()
		if _, err := send(r.e, nil, tableStream, seq, 3); err != nil {
			t.Fatal(err)
		}
		exp.Must[invariant.BatchID{Stream: tableStream, Seq: seq}] = true
	}
	must(1)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	must(2)
	parkedCheckpoint(t, e)
	wantParked(t, e, tableStream)
	// The copy: A's row is in it.
	r.stop()
	older, err := os.ReadFile(r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	if err := r.fs.Remove(rigDest + "/" + planted); err != nil {
		t.Fatal(err)
	}
	waitUnparked(t, e)
	for seq := int64(3); seq <= 5; seq++ {
		must(seq)
		parkedCheckpoint(t, e)
	}
	wantTableOf(t, d, tableStream, "before the older copy comes back", 2, "15")
	r.stop()
	if err := os.WriteFile(r.storePath, older, 0o600); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the older copy's row landed again", 2, "15")
	r.check(exp)
}

// TestTableParkedLoopStopsWithEngine: the engine stops (a failed fsync at
// a checkpoint of the other stream) while A is parked and its row's retry
// is pending. The park loop must stop with it (I14: a failed fsync stops
// the engine everywhere; the next start's recovery decides), not go on
// committing A's parked checkpoint into its table and deleting the row
// from a store the stopped engine no longer trusts.
func TestTableParkedLoopStopsWithEngine(t *testing.T) {
	r, d := parkRig(t)
	e := r.start(nil)
	for _, s := range []string{tableStream, otherTable} {
		if _, err := e.PutStream(context.Background(), s, tableConf); err != nil {
			t.Fatal(err)
		}
	}
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	must := func(s string, seq int64) {
		t.Helper()
		if _, err := send(r.e, nil, s, seq, 3); err != nil {
			t.Fatal(err)
		}
		exp.Must[invariant.BatchID{Stream: s, Seq: seq}] = true
	}
	must(tableStream, 1)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	must(tableStream, 2)
	parkedCheckpoint(t, e)
	wantParked(t, e, tableStream)
	// B's next checkpoint stops the engine at its manifest.
	if _, err := send(e, nil, otherTable, 2, 3); err != nil {
		t.Fatal(err)
	}
	exp.Must[invariant.BatchID{Stream: otherTable, Seq: 2}] = true // prepared: the replay commits it
	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.Checkpoint(ctx); err == nil {
		t.Fatal("checkpoint passed with its injected failed fsync")
	}
	select {
	case <-e.Failed():
	case <-ctx.Done():
		t.Fatal("the engine did not stop")
	}
	// The operator removes the planted version; the stopped engine's
	// loop must not act on it (its retry is due every RetryMax, 5 ms).
	if err := r.fs.Remove(rigDest + "/" + planted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	wantTableOf(t, d, tableStream, "after the engine stopped", 1, "3")
	rows, err := e.store.Parked()
	if err != nil || len(rows) != 1 {
		t.Fatalf("parked rows after the engine stopped: %+v, %v; want A's, untouched", rows, err)
	}
	_ = e.Close() // stopped already: its error is the injected one
	r.e = nil
	e = r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the restart", 2, "6")
	r.check(exp)
}
