package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// sweepKinds are the operations the sweep fails or crashes after.
var sweepKinds = faultfs.AllKinds &^ faultfs.Kinds(faultfs.OpSetAttr)

// model is what a well-behaved client and the test know about producers.
type model struct {
	epoch    map[string]int64
	next     map[[2]string]int64 // accepted: next seq the client sends
	prepared map[[2]string]int64 // next seq as of the last prepared checkpoint
	anon     map[uint64][]invariant.BatchID
	must     map[invariant.BatchID]bool
	mustNot  map[invariant.BatchID]bool
	anonSeq  int64
	// answered is the highest checkpoint id an answer named: a write's
	// or a checkpoint's (I8: never used again for other data, so every
	// start opens past it).
	answered uint64
	// fatal, when set, reports a client-visible violation with the
	// caller's context (the model test's recent steps); else t.Fatalf.
	fatal func(string, ...any)
}

func newModel() *model {
	return &model{epoch: map[string]int64{}, next: map[[2]string]int64{}, prepared: map[[2]string]int64{},
		anon: map[uint64][]invariant.BatchID{}, must: map[invariant.BatchID]bool{}, mustNot: map[invariant.BatchID]bool{}}
}

// write sends the next batch of p on stream s; the model advances only if
// the engine accepted it.
func (m *model) write(t testing.TB, e *Engine, p, s string, n int) error {
	_, err := m.writeResult(t, e, p, s, n)
	return err
}

func (m *model) fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	if m.fatal != nil {
		m.fatal(format, args...)
	}
	t.Fatalf(format, args...)
}

// writeResult is write that also returns the engine's answer.
func (m *model) writeResult(t testing.TB, e *Engine, p, s string, n int) (WriteResult, error) {
	k := [2]string{p, s}
	seq := m.next[k]
	res, err := send(e, &Producer{ID: p, Epoch: m.epoch[p]}, s, seq, n)
	if err != nil {
		if errors.Is(err, ErrUnknownProducer) || errors.Is(err, ErrFenced) || errors.Is(err, ErrInvalidEpoch) || errors.Is(err, ErrOutOfOrder) {
			m.fatalf(t, "write %s/%s/%d: producer error for a correct batch (I12: the client is wedged): %v", p, s, seq, err)
		}
		return res, err
	}
	if res.Duplicate || res.NextSeq != seq+1 {
		m.fatalf(t, "write %s/%s/%d: %+v", p, s, seq, res)
	}
	m.next[k] = seq + 1
	m.answer(res.Checkpoint)
	return res, nil
}

// answer notes a checkpoint id an answer named.
func (m *model) answer(id uint64) { m.answered = max(m.answered, id) }

func (m *model) writeAnon(e *Engine, s string) error {
	m.anonSeq++
	id := invariant.BatchID{Stream: s, Seq: m.anonSeq}
	res, err := send(e, nil, s, m.anonSeq, 2)
	if err == nil {
		m.anon[res.Checkpoint] = append(m.anon[res.Checkpoint], id)
		m.answer(res.Checkpoint)
	}
	return err
}

// checkpointed applies a checkpoint's end: snap is the accepted state at
// its barrier; prepared says whether "prepared" became durable.
func (m *model) checkpointed(snap map[[2]string]int64, prepared bool) {
	if prepared {
		for k, v := range snap {
			m.prepared[k] = v
		}
		return
	}
	m.rollback()
}

func (m *model) rollback() {
	m.next = map[[2]string]int64{}
	for k, v := range m.prepared {
		m.next[k] = v
	}
}

func (m *model) snapshot() map[[2]string]int64 {
	out := make(map[[2]string]int64, len(m.next))
	for k, v := range m.next {
		out[k] = v
	}
	return out
}

// resolveAnon decides the anonymous batches of every ended checkpoint.
func (m *model) resolveAnon(t testing.TB, e *Engine) {
	open := e.Status().OpenID
	for id, bs := range m.anon {
		if id >= open {
			continue
		}
		c, err := e.store.Get(id)
		var state recovery.State
		switch {
		case errors.Is(err, recovery.ErrNotFound):
			state = recovery.Aborted
		case err != nil:
			t.Fatalf("store get %d: %v", id, err)
		default:
			state = c.State
		}
		if state == recovery.Prepared {
			continue
		}
		for _, b := range bs {
			if state == recovery.Committed {
				m.must[b] = true
			} else {
				m.mustNot[b] = true
			}
		}
		delete(m.anon, id)
	}
}

