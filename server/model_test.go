package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// TestModel drives the engine with a seeded random mix of writes from
// several producers and streams — in order, duplicates, gaps, stale and
// future epochs, anonymous batches — client restarts (a new incarnation
// inits and goes on from the next_seq it gets), checkpoints, injected
// failures, process crashes and power cuts, against a model of what must
// be committed. Besides I1-I7 and I5 it checks I8 (every batch in a
// committed checkpoint was answered with that checkpoint's id, and an id
// answered and committed holds what it was answered for), I9 (a duplicate
// is reported committed only when it is, and names a committed
// checkpoint), and I12 (init's next_seq is durable: the client is never
// wedged). EOSINK_MODEL_STEPS sets the steps (default 10,000),
// EOSINK_MODEL_SEED replays a seed.
func TestModel(t *testing.T) {
	steps := 10_000
	if v := os.Getenv("EOSINK_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("EOSINK_MODEL_STEPS: %v", err)
		}
		steps = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("EOSINK_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("EOSINK_MODEL_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with EOSINK_MODEL_SEED=%d), %d steps", seed, seed, steps)
	stats := runModel(t, seed, steps)
	t.Logf("model: %s", stats)
	fmt.Printf("model test: seed %d, %d steps: %s\n", seed, steps, stats)
}

type modelStats struct {
	writes, dups, dupsCommitted, gaps, fenced, future, anon, checkpoints, committed, aborted, injected, crashes, powerCuts, checks int
	restarts, barriers, barriersAborted, initsFailed, idsChecked, concurrent, storeLosses, startsKilled                            int
	copiesTaken, copiesRestored, forgotten, expiries, planted                                                                      int
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d writes, %d duplicates (%d committed), %d gaps, %d stale epochs, %d future epochs, %d anonymous, %d checkpoints (%d committed, %d aborted; %d with writes during their pre-commit, half of those cut there), %d client restarts (inits; %d ran a barrier checkpoint, %d of them aborted; %d inits cut by a fault), %d injected faults, %d crashes, %d power cuts, %d full checks (%d committed checkpoint ids checked against their answers, I8), %d state store losses, %d starts killed partway, %d live copies of state.db taken, %d restored (older copies), %d producers forgotten and created again (%d by expiry), %d manifests planted by another writer",
		s.writes, s.dups, s.dupsCommitted, s.gaps, s.fenced, s.future, s.anon, s.checkpoints, s.committed, s.aborted, s.concurrent, s.restarts, s.barriers, s.barriersAborted, s.initsFailed, s.injected, s.crashes, s.powerCuts, s.checks, s.idsChecked, s.storeLosses, s.startsKilled,
		s.copiesTaken, s.copiesRestored, s.forgotten, s.expiries, s.planted)
}

// answers remembers, per checkpoint id, the batches the engine accepted
// with that id in its answer (I8).
type answers map[uint64]map[invariant.BatchID]bool

func (a answers) add(id uint64, b invariant.BatchID) {
	if a[id] == nil {
		a[id] = map[invariant.BatchID]bool{}
	}
	a[id][b] = true
}

// modelWrite is model.write that also records the answer's checkpoint.
func modelWrite(t *testing.T, m *model, e *Engine, ans answers, p, s string, n int) error {
	seq := m.next[[2]string{p, s}]
	res, err := m.writeResult(t, e, p, s, n)
	if err != nil {
		return err
	}
	ans.add(res.Checkpoint, invariant.BatchID{Producer: p, Stream: s, Seq: seq})
	return nil
}

// checkpointLog records the ends of checkpoints through Hooks, to learn
// what the barrier init runs did.
type checkpointLog struct {
	mu  sync.Mutex
	end map[uint64]recovery.State
}

func (l *checkpointLog) hook(r CheckpointResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end[r.ID] = r.State
}

func (l *checkpointLog) state(id uint64) (recovery.State, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.end[id]
	return s, ok
}

// s0Confs are the configurations the model puts s0 in, mid-flight: each
// fits the test records, each changes how files are written.
var s0Confs = []streamconf.Config{
	{},
	{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip},
	{Format: streamconf.FormatNDJSON, Partition: "s={field:s}/h={ingest:%H}"},
	{Format: streamconf.FormatNDJSON, Schema: testSchema, Compression: streamconf.CompressionZstd},
}

