package server

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// A long disk-full stretch in the model test (diskFullStart, a rare
// store event): for tens of steps the data dir refuses writes with ENOSPC
// (the staging files', the manifests', the lease's) and the state store
// refuses its write transactions for space, but one operation in pass
// (the engine's own deletes freed a little, and the next write took it).
// The model's usual steps go on meanwhile — writes, duplicates, keyed
// writes, inits, checkpoints, injected faults, crashes and restarts —
// and answer as a full disk makes them: a refusal for space is an answer
// (507), never a reason to stop the engine (ErrWriteFailed) or to wedge a
// client. Steps that need a disk with room (store losses and copies,
// DELETE and expiry, planted manifests, the world's steps, the dooms of
// doomBehindStuck and doomAtBlockEnd) wait for the end. Then space comes
// back (diskFullEnd): a batch commits, health clears, without a restart.
type modelDiskFull struct {
	left      int          // steps the stretch lasts yet; 0: the disk has room
	initTries int          // an init's tries in a row, each refused for space
	began     time.Time    // of the stretch
	pass      int64        // while full, one refusable operation in pass goes through
	on        atomic.Bool  // full
	seen      atomic.Int64 // refusable operations met while full
	refused   atomic.Int64 // of them refused
}

// refuse reports whether the next refusable operation is refused: the
// pass-th part of them, picked by a hash of their count (a period would
// lock in step with a retry loop that takes as many operations a try).
func (f *modelDiskFull) refuse() bool {
	if !f.on.Load() {
		return false
	}
	z := uint64(f.seen.Add(1)) * 0x9e3779b97f4a7c15 // splitmix64's finalizer
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	if (z^z>>31)%uint64(f.pass) == 0 {
		return false
	}
	f.refused.Add(1)
	return true
}

// injector is the model's filesystem injector: the full disk first, then
// whatever the steps set in sw (faults, crash points).
func (mr *modelRun) injector() faultfs.Injector {
	return faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpWrite && mr.full.refuse() {
			return syscall.ENOSPC
		}
		return mr.sw.MaybeError(op)
	})
}

// newInjectFS is the engine's view of base, through injector.
func (mr *modelRun) newInjectFS(base afero.Fs) *faultfs.InjectFS {
	return faultfs.NewInjectFS(base, mr.injector())
}

// withFullStore has the state store's write transactions refused for
// space while the disk is full, before the faults the steps set
// (storeFull).
func (mr *modelRun) withFullStore() {
	before := mr.r.tweak
	mr.r.tweak = func(c *Config) {
		before(c)
		inner := c.StoreOptions.WriteFault
		c.StoreOptions.WriteFault = func(op string, ph recovery.Phase) error {
			if ph == recovery.BeforeCommit && mr.full.refuse() {
				return errPageENOSPC
			}
			if inner == nil {
				return nil
			}
			return inner(op, ph)
		}
	}
}

// diskFullStart fills the disk for the next 20-70 steps.
func (mr *modelRun) diskFullStart() {
	mr.full.left = 20 + mr.rng.IntN(50)
	mr.full.pass = int64(2 + mr.rng.IntN(3))
	mr.full.on.Store(true)
	mr.full.began = time.Now()
	mr.st.diskFulls++
	mr.note("disk full for %d steps (1 in %d operations passes)", mr.full.left, mr.full.pass)
}

// diskFullStep counts a step of the stretch down, and checks that the
// full disk did not stop the engine: the store refuses only for space
// here (its other failures are not injected), so a store that gave up
// (ErrWriteFailed) took a refusal for a failed write.
func (mr *modelRun) diskFullStep() {
	if mr.full.left == 0 {
		return
	}
	mr.st.diskFullSteps++
	if err := mr.e.Err(); errors.Is(err, recovery.ErrWriteFailed) {
		mr.fail("a state store write refused for space stopped the engine: %v", err)
	}
	if mr.full.left--; mr.full.left == 0 {
		mr.diskFullEnd()
	}
}

// diskFullEnd: space comes back. A doomed checkpoint the stretch left
// aborts, a batch is accepted and commits, and health says the disk is
// fine again, by itself.
func (mr *modelRun) diskFullEnd() {
	mr.full.left = 0
	mr.full.on.Store(false)
	defer func(began time.Time) { mr.st.diskFullTime += time.Since(began) }(mr.full.began)
	mr.note("disk has room again (%d of %d operations refused)", mr.full.refused.Load(), mr.full.seen.Load())
	if mr.crash != nil && mr.crash.Crashed() || mr.e.Err() != nil {
		if errors.Is(mr.e.Err(), recovery.ErrWriteFailed) {
			mr.fail("a state store write refused for space stopped the engine: %v", mr.e.Err())
		}
		mr.restart(mr.rng.IntN(2) == 0)
	}
	mr.sw.Set(nil)
	mr.crash = nil
	mr.settleDoomed()
	if p := mr.lastInited(); p != "" {
		s := mr.streams[mr.rng.IntN(len(mr.streams))]
		if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, s, 1); err != nil {
			mr.fail("write %s/%s once space came back: %v", p, s, err)
		}
	}
	commitAll(mr.t, mr.e, mr.m, "once space came back", mr.fail)
	if st := mr.e.Status(); st.DiskFull != "" || !st.Ready || st.Failed != "" {
		mr.fail("status once space came back and a checkpoint committed: %+v", st)
	}
	mr.fullCheck()
}