// expect is every batch that must be committed by now.
func (m *model) expect() invariant.Expect {
	must := map[invariant.BatchID]bool{}
	for b := range m.must {
		must[b] = true
	}
	for k, next := range m.prepared {
		for q := range next {
			must[invariant.BatchID{Producer: k[0], Stream: k[1], Seq: q}] = true
		}
	}
	return invariant.Expect{Must: must, MustNot: m.mustNot, Exact: true}
}

// checkProducers asserts I5: the engine's sequence state is the last
// prepared checkpoint's, and epochs survived.
func (m *model) checkProducers(t testing.TB, e *Engine) {
	t.Helper()
	for k, want := range m.prepared {
		st, ok := e.Producer(k[0])
		if !ok {
			t.Fatalf("I5: producer %s lost", k[0])
		}
		got, ok := st.Streams[k[1]]
		if !ok {
			got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
		}
		if got.NextSeq != want || got.CommittedSeq != want-1 {
			t.Fatalf("I5: %s/%s next %d committed %d, want next %d committed %d", k[0], k[1], got.NextSeq, got.CommittedSeq, want, want-1)
		}
		if st.Epoch != m.epoch[k[0]] {
			t.Fatalf("producer %s epoch %d, want %d", k[0], st.Epoch, m.epoch[k[0]])
		}
	}
}

// checkpointUntil runs a checkpoint, giving up when stop reports true (the
// injected crash happened and the engine may be retrying forever).
func checkpointUntil(e *Engine, stop func() bool) (CheckpointResult, error) {
	ctx, cancel := untilCtx(stop)
	defer cancel()
	return e.Checkpoint(ctx)
}

