package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// storeFaults counts the state store's write transactions and fails the
// ones a test chooses, through recovery.Options.WriteFault. It is safe for
// concurrent use.
type storeFaults struct {
	mu    sync.Mutex
	txns  int                                                // write transactions begun (BeforeCommit calls)
	ops   []string                                           // their operations, in order
	fail  func(n int, op string, phase recovery.Phase) error // nil fails nothing
	fired []string                                           // operations failed so far
}

// withStoreFaults has r's engines' state store writes go through the
// returned storeFaults (failing none until set), after r's tweak.
func (r *rig) withStoreFaults() *storeFaults {
	f := &storeFaults{}
	before := r.tweak
	r.tweak = func(c *Config) {
		if before != nil {
			before(c)
		}
		c.StoreOptions.WriteFault = f.hook
	}
	return f
}

func (f *storeFaults) hook(op string, phase recovery.Phase) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.txns
	if phase == recovery.BeforeCommit {
		f.txns++
		f.ops = append(f.ops, op)
	} else {
		n-- // the transaction BeforeCommit counted
	}
	if f.fail == nil {
		return nil
	}
	err := f.fail(n, op, phase)
	if err != nil {
		f.fired = append(f.fired, op)
	}
	return err
}

func (f *storeFaults) set(fail func(n int, op string, phase recovery.Phase) error) {
	f.mu.Lock()
	f.fail = fail
	f.mu.Unlock()
}

// count returns how many write transactions began.
// firedAny reports whether a fault fired.
func (f *storeFaults) firedAny() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fired) > 0
}

func (f *storeFaults) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.txns
}

// failOp fails the next `times` transactions of op at phase with err.
func failOp(op string, phase recovery.Phase, err error, times int) func(int, string, recovery.Phase) error {
	var mu sync.Mutex
	return func(_ int, o string, ph recovery.Phase) error {
		mu.Lock()
		defer mu.Unlock()
		if o != op || ph != phase || times == 0 {
			return nil
		}
		times--
		return err
	}
}

// The errors the disk gives: a page write refused for space (nothing
// written), a write error, a failed fdatasync after the change.
var (
	errPageENOSPC = &os.PathError{Op: "write", Path: "state.db", Err: syscall.ENOSPC}
	errPageEIO    = &os.PathError{Op: "write", Path: "state.db", Err: syscall.EIO}
)

func storeRig(t *testing.T) (*rig, *storeFaults) {
	t.Helper()
	f := &storeFaults{}
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.StoreOptions.WriteFault = f.hook }
	return r, f
}

func waitFailed(t *testing.T, e *Engine, within time.Duration) bool {
	t.Helper()
	select {
	case <-e.Failed():
		return true
	case <-time.After(within):
		return false
	}
}

