package server

import (
	"context"
	"os"
	"testing"

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