// untilCtx is a context that ends when stop reports true, or after 20 s.
func untilCtx(stop func() bool) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	go func() {
		for ctx.Err() == nil {
			if stop() {
				cancel()
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return ctx, cancel
}

type sweepMode int

const (
	modeFail sweepMode = iota
	modeCrash
	modePowerCut
	// The store modes fail the n-th write transaction of the state store
	// (through recovery.Options.WriteFault) instead of a file operation:
	// before bbolt writes anything, as a page write refused for space
	// (ENOSPC) or failing (EIO) would, or after its commit, as a failed
	// fdatasync (EIO, ENOSPC) would.
	modeStoreNoSpace
	modeStoreEIO
	modeStoreSyncEIO
	modeStoreSyncNoSpace
)

func (m sweepMode) String() string {
	return [...]string{"fail", "crash", "power-cut", "store-page-enospc", "store-page-eio", "store-fdatasync-eio", "store-fdatasync-enospc"}[m]
}

func (m sweepMode) store() bool { return m >= modeStoreNoSpace }

// storeFault is the fault of a store mode.
func (m sweepMode) storeFault() (recovery.Phase, error) {
	switch m {
	case modeStoreNoSpace:
		return recovery.BeforeCommit, errPageENOSPC
	case modeStoreEIO:
		return recovery.BeforeCommit, errPageEIO
	case modeStoreSyncEIO:
		return recovery.AfterCommit, syscall.EIO
	default:
		return recovery.AfterCommit, syscall.ENOSPC
	}
}

// sweepWorkload is one of the sweep's fixed workloads.
type sweepWorkload int

const (
	// workRounds: three checkpoints of plain, zstd and Parquet batches,
	// with anonymous ones among them.
	workRounds sweepWorkload = iota
	// workDoomStuck: a doomed checkpoint aborted alone behind a stuck
	// commit (sweepDoomBehindStuck), on its own: a workload of its own
	// keeps the sweep's time down (each of the rounds' fault points would
	// run it too).
	workDoomStuck
)

func (w sweepWorkload) String() string { return [...]string{"rounds", "doom-behind-stuck"}[w] }

// full is what the client has sent by the end of wl, after its resends:
// each producer's and stream's next sequence number.
func (w sweepWorkload) full() map[[2]string]int64 {
	if w == workDoomStuck {
		return map[[2]string]int64{{"p1", "a"}: 2, {"p2", parquetStream}: 2}
	}
	return map[[2]string]int64{{"p1", "a"}: 5, {"p2", "b"}: 4, {"p2", "a"}: 1, {"p1", "b"}: 1, {"p1", "c"}: 2,
		{"p1", zstdStream}: 2, {"p2", parquetStream}: 2, {"p1", parquetStream}: 1}
}

// sweepRun runs fixed workload wl with one fault at op n (in the store
// modes: at the state store's write transaction n), then recovers, checks
// I1-I7 and I5, lets the client resend, and checks everything landed
// exactly once. With n < 0 it only counts the operations and the store's
// write transactions.
func sweepRun(t *testing.T, wl sweepWorkload, mode sweepMode, n int64) sweepCount {
	base := faultfs.NewCrashFS()
	sw := &faultfs.SwapInjector{}
	inj := faultfs.NewInjectFS(base, sw)
	top := &sweepTop{}
	fsys := faultfs.NewInjectFS(inj, top) // the workload's own faults, above the counted operations
	r := newRig(t, fsys)
	fixed := time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)
	sf := &storeFaults{}
	r.tweak = func(c *Config) {
		c.Parallel = 1
		c.Now = func() time.Time { return fixed }
		c.StoreOptions.WriteFault = sf.hook
		// Every batch written at once, and the zstd and Parquet files
		// encoded a step per write, inline: the encoder's operations (the
		// read back, the frames, the encoded file's create) are swept too,
		// in the same order every run.
		c.BufferSize = 8
		c.Encoders = staging.NewInlineEncoders(1)
		// A node lease, as every real node has: the start's first
		// operations take it over and reserve ids in it, and are swept
		// too. With the clock fixed and an hour's timeout, a restart that
		// does not know the lease for its own is refused, never let in by
		// an expiry.
		// A lease lock left by a failed or cut operation must be broken
		// because its owner is known dead or is this very writer, never
		// by waiting for its age: an hour here.
		leaser := local.New(c.FS, rigDest, rigStaging)
		leaser.StaleLock = time.Hour
		c.Leaser, c.LeaseTimeout, c.Listen = leaser, time.Hour, "127.0.0.1:1"
	}
	m := newModel()
	var from, fromTxns int64 // the counts where the workload's own part begins
	var unknownID uint64     // a checkpoint whose fate the crash hid
	var unknownSnap map[[2]string]int64

	var crash *faultfs.CrashAfterInjector
	var failed *faultfs.FailNthInjector
	switch {
	case n < 0:
	case mode.store():
		phase, ferr := mode.storeFault()
		sf.set(func(k int, _ string, ph recovery.Phase) error {
			if int64(k) == n && ph == phase {
				return ferr
			}
			return nil
		})
	case mode == modeFail:
		errno := syscall.EIO
		if n%2 == 1 {
			errno = syscall.ENOSPC
		}
		failed = faultfs.FailNth(n, sweepKinds, errno)
		sw.Set(failed)
	default:
		crash = faultfs.CrashAfter(n, sweepKinds)
		sw.Set(crash)
	}
	crashed := func() bool { return crash != nil && crash.Crashed() }
	// faulted: the fault point was reached (what follows it may differ
	// from the fault-free run's).
	faulted := func() bool {
		if failed != nil {
			_, ok := failed.Fired()
			return ok
		}
		return crashed() || sf.firedAny()
	}

	// Phase 1: the workload, under the fault.
	e, err := Open(r.config(fsys))
	if err == nil {
		r.e = e
		ctx, cancel := untilCtx(crashed)
		err = e.WaitReady(ctx)
		cancel()
		if err != nil && !crashed() && mode != modeFail && !mode.store() {
			t.Fatalf("op %d %s: recovery: %v", n, mode, err)
		}
	}
	if err == nil {
		for _, p := range []string{"p1", "p2"} {
			ps, err := e.InitProducer(t.Context(), p)
			if err != nil {
				if !mode.store() {
					t.Fatal(err)
				}
				// Refused (disk full) or failed (the engine stopped): the
				// epoch is not known; phase 3 takes a new one.
				break
			}
			m.epoch[p] = ps.Epoch
		}
		round := func(writes func()) {
			if crashed() || e.Err() != nil {
				return
			}
			writes()
			id := e.Status().OpenID
			snap := m.snapshot()
			res, err := checkpointUntil(e, crashed)
			if err == nil {
				m.answer(res.ID)
			}
			switch {
			case err == nil && res.State == recovery.Committed:
				m.checkpointed(snap, true)
			case err == nil:
				m.checkpointed(snap, false)
			default:
				// Crashed or failed mid-checkpoint: only the store knows,
				// and only once the engine has stopped.
				unknownID, unknownSnap = id, snap
			}
		}
		// A staging file that fails during a write (an encoder's step,
		// inline) dooms its checkpoint: that write and the ones after are
		// refused, and the engine aborts it on its own (doomed.go).
		var dw doomWatch
		settle := func(err error) error {
			if d := dw.met(e); d != nil {
				if rerr := refusedFor(d, err); rerr != nil {
					t.Fatalf("op %d %s: %v", n, mode, rerr)
				}
				_, _ = checkpointUntil(e, crashed) // after the abort; an error: phase 2 decides
				m.rollback()
			}
			return err
		}
		w := func(p, s string, k int) {
			for range k {
				if crashed() || e.Err() != nil || settle(m.write(t, e, p, s, 2)) != nil {
					return
				}
			}
		}
		if len(m.epoch) < 2 {
			round = func(func()) {}
		}
		// A zstd stream and a Parquet stream (streams_test.go): their
		// pre-commit encodes, and every operation of it is swept too.
		// The empty checkpoint is the barrier that puts them in force.
		if len(m.epoch) == 2 && sweepStreams(t, e) {
			if res, err := checkpointUntil(e, crashed); err != nil {
				round = func(func()) {}
			} else {
				m.answer(res.ID) // empty: its id is never used again either
			}
		}
		if wl == workRounds {
			round(func() { w("p1", "a", 3); w("p2", "b", 2); _ = settle(m.writeAnon(e, "a")); w("p1", zstdStream, 1) })
			round(func() { w("p1", "a", 2); w("p2", "a", 1); w("p1", "b", 1); w("p2", parquetStream, 2) })
			round(func() {
				w("p2", "b", 2)
				w("p1", "c", 2)
				_ = settle(m.writeAnon(e, "c"))
				w("p1", zstdStream, 1)
				w("p1", parquetStream, 1)
			})
		}
		// Checkpoint n's commit stuck, n+1 doomed and aborted alone, n+2
		// accepted behind the stuck commit (doomed.go): every operation of
		// it is a fault point too.
		if wl == workDoomStuck && len(m.epoch) == 2 {
			from, fromTxns = inj.Count(sweepKinds), int64(sf.count())
			if id, snap, ok := sweepDoomBehindStuck(t, &sweepDoomRun{e: e, m: m, top: top, dw: &dw, w: w, crashed: crashed, faulted: faulted, n: n, mode: mode}); !ok {
				unknownID, unknownSnap = id, snap
			}
		}
		round(func() {})
	}
	count := sweepCount{ops: inj.Count(sweepKinds), txns: int64(sf.count()), from: from, fromTxns: fromTxns}
	r.stop() // with the fault still armed: a crashed process does nothing more
	sw.Set(nil)
	sf.set(nil)
	if n < 0 {
		return count
	}
	if mode.store() && len(sf.fired) != 1 {
		t.Fatalf("op %d %s: store fault fired %d times, want once (workload not deterministic?)", n, mode, len(sf.fired))
	}

	// Phase 2: restart (after a power cut, from what was durable) and check.
	// A failed operation is followed by a power cut too: whatever the engine
	// reported committed after retrying must have been made durable.
	if mode == modePowerCut || mode == modeFail || mode.store() {
		clone := base.CrashClone()
		r.fs = clone
	} else {
		r.fs = base
	}
	e = r.start(r.fs)
	if open := e.Status().OpenID; open <= m.answered {
		t.Fatalf("op %d %s: I8: checkpoint %d open after recovery, but an answer named %d before", n, mode, open, m.answered)
	}
	if unknownID != 0 {
		c, err := e.store.Get(unknownID)
		m.checkpointed(unknownSnap, err == nil && c.State != recovery.Aborted)
	}
	m.resolveAnon(t, e)
	m.checkProducers(t, e)
	exp := m.expect()
	exp.Exact = false // accepted batches of an unknown fate may be there; checked below
	if rep := r.checker0(exp); rep.Err() != nil {
		list, _ := e.store.List(10)
		t.Fatalf("op %d %s, after recovery: %v\nstore: %+v\nunknown %d\n%s\nclone:\n%s", n, mode, rep.Err(), list, unknownID, base, r.fs)
	}

	// Phase 3: the client resends from expected_seq; all lands exactly once.
	for k := range m.next {
		m.next[k] = m.prepared[k]
	}
	for _, p := range []string{"p1", "p2"} {
		if _, ok := m.epoch[p]; !ok {
			ps, err := e.InitProducer(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			m.epoch[p] = ps.Epoch
		}
	}
	for k, want := range wl.full() {
		for m.next[k] < want {
			if err := m.write(t, e, k[0], k[1], 2); err != nil {
				t.Fatalf("op %d %s: resend %v: %v", n, mode, k, err)
			}
		}
	}
	if res := r.checkpoint(); res.State != recovery.Committed {
		t.Fatalf("op %d %s: final checkpoint %+v", n, mode, res)
	}
	m.checkpointed(m.snapshot(), true)
	m.resolveAnon(t, e)
	if rep := r.checker0(m.expect()); rep.Err() != nil {
		t.Fatalf("op %d %s, at the end: %v", n, mode, rep.Err())
	}
	if left, _ := afero.ReadDir(r.fs, rigStaging); len(left) != 0 {
		t.Fatalf("op %d %s: %d staging files left", n, mode, len(left))
	}
	return count
}

// sweepCount is what a workload does: its file system operations and
// state-store write transactions, and from which of them on they are its
// own (the start, the producers' inits and the streams' configuration
// before are the rounds' too, swept there).
type sweepCount struct{ ops, txns, from, fromTxns int64 }

// TestFaultSweep fails, crashes after, and power-cuts after every
// filesystem operation of each workload in turn, fails every write
// transaction of the state store in turn (before it writes, with ENOSPC
// and EIO; after its commit, as a failed fdatasync with EIO and ENOSPC),
// and checks the invariants after recovery each time (pebble's
// error_test.go, applied to eosink). The workloads: the rounds, and a
// doomed checkpoint aborted alone behind a stuck commit.
func TestFaultSweep(t *testing.T) {
	for _, wl := range []sweepWorkload{workRounds, workDoomStuck} {
		c := sweepRun(t, wl, modeFail, -1)
		if c.ops-c.from < 50 {
			t.Fatalf("workload %s does only %d operations of its own; the sweep would prove little", wl, c.ops-c.from)
		}
		if c.txns-c.fromTxns < 5 {
			t.Fatalf("workload %s runs only %d state-store write transactions of its own", wl, c.txns-c.fromTxns)
		}
		points, storePoints := 0, 0
		for _, mode := range []sweepMode{modeFail, modeCrash, modePowerCut} {
			t.Run(wl.String()+"/"+mode.String(), func(t *testing.T) {
				for n := c.from; n <= c.ops; n++ {
					sweepRun(t, wl, mode, n)
					points++
					if t.Failed() {
						return
					}
				}
			})
		}
		for _, mode := range []sweepMode{modeStoreNoSpace, modeStoreEIO, modeStoreSyncEIO, modeStoreSyncNoSpace} {
			t.Run(wl.String()+"/"+mode.String(), func(t *testing.T) {
				for n := c.fromTxns; n < c.txns; n++ {
					sweepRun(t, wl, mode, n)
					storePoints++
					if t.Failed() {
						return
					}
				}
			})
		}
		t.Logf("fault sweep, workload %s: %d operations (its own from op %d), %d fault points swept (fail, crash, power cut); %d state-store write transactions (its own from %d), %d store fault points",
			wl, c.ops, c.from, points, c.txns, c.fromTxns, storePoints)
		fmt.Printf("fault sweep, workload %s: %d operations (from %d), %d fault points swept; %d store transactions (from %d), %d store fault points\n",
			wl, c.ops, c.from, points, c.txns, c.fromTxns, storePoints)
	}
}

// sweepStreams configures the sweep's zstd and Parquet streams; false if
// the store refused (a store fault point), which leaves them plain.
func sweepStreams(t *testing.T, e *Engine) bool {
	t.Helper()
	for _, s := range []string{zstdStream, parquetStream} {
		c := streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}
		if s == parquetStream {
			c = streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}
		}
		if _, err := e.PutStream(t.Context(), s, c); err != nil {
			return false
		}
	}
	return true
}

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