func runModel(t *testing.T, seed uint64, steps int) modelStats {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	base := faultfs.NewCrashFS()
	sw := &faultfs.SwapInjector{}
	inj := faultfs.NewInjectFS(base, sw)
	r := newRig(t, inj)
	hour := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clock := hour
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) {
		c.Hooks.Checkpoint = ckLog.hook
		c.Parallel = 1 + rng.IntN(3)
		c.Now = func() time.Time { return clock }
		c.RollBytes = 600 // small files: rolls happen
		c.BufferSize = 128
		c.IdempotencyWindow = 1 << 20 * time.Hour // the clock runs fast here; expiry has its own test
		c.MaxKeys = modelMaxKeys                  // the cap is reached: committed keys are dropped, never live ones (keyModel)
		// A node lease that never expires on this clock: every start must
		// know the lease its data dir left for its own, whatever fault or
		// crash cut the last one (lease_test.go has the expiry).
		leaser := local.New(c.FS, rigDest, rigStaging)
		leaser.StaleLock = time.Hour // a left lock is broken by its owner, not its age
		c.Leaser, c.LeaseTimeout, c.Listen = leaser, 1<<20*time.Hour, "127.0.0.1:1"
	}
	e := r.start(nil)
	// s1 is a zstd stream and s2 a Parquet stream (streams_test.go): their
	// pre-commit encodes under the same crashes and faults. The empty
	// checkpoint is the barrier that puts them in force.
	for s, c := range map[string]streamconf.Config{
		"s1": {Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd},
		"s2": {Format: streamconf.FormatParquet, Schema: testSchema},
	} {
		if _, err := e.PutStream(t.Context(), s, c); err != nil {
			t.Fatal(err)
		}
	}
	r.checkpoint()
	km := &keyModel{}
	defer func() { t.Logf("keyed: %s", km.st) }()
	puts, putBarriers := 0, 0
	defer func() {
		t.Logf("stream configuration changes: %d, %d of them with a barrier checkpoint", puts, putBarriers)
	}()
	m := newModel()
	producers := []string{"p0", "p1", "p2", "p3"}
	streams := []string{"s0", "s1", "s2"}
	var st modelStats
	ans := answers{}
	verified := map[uint64]bool{} // committed ids checked against their answers
	type dupClaim struct {
		b  invariant.BatchID
		id uint64
	}
	var committedDups []dupClaim     // committed duplicates, checked at the next full check
	epochUnsure := map[string]bool{} // an init cut by a crash: its epoch bump may or may not be durable
	var crash *faultfs.CrashAfterInjector
	var trace []string
	note := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf(format, args...))
		if len(trace) > 40 {
			trace = trace[1:]
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format+"\nlast steps:\n  %s", append(append([]any{seed}, args...), strings.Join(trace, "\n  "))...)
	}
	m.fatal = fail

	// restart stops the engine as a crash would, optionally power-cuts,
	// starts again and checks I5. A checkpoint whose result the crash hid
	// (pending) is decided by the store: prepared means it committed.
	var pendingID uint64
	var pendingSnap map[[2]string]int64
	var cutFS *faultfs.CrashFS // a power cut taken earlier, with its state store copy
	var cutStore string
	// killStart starts an engine and kills it after a random operation of
	// its start (taking the lease, recovery, reserving ids) or soon after,
	// as a crash-looping process is killed: the next start must take over
	// whatever it left, at once.
	killStart := func() {
		n := int64(rng.IntN(80))
		c := faultfs.CrashAfter(n, sweepKinds)
		sw.Set(c)
		if k, err := Open(r.config(r.fs)); err == nil {
			ctx, cancel := untilCtx(c.Crashed)
			_ = k.WaitReady(ctx)
			cancel()
			_ = k.Close()
		}
		sw.Set(nil)
		st.startsKilled++
		note("start killed after op %d (crashed %v)", n, c.Crashed())
	}
	restart := func(powerCut bool) {
		r.stop()
		sw.Set(nil)
		crash = nil
		if cutFS != nil {
			// The store as the cut left it goes back in place: the same
			// file (a power cut keeps the inode the lease memo names).
			data, err := os.ReadFile(cutStore)
			if err == nil {
				err = os.WriteFile(r.storePath, data, 0o600)
			}
			if err != nil {
				fail("restore the store of a power cut: %v", err)
			}
			_ = os.Remove(cutStore)
			base, cutFS = cutFS, nil
			inj = faultfs.NewInjectFS(base, sw)
			st.powerCuts++
		} else if powerCut {
			base = base.CrashClone()
			inj = faultfs.NewInjectFS(base, sw)
			st.powerCuts++
		} else {
			st.crashes++
		}
		r.fs = inj
		if rng.IntN(3) == 0 {
			killStart()
		}
		e = r.start(nil)
		note("restart power=%v", powerCut)
		if pendingID != 0 {
			c, err := e.store.Get(pendingID)
			if err == nil && c.State != recovery.Aborted {
				for k, v := range pendingSnap {
					m.prepared[k] = v
				}
			}
			pendingID, pendingSnap = 0, nil
		}
		for k := range m.next {
			m.next[k] = m.prepared[k]
		}
		for p := range epochUnsure {
			ps, ok := e.Producer(wireID(p))
			if !ok || (ps.Epoch != m.epoch[p] && ps.Epoch != m.epoch[p]+1) {
				fail("init of %s cut by a crash: epoch %d (known %v), want %d or %d", p, ps.Epoch, ok, m.epoch[p], m.epoch[p]+1)
			}
			m.epoch[p] = ps.Epoch
			delete(epochUnsure, p)
		}
		m.resolveAnon(t, e)
		checkI5(t, m, e, fail)
	}
	fullCheck := func() {
		m.resolveAnon(t, e)
		r.fs = base // the checker reads the disk without faults
		rep := r.checker0(m.expect())
		r.fs = inj
		if err := rep.Err(); err != nil {
			fail("step check: %v", err)
		}
		// I8: a committed checkpoint holds only batches answered with its
		// id, and every batch answered with an id that committed.
		for b, ids := range rep.Checkpoints {
			for _, id := range ids {
				if !ans[id][b] {
					fail("I8: checkpoint %d holds batch %s, which no answer named with that id", id, b)
				}
			}
		}
		open := e.Status().OpenID
		for id, bs := range ans {
			if id >= open || verified[id] {
				continue // a committed id, once checked, cannot change (I7 holds its files)
			}
			c, err := e.store.Get(id)
			if err != nil || c.State != recovery.Committed {
				continue
			}
			st.idsChecked++
			for b := range bs {
				if !slices.Contains(rep.Checkpoints[b], id) {
					fail("I8: checkpoint %d committed without batch %s, answered with it", id, b)
				}
			}
			verified[id] = true
		}
		// I9: what a duplicate reported committed is in the destination.
		for _, d := range committedDups {
			if rep.Batches[d.b] != 1 {
				fail("I9: duplicate %s answered committed in %d, but the batch appears %d times", d.b, d.id, rep.Batches[d.b])
			}
		}
		committedDups = committedDups[:0]
		st.checks++
	}

	// older is a copy of the live state.db taken at an earlier step; a
	// later step restores it (a volume snapshot or backup brought back).
	var older []byte
	incarnation := 0
	zombies := map[string]int64{} // forgotten incarnations' last epochs, by name
	// forget forgets one producer (DELETE) or, with expire, every idle
	// one (the expiry), once everything is committed; each comes back at
	// once as a new incarnation of the same id (its records name it
	// p~N, sent as p: wireID), inits from seq 0 and commits a batch.
	forget := func(expire bool) {
		commitAll(t, e, m, "forget producers", fail)
		var gone []int
		if expire {
			st.expiries++
			if _, err := e.ExpireProducers(time.Now().AddDate(100, 0, 0)); err != nil {
				fail("expire producers: %v", err)
			}
			for i, p := range producers {
				if _, inited := m.epoch[p]; !inited {
					continue
				}
				if _, ok := e.Producer(wireID(p)); !ok {
					gone = append(gone, i)
				}
			}
		} else {
			i := rng.IntN(len(producers))
			if _, inited := m.epoch[producers[i]]; !inited {
				return
			}
			if err := e.DeleteProducer(t.Context(), wireID(producers[i])); err != nil {
				fail("delete producer %s: %v", producers[i], err)
			}
			gone = append(gone, i)
		}
		for _, i := range gone {
			p := producers[i]
			st.forgotten++
			for k, next := range m.prepared {
				if k[0] != p {
					continue
				}
				for q := range next {
					m.must[invariant.BatchID{Producer: k[0], Stream: k[1], Seq: q}] = true
				}
				delete(m.prepared, k)
				delete(m.next, k)
			}
			zombies[p] = m.epoch[p]
			delete(m.epoch, p)
			incarnation++
			np := fmt.Sprintf("%s~%d", wireID(p), incarnation)
			producers[i] = np
			ps, err := e.InitProducer(t.Context(), wireID(np))
			if err != nil {
				fail("init %s after it was forgotten: %v", np, err)
			}
			for s, ss := range ps.Streams {
				if ss.NextSeq != 0 {
					fail("init %s after it was forgotten: stream %s next_seq %d, want 0", np, s, ss.NextSeq)
				}
			}
			m.epoch[np] = ps.Epoch
			if err := modelWrite(t, m, e, ans, np, streams[rng.IntN(len(streams))], 1); err != nil {
				fail("write %s after it was forgotten: %v", np, err)
			}
			note("forgot %s (expiry %v): now %s at epoch %d", p, expire, np, ps.Epoch)
		}
		commitAll(t, e, m, "forget producers", fail)
	}
	// plantManifest plants a manifest under this node's prefix as another
	// writer of the bucket could: ranges for a live producer naming files
	// that are not there (beyond the ids the node reserved, or within
	// them), a document that is not JSON, or a name with an id near 2^64.
	// After a crash the node must start, and believe none of it (I5,
	// checked by restart); then the planted document is removed.
	plantManifest := func() {
		open := e.Status().OpenID
		victim := producers[rng.IntN(len(producers))]
		var id uint64
		var body []byte
		kind := rng.IntN(4)
		switch kind {
		case 0, 1:
			id = open + 1 // reserved, never committed: the store looks behind
			if kind == 0 {
				id = open + 1<<20 // beyond every id the node reserved
			}
			mf := &layout.Manifest{Checkpoint: id, Node: rigNode, CommittedAt: clock,
				Files: []layout.ManifestFile{{Path: "s0/" + layout.PartName(rigNode, id, 0, "ndjson"), Stream: "s0", Bytes: 10, Records: 1,
					Producers: map[string]committer.SeqRanges{wireID(victim): {{0, 1 << 20}}}}}}
			var err error
			if body, err = layout.EncodeManifest(mf); err != nil {
				fail("plant manifest: %v", err)
			}
		case 2:
			id, body = open+1, []byte("<html>not a manifest</html>")
		default:
			id, body = 1<<64-10, []byte("{}")
		}
		name := rigDest + "/" + layout.ManifestName(rigNode, id)
		if err := afero.WriteFile(base, name, body, 0o644); err != nil {
			fail("plant manifest: %v", err)
		}
		st.planted++
		note("planted %s (kind %d, ranges of %s)", name, kind, victim)
		restart(false)
		if err := base.Remove(name); err != nil {
			fail("remove planted manifest: %v", err)
		}
	}

	for step := range steps {
		if crash != nil && crash.Crashed() || e.Err() != nil {
			restart(rng.IntN(2) == 0)
		}
		if rng.IntN(12) == 0 {
			note("%s", km.step(t, rng, m, e, ans, streams, fail))
			if km.kicked {
				// The cap's early checkpoint runs in the background: the
				// open checkpoint ends by it or by this one, whichever
				// comes first, holding what the producers sent so far.
				km.kicked = false
				open, snap, armed := km.kickedOpen, m.snapshot(), crash
				res, err := checkpointUntil(e, func() bool { return armed != nil && armed.Crashed() })
				state, ran := ckLog.state(open)
				note("checkpoint after the key cap's kick: %d %s (asked: %d %s %v)", open, state, res.ID, res.State, err)
				switch {
				case err == nil && ran:
					m.checkpointed(snap, state == recovery.Committed)
					m.resolveAnon(t, e)
				default:
					pendingID, pendingSnap = open, snap
					restart(rng.IntN(2) == 0)
				}
			}
			continue
		}
		if rng.IntN(60) == 0 { // s0's configuration changes mid-flight: a barrier, like init
			puts++
			conf := s0Confs[rng.IntN(len(s0Confs))]
			open := e.Status().OpenID
			snap := m.snapshot()
			armed := crash
			ctx, cancel := untilCtx(func() bool { return armed != nil && armed.Crashed() })
			_, err := e.PutStream(ctx, "s0", conf)
			cancel()
			note("put s0 %+v: %v", conf, err)
			if err != nil {
				// A fault stopped the engine or refused the record, or the
				// crash point hid the barrier's end: the store decides.
				pendingID, pendingSnap = open, snap
				restart(rng.IntN(2) == 0)
				fullCheck()
				continue
			}
			if state, ran := ckLog.state(open); ran && e.Status().OpenID > open {
				putBarriers++
				m.checkpointed(snap, state == recovery.Committed)
				m.resolveAnon(t, e)
			}
			if got := e.Stream("s0"); got.ActiveVersion != got.Config.Version {
				fail("put s0: answered with version %d in force, newest %d", got.ActiveVersion, got.Config.Version)
			}
			continue
		}
		p := producers[rng.IntN(len(producers))]
		s := streams[rng.IntN(len(streams))]
		k := [2]string{p, s}
		_, inited := m.epoch[p]
		switch x := rng.IntN(100); {
		case !inited || x < 3: // a (new incarnation of the) client inits and goes on from next_seq
			st.restarts++
			open := e.Status().OpenID
			snap := m.snapshot()
			armed := crash
			ctx, cancel := untilCtx(func() bool { return armed != nil && armed.Crashed() })
			ps, err := e.InitProducer(ctx, wireID(p))
			cancel()
			if err != nil {
				// A fault stopped the engine, or the crash point hid the
				// barrier's end: only the store knows, after a restart.
				note("init %s: %v", p, err)
				st.initsFailed++
				if inited {
					epochUnsure[p] = true
				}
				pendingID, pendingSnap = open, snap
				restart(rng.IntN(2) == 0)
				if !inited {
					continue // inited again at a later step
				}
				break
			}
			if inited && ps.Epoch != m.epoch[p]+1 {
				fail("init %s: epoch %d after %d", p, ps.Epoch, m.epoch[p])
			}
			m.epoch[p] = ps.Epoch
			if state, ran := ckLog.state(open); ran && e.Status().OpenID > open {
				st.barriers++
				if state == recovery.Aborted {
					st.barriersAborted++
				}
				m.checkpointed(snap, state == recovery.Committed)
				m.resolveAnon(t, e)
			}
			note("init %s: epoch %d %+v", p, ps.Epoch, ps.Streams)
			// I12: what init answers is durable, and all there is: the
			// client goes on from next_seq, whatever follows.
			for _, s := range streams {
				k := [2]string{p, s}
				got, ok := ps.Streams[s]
				if !ok {
					got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
				}
				if got.NextSeq != m.next[k] || got.NextSeq != m.prepared[k] || got.CommittedSeq != m.prepared[k]-1 {
					fail("I12: init %s/%s: next_seq %d committed_seq %d; accepted next %d, prepared next %d", p, s, got.NextSeq, got.CommittedSeq, m.next[k], m.prepared[k])
				}
			}
		case x < 60:
			st.writes++
			err := modelWrite(t, m, e, ans, p, s, 1+rng.IntN(4))
			note("write %v seq %d: %v", k, m.next[k], err)
		case x < 66: // duplicate
			if m.next[k] == 0 {
				continue
			}
			st.dups++
			seq := rng.Int64N(m.next[k])
			if pend := m.next[k] - m.prepared[k]; pend > 0 && rng.IntN(2) == 0 {
				seq = m.prepared[k] + rng.Int64N(pend) // one not yet committed
			}
			res, err := send(e, &Producer{ID: p, Epoch: m.epoch[p]}, s, seq, 1)
			if err != nil || !res.Duplicate || res.NextSeq != m.next[k] {
				fail("duplicate %v/%d: %+v %v", k, seq, res, err)
			}
			if want := seq < m.prepared[k] && m.prepared[k] > 0; res.Committed != want {
				fail("I9: duplicate %v/%d reported committed %v, prepared (and so committed) next is %d", k, seq, res.Committed, m.prepared[k])
			}
			b := invariant.BatchID{Producer: p, Stream: s, Seq: seq}
			if res.Committed {
				st.dupsCommitted++
				c, err := e.store.Get(res.Checkpoint)
				if errors.Is(err, recovery.ErrNotFound) {
					// Rebuilt from the destination after a store loss: the
					// checkpoint is known by its manifest only.
					if ok, _ := afero.Exists(base, rigDest+"/"+layout.ManifestName(rigNode, res.Checkpoint)); ok {
						c, err = &recovery.Checkpoint{ID: res.Checkpoint, State: recovery.Committed}, nil
					}
				}
				if err != nil || c.State != recovery.Committed {
					fail("I9/8a: committed duplicate %s names checkpoint %d: %+v %v", b, res.Checkpoint, c, err)
				}
				committedDups = append(committedDups, dupClaim{b, res.Checkpoint})
			} else if !ans[res.Checkpoint][b] {
				fail("duplicate %s rides in checkpoint %d, which did not accept it", b, res.Checkpoint)
			}
		case x < 70: // gap
			st.gaps++
			seq := m.next[k] + 1 + rng.Int64N(3)
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p]}, s, seq, 1)
			if exp, ok := isSeqErr(err); !ok || exp != m.next[k] {
				fail("gap %v/%d: %v, want expected_seq %d", k, seq, err, m.next[k])
			}
		case x < 72: // stale epoch
			if m.epoch[p] == 0 {
				continue
			}
			st.fenced++
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p] - 1}, s, m.next[k], 1)
			if !errors.Is(err, ErrFenced) {
				fail("stale epoch: %v", err)
			}
		case x < 73:
			st.future++
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p] + 1}, s, m.next[k], 1)
			if !errors.Is(err, ErrInvalidEpoch) {
				fail("future epoch: %v", err)
			}
		case x < 78:
			st.anon++
			m.anonSeq++
			id := invariant.BatchID{Stream: s, Seq: m.anonSeq}
			if res, err := send(e, nil, s, m.anonSeq, 2); err == nil {
				m.anon[res.Checkpoint] = append(m.anon[res.Checkpoint], id)
				ans.add(res.Checkpoint, id)
			}
		case x >= 86 && x < 88 && crash == nil:
			// A checkpoint with writes while it pre-commits (they go to the
			// next checkpoint), and half the time a power cut right then:
			// the ids those answers named must never name other data (I8).
			st.checkpoints++
			st.concurrent++
			id := e.Status().OpenID
			snap := m.snapshot()
			cut := rng.IntN(2) == 0
			k2 := [2]string{producers[rng.IntN(len(producers))], streams[rng.IntN(len(streams))]}
			_, k2inited := m.epoch[k2[0]]
			type written struct {
				b   invariant.BatchID
				res WriteResult
				err error
			}
			var during []written
			var cutErr error
			m.anonSeq++
			anonID := invariant.BatchID{Stream: k2[1], Seq: m.anonSeq}
			storeCopy := filepath.Join(filepath.Dir(r.storePath), fmt.Sprintf("state-cut-%d.db", step))
			stall := &duringInjector{run: func() error {
				// Runs once, in the coordinator, at the first staging sync.
				if k2inited {
					b := invariant.BatchID{Producer: k2[0], Stream: k2[1], Seq: m.next[k2]}
					res, err := send(e, &Producer{ID: k2[0], Epoch: m.epoch[k2[0]]}, k2[1], b.Seq, 1)
					during = append(during, written{b, res, err})
				}
				res, err := send(e, nil, k2[1], anonID.Seq, 1)
				during = append(during, written{anonID, res, err})
				if !cut {
					return nil
				}
				cutFS, cutStore = base.CrashClone(), storeCopy
				data, err := os.ReadFile(r.storePath)
				if err == nil {
					err = os.WriteFile(storeCopy, data, 0o600)
				}
				cutErr = err
				return faultfs.ErrCrashed
			}}
			sw.Set(stall)
			res, err := checkpointUntil(e, stall.crashed.Load)
			note("checkpoint %d with writes during pre-commit (cut %v): %s %v %v", id, cut, res.State, res.Error, err)
			if cutErr != nil {
				fail("copy state store at the cut: %v", cutErr)
			}
			for _, w := range during {
				if w.err != nil {
					continue
				}
				if w.res.Checkpoint != id+1 {
					fail("write during the pre-commit of %d answered checkpoint %d", id, w.res.Checkpoint)
				}
				ans.add(w.res.Checkpoint, w.b)
				if w.b.Producer == "" {
					m.anon[w.res.Checkpoint] = append(m.anon[w.res.Checkpoint], w.b)
				} else if w.res.Duplicate || w.res.NextSeq != w.b.Seq+1 {
					fail("write %s during pre-commit: %+v", w.b, w.res)
				}
			}
			if stall.ran.Load() && cut {
				// The process died at the stall: nothing after it happened.
				pendingID, pendingSnap = id, snap
				restart(true)
				break
			}
			cutFS = nil
			sw.Set(nil)
			for _, w := range during {
				if w.err == nil && w.b.Producer != "" {
					m.next[k2] = w.b.Seq + 1
				}
			}
			switch {
			case err == nil && res.State == recovery.Committed:
				st.committed++
				m.checkpointed(snap, true)
			case err == nil:
				st.aborted++
				m.checkpointed(snap, false)
			default:
				pendingID, pendingSnap = id, snap
				restart(false)
			}
			m.resolveAnon(t, e)
		case x < 88: // checkpoint
			st.checkpoints++
			id := e.Status().OpenID
			snap := m.snapshot()
			armed := crash // the poller must not read the variable the loop reassigns
			res, err := checkpointUntil(e, func() bool { return armed != nil && armed.Crashed() })
			note("checkpoint %d: %s %v %v", id, res.State, res.Error, err)
			switch {
			case err == nil && res.State == recovery.Committed:
				st.committed++
				m.checkpointed(snap, true)
				m.resolveAnon(t, e)
			case err == nil:
				st.aborted++
				m.checkpointed(snap, false)
				m.resolveAnon(t, e)
			default:
				pendingID, pendingSnap = id, snap
				restart(rng.IntN(2) == 0)
			}
		case x < 92: // inject one failure a few operations ahead
			if crash != nil {
				continue
			}
			st.injected++
			errno := []error{syscall.EIO, syscall.ENOSPC}[rng.IntN(2)]
			kinds := sweepKinds
			if rng.IntN(2) == 0 {
				kinds = faultfs.Kinds([]faultfs.OpKind{faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpOpen, faultfs.OpClose}[rng.IntN(5)])
			}
			if rng.IntN(4) == 0 {
				n := rng.Int64N(8)
				sw.Set(faultfs.ShortWriteNth(n, errno))
				note("short write %d", n)
			} else {
				n := rng.Int64N(20)
				sw.Set(faultfs.FailNth(n, kinds, errno))
				note("fail %d of %s", n, kinds)
			}
		case x < 94: // a crash a few operations ahead
			if crash != nil {
				continue
			}
			crash = faultfs.CrashAfter(rng.Int64N(40), sweepKinds)
			sw.Set(crash)
			note("crash armed")
		case x < 96:
			if crash != nil || cutFS != nil || e.Err() != nil {
				restart(rng.IntN(2) == 0)
				break
			}
			switch y := rng.IntN(40); {
			case y < 4: // the state store is lost, or an older copy comes back
				sw.Set(nil) // the loss is the fault of this step
				var copyOf []byte
				if y >= 2 && older != nil {
					copyOf, older = older, nil
					st.copiesRestored++
				} else {
					st.storeLosses++
				}
				e = loseStore(t, r, e, m, copyOf, zombies, fail)
				km.storeLost()
				note("state store lost (older copy: %v)", copyOf != nil)
				// Ids answered but never committed left no trace in the
				// destination, so a lost store can't keep them out of
				// reach (recovery step 5 continues after the manifests;
				// see DESIGN). Only committed ids stay checked for I8.
				r.fs = base
				rep := r.checker0(m.expect())
				r.fs = inj
				inDest := map[uint64]bool{}
				for _, ids := range rep.Checkpoints {
					for _, id := range ids {
						inDest[id] = true
					}
				}
				for id := range ans {
					if !inDest[id] {
						delete(ans, id)
					}
				}
				fullCheck()
			case y < 6: // a snapshot of the live state.db, restored at a later step
				data, err := os.ReadFile(r.storePath)
				if err != nil {
					fail("copy state.db: %v", err)
				}
				older = data
				st.copiesTaken++
				note("state.db copied")
				if rng.IntN(2) == 0 {
					break // restored at a later step, if at all
				}
				// Restored soon, before the node reserves more ids: the
				// copy's reserved block still covers every manifest since.
				sw.Set(nil)
				for range 1 + rng.IntN(3) {
					for range 3 {
						p := producers[rng.IntN(len(producers))]
						if _, inited := m.epoch[p]; inited {
							if err := modelWrite(t, m, e, ans, p, streams[rng.IntN(len(streams))], 1); err != nil {
								fail("write before the copy comes back: %v", err)
							}
						}
					}
					commitAll(t, e, m, "before the copy comes back", fail)
				}
				e = loseStore(t, r, e, m, older, zombies, fail)
				older = nil
				st.copiesRestored++
				km.storeLost()
				note("state.db replaced by the copy")
				fullCheck()
			case y < 8: // producers forgotten (DELETE, expiry), created again from seq 0
				sw.Set(nil)
				forget(rng.IntN(3) == 0)
			case y < 10: // a manifest planted under this node's prefix
				sw.Set(nil)
				plantManifest()
			default:
				restart(rng.IntN(2) == 0)
			}
		case x < 97: // the hour turns: new partitions
			clock = clock.Add(time.Hour)
		default:
			if crash == nil {
				fullCheck()
			}
		}
		if step%500 == 499 && crash == nil && e.Err() == nil {
			// Quiesce: a committed checkpoint, then everything must match.
			sw.Set(nil)
			res, err := checkpointUntil(e, func() bool { return false })
			if err == nil && res.State == recovery.Committed {
				m.checkpointed(m.snapshot(), true)
				fullCheck()
			}
		}
	}
	// The end: no faults, one last checkpoint, exact check, staging empty.
	restart(false)
	sw.Set(nil)
	res := r.checkpoint()
	if res.State != recovery.Committed {
		fail("final checkpoint: %+v", res)
	}
	m.checkpointed(m.snapshot(), true)
	fullCheck()
	return st
}

