package server

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// TestReplayFaultSweep is the fault sweep of the start: with a prepared
// checkpoint left by the previous run, it fails every filesystem operation
// of the replay in turn, then power-cuts and starts again, and checks that
// the prepared batches landed exactly once. A failed fsync must stop the
// engine (I14), as it does on the live path: the sweep of the live path
// never failed an operation of a replay, which is how a replay that
// retried a failed directory fsync and recorded the checkpoint committed
// went unseen.
func TestReplayFaultSweep(t *testing.T) {
	var fired, stopped int
	for n := int64(0); ; n++ {
		op, ok := replaySweepRun(t, n)
		if !ok {
			t.Logf("replay fault sweep: %d operations failed in turn, %d fsyncs among them stopped the engine", n, stopped)
			break
		}
		fired++
		if op.Kind == faultfs.OpSync {
			stopped++
		}
		if n > 500 {
			t.Fatal("replay fault sweep: more than 500 operations in one replay")
		}
	}
	if fired == 0 || stopped == 0 {
		t.Fatalf("replay fault sweep failed %d operations, %d fsyncs: it swept nothing", fired, stopped)
	}
}

// replaySweepRun leaves a prepared checkpoint, fails operation n of the
// replay that follows, and checks the outcome. It reports the operation
// it failed, false when the replay ran fewer than n+1 operations.
func replaySweepRun(t *testing.T, n int64) (faultfs.Op, bool) {
	t.Helper()
	base := faultfs.NewCrashFS()
	sw := &faultfs.SwapInjector{}
	inj := faultfs.NewInjectFS(base, sw)
	r := newRig(t, inj)
	e := r.start(nil)
	ps := r.initState("p")
	must := map[invariant.BatchID]bool{}
	for i, s := range []string{"a", "b", "a"} {
		seq := int64(i)
		if s == "b" {
			seq = 0
		} else if i == 2 {
			seq = 1
		}
		mustSend(t, e, &Producer{ID: "p", Epoch: ps.Epoch}, s, seq, 2)
		must[invariant.BatchID{Producer: "p", Stream: s, Seq: seq}] = true
	}
	// Prepared, then the commit is held until the engine stops.
	e.fin.Fence = func() error { return errors.New("held for the sweep") }
	done := make(chan struct{})
	go func() { defer close(done); _, _ = e.Checkpoint(t.Context()) }()
	for deadline := time.Now().Add(10 * time.Second); e.Status().Stuck == ""; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the checkpoint never got prepared")
		}
	}
	r.stop()
	<-done

	fail := faultfs.FailNth(n, sweepKinds, syscall.EIO)
	sw.Set(fail)
	e2, err := Open(r.config(inj))
	if err == nil { // else refused to start: the next start recovers
		r.e = e2
		ctx, cancel := untilCtx(func() bool { return false })
		err = e2.WaitReady(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrFailed) {
			t.Fatalf("op %d: replay: %v", n, err)
		}
	}
	op, ok := fail.Fired()
	if ok && op.Kind == faultfs.OpSync && err == nil {
		t.Fatalf("op %d: the replay went on after a failed fsync (%v): a failed fsync is never retried", n, op)
	}
	r.stop()
	sw.Set(nil)
	r.fs = base.CrashClone()
	r.start(nil)
	r.check(invariant.Expect{Must: must, Exact: true})
	r.stop()
	return op, ok
}