// sweepTop sits above the sweep's counted file system: the workload's
// own faults, which are not fault points and count no operation, so
// every run does the same counted operations however long they last.
type sweepTop struct {
	// stuck: the destination fails (EIO). A commit's try fails at its
	// first operation (the manifest's early copy, a file's directory or
	// rename): retried (I4), counting nothing.
	stuck atomic.Bool
	// doom: the next create of an encoded file (a Parquet file's pages,
	// a zstd file's frames) fails for space, once.
	doom atomic.Bool
}

func (s *sweepTop) MaybeError(op faultfs.Op) error {
	if s.stuck.Load() && (strings.HasPrefix(op.Path, rigDest+"/") ||
		op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging+"/") ||
		op.Kind == faultfs.OpOpen && strings.Contains(op.Path, ".publish")) {
		return syscall.EIO
	}
	if op.Kind == faultfs.OpOpen && (strings.HasSuffix(op.Path, ".enc"+layout.TempSuffix) || strings.HasSuffix(op.Path, ".pages"+layout.TempSuffix)) &&
		s.doom.CompareAndSwap(true, false) {
		return syscall.ENOSPC
	}
	return nil
}

// sweepDoomRun is what sweepDoomBehindStuck needs of a sweep run.
type sweepDoomRun struct {
	e       *Engine
	m       *model
	top     *sweepTop
	dw      *doomWatch
	w       func(p, s string, k int) // the run's writes (settled by a checkpoint: not while n is stuck)
	crashed func() bool
	faulted func() bool // the fault point was reached
	n       int64
	mode    sweepMode
}