// TestStoreWriteFailureStopsEngine: after any failed write transaction of
// the state store (other than a full disk's clean refusal) the engine stops,
// and a restart recovers with every prepared batch committed exactly once.
func TestStoreWriteFailureStopsEngine(t *testing.T) {
	tests := []struct {
		op    string
		phase recovery.Phase
		err   error
	}{
		{"commit", recovery.BeforeCommit, errPageEIO},
		{"commit", recovery.AfterCommit, syscall.EIO},
		{"prepare", recovery.AfterCommit, syscall.EIO},
		{"init producer", recovery.BeforeCommit, errPageEIO},
		{"abort", recovery.BeforeCommit, errPageEIO},
		{"reserve", recovery.AfterCommit, syscall.ENOSPC}, // a failed fdatasync is never "disk full"
	}
	for _, tc := range tests {
		t.Run(tc.op+"/"+tc.err.Error(), func(t *testing.T) {
			r, f := storeRig(t)
			f.set(failOp(tc.op, tc.phase, tc.err, 1))
			base := faultfs.NewCrashFS()
			var sw faultfs.SwapInjector
			fs := faultfs.NewInjectFS(base, &sw)
			r.fs = fs
			e, err := r.open(fs, 10*time.Second)
			if err != nil {
				if tc.op != "reserve" {
					t.Fatalf("wait ready: %v", err)
				}
			} else {
				ps, err := e.InitProducer(t.Context(), "p")
				if tc.op == "init producer" {
					if err == nil {
						t.Fatal("init producer: no error")
					}
				} else {
					if err != nil {
						t.Fatal(err)
					}
					mustSend(t, e, &Producer{ID: "p", Epoch: ps.Epoch}, "s", 0, 2)
					if tc.op == "abort" {
						sw.Set(faultfs.FailNth(0, faultfs.Kinds(faultfs.OpSync), syscall.EIO))
					}
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					_, _ = e.Checkpoint(ctx)
					cancel()
				}
			}
			if !waitFailed(t, e, 5*time.Second) {
				t.Fatalf("engine still running after a failed %s transaction (fired %v); status %+v", tc.op, f.fired, e.Status())
			}
			if !errors.Is(e.Err(), recovery.ErrWriteFailed) {
				t.Fatalf("engine error %v, want ErrWriteFailed", e.Err())
			}
			sw.Set(nil)
			f.set(nil)
			r.stop()
			e = r.start(base)
			if tc.op == "commit" || tc.op == "prepare" {
				// prepared (durably, whatever the error said): it commits.
				r.fs = base
				r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true}, Exact: true})
			}
			if _, err := e.InitProducer(t.Context(), "q"); err != nil {
				t.Fatalf("after restart: %v", err)
			}
		})
	}
}

// TestStoreDiskFull: a state-store write refused for space with nothing
// recorded is an answer (disk full), not a reason to stop; once space is
// back the engine goes on by itself.
func TestStoreDiskFull(t *testing.T) {
	t.Run("init producer", func(t *testing.T) {
		r, f := storeRig(t)
		e := r.start(nil)
		f.set(failOp("init producer", recovery.BeforeCommit, errPageENOSPC, 1))
		_, err := e.InitProducer(t.Context(), "p")
		if !errors.Is(err, durable.ErrDiskFull) {
			t.Fatalf("init producer on a full disk: %v", err)
		}
		if st := e.Status(); st.Failed != "" || !strings.Contains(st.DiskFull, "no space") {
			t.Fatalf("status after a full disk: %+v", st)
		}
		if _, err := e.InitProducer(t.Context(), "p"); err != nil {
			t.Fatalf("init producer once space is back: %v", err)
		}
		if st := e.Status(); st.DiskFull != "" {
			t.Fatalf("disk full still reported after a write succeeded: %+v", st)
		}
	})
	t.Run("prepare", func(t *testing.T) {
		r, f := storeRig(t)
		e := r.start(nil)
		p := r.initProducer("p")
		mustSend(t, e, p, "s", 0, 2)
		f.set(failOp("prepare", recovery.BeforeCommit, errPageENOSPC, 1))
		if res := r.checkpoint(); res.State != recovery.Aborted || !strings.Contains(res.Error, "disk full") {
			t.Fatalf("checkpoint on a full disk: %+v", res)
		}
		if e.Err() != nil {
			t.Fatalf("engine stopped: %v", e.Err())
		}
		if _, err := send(e, p, "s", 0, 2); err != nil {
			t.Fatalf("resend: %v", err)
		}
		r.commit()
		r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true}, Exact: true})
	})
	t.Run("commit", func(t *testing.T) {
		r, f := storeRig(t)
		e := r.start(nil)
		mustSend(t, e, nil, "s", 1, 2)
		f.set(failOp("commit", recovery.BeforeCommit, errPageENOSPC, 3))
		r.commit()
		if e.Err() != nil || len(f.fired) != 3 {
			t.Fatalf("engine error %v, faults fired %v", e.Err(), f.fired)
		}
		r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true}, Exact: true})
	})
	t.Run("reserve at recovery", func(t *testing.T) {
		r, f := storeRig(t)
		f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 3))
		e := r.start(nil)
		if e.Err() != nil || len(f.fired) != 3 {
			t.Fatalf("engine error %v, faults fired %v", e.Err(), f.fired)
		}
	})
	t.Run("empty checkpoint", func(t *testing.T) {
		r, f := storeRig(t)
		r.tweak = func(c *Config) { c.StoreOptions.WriteFault = f.hook; c.idBlock = 2 } // the first barrier must reserve
		e := r.start(nil)
		f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := e.Checkpoint(ctx); !errors.Is(err, durable.ErrDiskFull) {
			t.Fatalf("empty checkpoint needing an id reservation on a full disk: %v", err)
		}
		if res := r.checkpoint(); res.State != recovery.Committed || e.Err() != nil {
			t.Fatalf("checkpoint once space is back: %+v %v", res, e.Err())
		}
	})
}

