package server

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/recovery"
)

// TestTableParkedStoreFaultSweep fails each state store write transaction
// of a workload that parks a table stream and lands its commits in turn
// (refused for space before it writes, EIO before it writes, a failed
// fdatasync after its commit), restarts the engine when the fault
// stopped it, lets the parked commits land and checks the destination as
// `eosink verify` does: each table holds each committed checkpoint's
// files of its stream once, from its own snapshot, and nothing else; no
// file is missing or in no manifest; nothing stays parked.
func TestTableParkedStoreFaultSweep(t *testing.T) {
	txns := parkedSweepRun(t, "", -1)
	if txns < 5 {
		t.Fatalf("the workload runs only %d state store write transactions", txns)
	}
	modes := []string{"sync-eio", "enospc", "eio"}
	for _, mode := range modes {
		for n := 0; n < txns; n++ {
			parkedSweepRun(t, mode, n)
			if t.Failed() {
				return
			}
		}
	}
	t.Logf("parked tables store fault sweep: %d transactions, modes %v", txns, modes)
}

// parkedSweepRun runs the workload, failing its n-th store write
// transaction after the setup as mode says (n < 0: none), and returns
// how many the workload ran.
func parkedSweepRun(t *testing.T, mode string, n int) int {
	t.Helper()
	r, _ := parkRig(t)
	f := r.withStoreFaults()
	e := startParkTables(t, r)
	seq := int64(0)
	sendAll := func(streams ...string) {
		for _, s := range streams {
			seq++
			_, _ = send(e, nil, s, seq, 3) // refused under a fault: not counted
		}
	}
	try := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = e.Checkpoint(ctx)
		cancel()
	}
	sendAll(tableStream, otherTable)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	base := f.count()
	where := fmt.Sprintf("mode %s, transaction %d", mode, n)
	if n >= 0 {
		var err error
		phase := recovery.BeforeCommit
		switch mode {
		case "enospc":
			err = errPageENOSPC
		case "eio":
			err = errPageEIO
		case "sync-eio":
			err, phase = syscall.EIO, recovery.AfterCommit
		}
		f.set(func(i int, _ string, ph recovery.Phase) error {
			if i == base+n && ph == phase {
				return err
			}
			return nil
		})
	}
	sendAll(tableStream, otherTable)
	try()
	sendAll(otherTable)
	try()
	unplant(t, r, planted)
	waitLandedOrStopped(e, 2*time.Second)
	ran := f.count() - base
	f.set(nil)
	f.mu.Lock()
	fired := len(f.fired)
	f.mu.Unlock()
	if n >= 0 && fired == 0 {
		t.Fatalf("%s: the fault never fired", where)
	}
	if e.Err() != nil {
		_ = e.Close() // its error is the injected one
		r.e = nil
		e = r.start(nil)
	}
	try() // what an aborted or stopped checkpoint left open
	deadline := time.Now().Add(5 * time.Second)
	for e.Status().TablesParked != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still parked: %s", where, e.Status().TableParked)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := e.Status(); st.Stuck != "" {
		t.Fatalf("%s: stuck %q", where, st.Stuck)
	}
	r.stop()
	wantVerified(t, local.New(r.fs, rigDest, rigStaging), 2, where)
	return ran
}