// sweepDoomBehindStuck is the sweep's phase of a doom behind a stuck
// commit (doomed.go, abortDoomedOpen; f87675e): checkpoint n holds p1's
// batch on a and p2's Parquet batch and is cut; its commit fails (the
// destination fails, sweepTop.stuck: retried, I4). n+1 takes p1's next
// batch on a, an anonymous one, then p2's Parquet batch, whose encoder
// can't create its pages file (ENOSPC, inline): that write is refused
// and n+1 aborts alone, at once — p1 and p2 back to n's barrier — and
// n+2 takes p1's resent batch, an anonymous one and p2's resent Parquet
// batch behind the stuck commit. Then the destination comes back: n
// commits; the run's last round commits n+2. Until the fault point is
// reached, each step must happen (the abort alone within 5 s, the
// writes into n+2 accepted); after it, whatever happens is checked by
// the recovery that follows. It returns n and its barrier's snapshot
// and false when n's fate is unknown (the run crashed or failed before
// n was seen prepared).
func sweepDoomBehindStuck(t *testing.T, d *sweepDoomRun) (uint64, map[[2]string]int64, bool) {
	t.Helper()
	e, m := d.e, d.m
	stop := func() bool { return d.crashed() || e.Err() != nil }
	if stop() {
		return 0, nil, true
	}
	d.w("p1", "a", 1)
	d.w("p2", parquetStream, 1)
	if stop() {
		return 0, nil, true
	}
	n := e.Status().OpenID
	snap := m.snapshot()
	type ended struct {
		res CheckpointResult
		err error
	}
	done := make(chan ended, 1)
	d.top.stuck.Store(true)
	go func() {
		res, err := checkpointUntil(e, d.crashed)
		done <- ended{res, err}
	}()
	var end *ended
	for end == nil && e.Status().StuckCheckpoint != n {
		select {
		case r := <-done:
			end = &r
		case <-time.After(200 * time.Microsecond):
		}
	}
	stuckSeen := end == nil
	if stuckSeen {
		m.checkpointed(snap, true) // prepared, its commit tried: bound to commit
		sweepDoomAlone(t, d, n)
	}
	d.top.stuck.Store(false)
	if end == nil {
		r := <-done
		end = &r
	}
	if end.err == nil {
		m.answer(end.res.ID)
	}
	switch {
	case stuckSeen:
		if end.err == nil && (end.res.ID != n || end.res.State != recovery.Committed) {
			t.Fatalf("op %d %s: checkpoint %d, whose commit was stuck: %+v, want committed", d.n, d.mode, n, end.res)
		}
		if end.err != nil && !d.faulted() {
			t.Fatalf("op %d %s: checkpoint %d, whose commit was stuck, before the fault point: %v", d.n, d.mode, n, end.err)
		}
		m.resolveAnon(t, e)
	case end.err == nil:
		m.checkpointed(snap, end.res.State == recovery.Committed)
	default:
		return n, snap, false
	}
	return 0, nil, true
}