// TestIdleEngineWritesNothing: periodic checkpoints with nothing to commit
// write and sync nothing (DESIGN), so an idle service does no I/O.
func TestIdleEngineWritesNothing(t *testing.T) {
	r, f := storeRig(t)
	r.tweak = func(c *Config) { c.StoreOptions.WriteFault = f.hook; c.CheckpointInterval = time.Millisecond }
	e := r.start(nil)
	before := f.count()
	time.Sleep(100 * time.Millisecond)
	if n := f.count() - before; n != 0 {
		t.Fatalf("idle engine ran %d state-store write transactions: %v", n, f.ops[before:])
	}
	if list, err := e.store.List(10); err != nil || len(list) != 0 {
		t.Fatalf("idle engine recorded checkpoints: %+v %v", list, err)
	}
	// Work still gets checkpointed periodically.
	mustSend(t, e, nil, "s", 1, 2)
	deadline := time.Now().Add(5 * time.Second)
	for e.Status().LastDone == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.Status().LastDone == 0 {
		t.Fatal("periodic checkpoint did not commit the write")
	}
}

// TestDeleteProducerRefusedForSpace: a DELETE whose forgotten-producers
// document the full disk refuses is answered as every call refused for
// space is (507 insufficient_storage), not 503 not_ready with "recovery
// running"; one refused because the lease is stale (its renewal refused)
// is a retry (503 not_ready), not an internal error (500). Both forget
// nothing, and the DELETE passes once space is back. (Found by
// TestDiskFullLongEpisode.)
func TestDeleteProducerRefusedForSpace(t *testing.T) {
	var full, leaseFull atomic.Bool
	fs := faultfs.NewInjectFS(faultfs.NewCrashFS(), faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpWrite && (full.Load() || leaseFull.Load() && strings.Contains(op.Path, rigNode+".json")) {
			return syscall.ENOSPC
		}
		return nil
	}))
	r := newRig(t, fs)
	r.tweak = func(c *Config) {
		c.Leaser, c.LeaseTimeout = local.New(c.FS, rigDest, rigStaging), 300*time.Millisecond
	}
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 1)
	r.commit()

	full.Store(true)
	err := e.DeleteProducer(t.Context(), "p")
	full.Store(false)
	if !errors.Is(err, ErrDiskFull) || errors.Is(err, ErrNotReady) {
		t.Fatalf("DELETE with its document refused for space: %v, want disk full (507), not not ready", err)
	}
	leaseFull.Store(true)
	waitFor(t, "the lease to go stale", func() bool { return errors.Is(e.life.leaseCheck(), ErrLeaseStale) })
	err = e.DeleteProducer(t.Context(), "p")
	leaseFull.Store(false)
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("DELETE with the lease stale: %v, want not ready (503, retry)", err)
	}
	if _, ok := e.Producer("p"); !ok {
		t.Fatal("producer forgotten by a refused DELETE")
	}
	waitFor(t, "the DELETE to pass", func() bool { return e.DeleteProducer(t.Context(), "p") == nil })
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true}, Exact: true})
}