func checkI5(t *testing.T, m *model, e *Engine, fail func(string, ...any)) {
	t.Helper()
	for k, want := range m.prepared {
		st, ok := e.Producer(wireID(k[0]))
		if !ok {
			fail("I5: producer %s lost", k[0])
		}
		got, ok := st.Streams[k[1]]
		if !ok {
			got.CommittedSeq = -1
		}
		if got.NextSeq != want || got.CommittedSeq != want-1 {
			fail("I5: %s/%s next %d committed %d, want next %d committed %d", k[0], k[1], got.NextSeq, got.CommittedSeq, want, want-1)
		}
	}
}

// duringInjector runs run once, at the first sync of a staging file (a
// checkpoint's pre-commit, after its barrier); if run returns an error,
// that sync and every operation after it fail with it, as if the process
// died there.
type duringInjector struct {
	run     func() error
	once    sync.Once
	ran     atomic.Bool
	crashed atomic.Bool
}

func (d *duringInjector) MaybeError(op faultfs.Op) error {
	if d.crashed.Load() {
		return faultfs.ErrCrashed
	}
	if op.Kind != faultfs.OpSync || !strings.HasSuffix(op.Path, ".inprogress") {
		return nil
	}
	var err error
	d.once.Do(func() {
		err = d.run()
		d.ran.Store(true)
		if err != nil {
			d.crashed.Store(true)
		}
	})
	return err
}