// sweepDoomAlone dooms n+1 behind n's stuck commit and writes into n+2
// (see sweepDoomBehindStuck).
func sweepDoomAlone(t *testing.T, d *sweepDoomRun, n uint64) {
	t.Helper()
	e, m := d.e, d.m
	stop := func() bool { return d.crashed() || e.Err() != nil }
	// settle: a doom met during the write answered err: the write is
	// refused, and the doomed checkpoint aborts alone (or with the engine
	// stopped); the model forgets what it held. False when the run can't
	// go on with the phase.
	settle := func(err error, planned bool) bool {
		dm := d.dw.met(e)
		if dm == nil {
			if planned && !d.faulted() {
				t.Fatalf("op %d %s: the Parquet file's encoder failed (ENOSPC) in checkpoint %d and nothing was doomed: %v", d.n, d.mode, n+1, err)
			}
			return err == nil
		}
		if rerr := refusedFor(dm, err); rerr != nil {
			t.Fatalf("op %d %s: %v", d.n, d.mode, rerr)
		}
		aborted := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !stop(); time.Sleep(200 * time.Microsecond) {
			if e.Status().OpenID > dm.id {
				aborted = true
				break
			}
		}
		if !aborted && !stop() && !d.faulted() {
			_, werr := send(e, nil, "a", 0, 1)
			t.Fatalf("op %d %s: doomed open checkpoint %d not aborted alone within 5 s behind the stuck commit of %d: writes refused meanwhile (%v)", d.n, d.mode, dm.id, n, werr)
		}
		m.rollback()
		return false
	}
	write := func(p, s string, want uint64) bool {
		res, err := m.writeResult(t, e, p, s, 2)
		if err == nil && res.Checkpoint != want && !d.faulted() {
			t.Fatalf("op %d %s: %s/%s accepted into %d, want %d", d.n, d.mode, p, s, res.Checkpoint, want)
		}
		if err != nil && !d.faulted() {
			t.Fatalf("op %d %s: %s/%s into %d behind the stuck commit of %d, before the fault point: %v", d.n, d.mode, p, s, want, n, err)
		}
		return settle(err, false)
	}
	anon := func() bool {
		return settle(m.writeAnon(e, "c"), false)
	}
	if !write("p1", "a", n+1) || stop() || !anon() || stop() {
		return
	}
	d.top.doom.Store(true)
	err := m.write(t, e, "p2", parquetStream, 2)
	d.top.doom.Store(false)
	if settle(err, true) || stop() {
		return // accepted (a fault came first): n+1 is not doomed
	}
	if !d.faulted() {
		if ck, err := e.store.Get(n + 1); err != nil || ck.State != recovery.Aborted {
			t.Fatalf("op %d %s: checkpoint %d after its abort alone: %+v %v, want recorded aborted", d.n, d.mode, n+1, ck, err)
		}
		if st := e.Status(); st.OpenID != n+2 || st.StuckCheckpoint != n {
			t.Fatalf("op %d %s: after the abort alone of %d: open %d, stuck %d; want %d open, %d stuck", d.n, d.mode, n+1, st.OpenID, st.StuckCheckpoint, n+2, n)
		}
	}
	_ = write("p1", "a", n+2) && !stop() && anon() && !stop() && write("p2", parquetStream, n+2)
}
