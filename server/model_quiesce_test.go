package server

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/recovery"
)

// The model test's quiesce (every 500 steps: faults off, a checkpoint)
// may see its checkpoint abort, although no fault is on any more: an
// earlier fault can have failed a zstd stream's encoder while batches
// were accepted (compressed files are encoded as batches arrive; the
// error shows at the pre-commit). The engine then forgets those batches
// (their clients resend them); the model must too. It did not, and ran
// ahead of the engine: the next store loss counted the aborted batches
// committed and reported the engine's right committed_seq as an I12
// failure (seed 1796302382417747410 with df3dc74 applied, under -race).
func TestModelQuiesceAborted(t *testing.T) {
	mr := newModelRun(t, 1)
	p, k := "p0", [2]string{"p0", "s1"}
	mr.initProducer(p, false)
	var failed atomic.Int64
	mr.sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpWrite && strings.HasSuffix(op.Path, ".enc.inprogress") {
			failed.Add(1)
			return syscall.ENOSPC
		}
		return nil
	}))
	// Batches of s1 (zstd) until its encoder has written, and failed.
	for i := 0; failed.Load() == 0; i++ {
		if i == 50 {
			t.Fatal("the encoder of s1 never wrote")
		}
		if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, "s1", 4); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	accepted := mr.m.next[k]
	mr.quiesce()
	if st, _ := mr.ckLog.state(mr.e.Status().OpenID - 1); st != recovery.Aborted {
		t.Fatalf("the quiesce's checkpoint: %s, want aborted (the encoder failed)", st)
	}
	if mr.m.next[k] != 0 || mr.m.prepared[k] != 0 {
		t.Fatalf("model after the aborted quiesce: next %d prepared %d, want 0 and 0 (%d batches were accepted, none committed)", mr.m.next[k], mr.m.prepared[k], accepted)
	}
	// The client resends from the start, as the engine asks.
	for range accepted {
		if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, "s1", 4); err != nil {
			t.Fatal(err)
		}
	}
	mr.quiesce()
	if mr.m.prepared[k] != accepted {
		t.Fatalf("model after the second quiesce: prepared %d, want %d", mr.m.prepared[k], accepted)
	}
	checkI5(mr.t, mr.m, mr.e, mr.fail)
}