// initRefusedForSpace: init of p answered "disk full" during a stretch.
// Nothing was recorded, or the new epoch was and the barrier checkpoint
// could not reserve its ids (nothing cut), or it ran (and ended) before
// the answer. The client sends init again, as after any 507, until it is
// answered; the model takes the epoch the engine holds and the barrier's
// end from the checkpoint log. It reports whether p is still not inited.
func (mr *modelRun) initRefusedForSpace(p string, inited bool, open uint64, snap map[[2]string]int64, err error) (skip bool) {
	mr.st.diskFullInits++
	if state, ran := mr.ckLog.state(open); ran && mr.e.Status().OpenID > open {
		mr.m.checkpointed(snap, state == recovery.Committed)
		mr.m.resolveAnon(mr.t, mr.e)
	}
	ps, ok := mr.e.Producer(wireID(p))
	switch {
	case !ok && inited:
		mr.fail("init %s refused for space (%v): the producer is gone", p, err)
	case !ok:
		return true // inited at a later step
	case inited && ps.Epoch != mr.m.epoch[p] && ps.Epoch != mr.m.epoch[p]+1:
		mr.fail("init %s refused for space (%v): epoch %d, was %d", p, err, ps.Epoch, mr.m.epoch[p])
	}
	mr.m.epoch[p] = ps.Epoch
	mr.world.touchUnsure(p, mr.clock)
	mr.note("init %s refused for space: %v (epoch now %d); the client inits again", p, err, ps.Epoch)
	if mr.full.initTries++; mr.full.initTries > 200 {
		mr.fail("init %s refused for space 200 times in a row, 1 in %d operations passing: %v", p, mr.full.pass, err)
	}
	defer func() { mr.full.initTries = 0 }()
	return mr.initProducer(p, true)
}

// checkpointRefusedForSpace: a checkpoint answered "disk full" during a
// stretch: reserving the ids it hands out was refused, so nothing was
// cut (a doomed open checkpoint aborted alone is settleDoomed's).
func (mr *modelRun) checkpointRefusedForSpace(id uint64, err error) {
	mr.st.diskFullCheckpoints++
	if got := mr.e.Status().OpenID; got != id {
		if state, ran := mr.ckLog.state(id); !ran || state != recovery.Aborted {
			mr.fail("checkpoint %d refused for space (%v), yet open is %d (%s)", id, err, got, state)
		}
	}
	mr.note("checkpoint %d refused for space: %v", id, err)
}

// checkpointBesideInits: during a stretch, a checkpoint runs while the
// client of an idle producer (nothing of it unprepared: its init is no
// barrier) inits again and again, answered 507 or a new epoch: the
// store's write transactions of both interleave, many refused for space.
// Each refusal must stay an answer: before the write mutex of
// recovery.Store.update, a refused one whose rollback another writer's
// commit followed looked visible, and the store stopped the engine
// (TestStoreDiskFullBesideWriters; the window is microseconds wide, and
// the model's writers rarely meet in it).
func (mr *modelRun) checkpointBesideInits() {
	var p string
	for _, q := range mr.producers {
		if _, inited := mr.m.epoch[q]; inited && !mr.epochUnsure[q] && mr.idle(q) {
			p = q
		}
	}
	if p == "" {
		mr.checkpoint()
		return
	}
	mr.st.diskFullBeside++
	e, known, unsure := mr.e, mr.m.epoch[p], false
	mr.checkpointBeside(func(done <-chan struct{}) {
		for range 30 {
			select {
			case <-done:
				return
			default:
			}
			ps, err := e.InitProducer(mr.t.Context(), wireID(p))
			switch {
			case err == nil:
				known = ps.Epoch
				for _, s := range mr.streams {
					got, ok := ps.Streams[s]
					if !ok {
						got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
					}
					if want := mr.m.prepared[[2]string{p, s}]; got.NextSeq != want || got.CommittedSeq != want-1 {
						mr.fail("I12: init of idle %s beside a checkpoint: %s next %d committed %d, want %d, %d", p, s, got.NextSeq, got.CommittedSeq, want, want-1)
					}
				}
			case errors.Is(err, ErrDiskFull):
				mr.st.diskFullInits++
			default:
				unsure = true // cut by a fault or a crash: only the store knows
				return
			}
		}
	})
	mr.world.touchUnsure(p, mr.clock)
	if ps, ok := mr.e.Producer(wireID(p)); ok && mr.e.Err() == nil && mr.e == e {
		if ps.Epoch < known {
			mr.fail("init of %s beside a checkpoint answered epoch %d, the engine holds %d", p, known, ps.Epoch)
		}
		mr.m.epoch[p] = ps.Epoch
		return
	}
	if mr.e != e {
		// Restarted by the checkpoint's end: the epoch the store kept.
		if ps, ok := mr.e.Producer(wireID(p)); ok && ps.Epoch >= known {
			mr.m.epoch[p] = ps.Epoch
			return
		}
		mr.fail("init of %s beside a checkpoint answered epoch %d; after the restart: %v", p, known, mr.e.Status())
	}
	mr.m.epoch[p] = known
	if unsure {
		mr.epochUnsure[p] = true
	}
}

// idle reports whether producer p has nothing accepted beyond its
// prepared state.
func (mr *modelRun) idle(p string) bool {
	for k, next := range mr.m.next {
		if k[0] == p && next != mr.m.prepared[k] {
			return false
		}
	}
	return true
}

func (s modelStats) diskFullString() string {
	return fmt.Sprintf("%d disk-full stretches (%d steps, %v; %d inits and %d checkpoints refused for space; %d checkpoints beside an idle producer's inits)",
		s.diskFulls, s.diskFullSteps, s.diskFullTime.Round(time.Millisecond), s.diskFullInits, s.diskFullCheckpoints, s.diskFullBeside)
}
