package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testenv"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
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
// wedged). Around the clients, the world steps (model_world_test.go): an
// Iceberg table stream checked against the manifests, a wall clock that
// steps forward and back (key and producer expiry), and a retention job
// that removes committed partitions; a copy of state.db taken while a
// checkpoint commits, put back after retention removed that checkpoint's
// files (copyMidCommitAfterRetention: the replay finds them lost and must
// still start); and now and then the data dir fills for tens of steps
// while the clients go on (model_diskfull_test.go). EOSINK_MODEL_STEPS sets the steps
// (default 10,000; 2,500 under -race), EOSINK_MODEL_SEED replays a seed.
//
// A third of the seeds run the engine without a node lease (modelLease):
// the destination is then all a start knows of ids beyond a lost store.
// EOSINK_MODEL_LEASE=on|off forces one or the other.
func TestModel(t *testing.T) {
	steps := 10_000
	if raceEnabled {
		steps = 2_500
	}
	steps = testenv.Int(t, "EOSINK_MODEL_STEPS", steps)
	seed := testenv.Seed(t, "EOSINK_MODEL_SEED")
	lease := modelLease(t, seed)
	t.Logf("seed %d (replay with EOSINK_MODEL_SEED=%d), %d steps, node lease %v", seed, seed, steps, lease)
	stats := runModel(t, seed, steps, lease)
	t.Logf("model: %s", stats)
	fmt.Printf("model test: seed %d, %d steps, node lease %v: %s\n", seed, steps, lease, stats)
}

// modelLease says whether the run of seed has a node lease: as
// EOSINK_MODEL_LEASE says (on, off), else for two seeds in three, drawn
// from a stream of its own so that a seed's run with a lease is the one
// it was before the variant without one existed.
//
// Without a lease (Config.Leaser nil: one node per id is the operator's
// promise) ids beyond a lost store come from the destination only: the
// rebuild continues beyond the newest manifest, a block, and every part
// file it finds (recovery.Rebuilt.UnnamedHighest). The run then leaves out
// what needs a lease: an older copy of the store put back (nothing tells
// it older: the skipped BUG test in forgotten_test.go), stream
// configurations restored from the destination (an operator PUTs them
// again: restoreStreams), a commit feed bounded by the lease's ids
// (docs/feed.md), the lease's own steps.
func modelLease(t *testing.T, seed uint64) bool {
	switch v := os.Getenv("EOSINK_MODEL_LEASE"); v {
	case "on":
		return true
	case "off":
		return false
	case "":
		return rand.New(rand.NewPCG(seed, 0x6c65617365)).IntN(3) != 0
	default:
		t.Fatalf("EOSINK_MODEL_LEASE: %q, want on or off", v)
		return true
	}
}

type modelStats struct {
	writes, dups, dupsCommitted, gaps, fenced, future, anon, checkpoints, committed, aborted, injected, crashes, powerCuts, checks int
	restarts, barriers, barriersAborted, initsFailed, idsChecked, concurrent, storeLosses, startsKilled                            int
	copiesTaken, copiesRestored, forgotten, expiries, planted, lostMidCommit, lostAfterForget                                      int
	quiesceAborted, leasesDamaged, feedsFollowed, doomed, doomedStoreFull, doomedBehindStuck, doomedAtBlockEnd                     int
	copiesMidCommit, lostOnReplay                                                                                                  int
	diskFulls, diskFullSteps, diskFullInits, diskFullCheckpoints, diskFullBeside                                                   int
	diskFullTime                                                                                                                   time.Duration
	idleSpells, lossStartsKilled                                                                                                   int // without a lease: before a store loss
	world                                                                                                                          worldStats
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d writes, %d duplicates (%d committed), %d gaps, %d stale epochs, %d future epochs, %d anonymous, %d checkpoints (%d committed, %d aborted; %d with writes during their pre-commit, half of those cut there), %d client restarts (inits; %d ran a barrier checkpoint, %d of them aborted; %d inits cut by a fault), %d injected faults, %d crashes, %d power cuts, %d full checks (%d committed checkpoint ids checked against their answers, I8), %d state store losses (%d while a checkpoint committed), %d starts killed partway, %d live copies of state.db taken, %d restored (older copies), %d producers forgotten and created again (%d by expiry; %d times the store was lost before they committed), %d manifests planted by another writer (%d times the commit feed followed past one), %d quiescing checkpoints aborted (a fault earlier), %d node leases expired, damaged or deleted before a restart, %d checkpoints doomed by a failed staging file (writes refused, aborted by the engine; %d of them with the state store refusing reservations), %d doomed behind a stuck commit (aborted alone), %d doomed at the end of the reserved ids (aborted alone), %d copies of state.db taken mid-commit and restored after retention removed %d of that commit's files",
		s.writes, s.dups, s.dupsCommitted, s.gaps, s.fenced, s.future, s.anon, s.checkpoints, s.committed, s.aborted, s.concurrent, s.restarts, s.barriers, s.barriersAborted, s.initsFailed, s.injected, s.crashes, s.powerCuts, s.checks, s.idsChecked, s.storeLosses, s.lostMidCommit, s.startsKilled,
		s.copiesTaken, s.copiesRestored, s.forgotten, s.expiries, s.lostAfterForget, s.planted, s.feedsFollowed, s.quiesceAborted, s.leasesDamaged, s.doomed, s.doomedStoreFull, s.doomedBehindStuck, s.doomedAtBlockEnd, s.copiesMidCommit, s.lostOnReplay) + ", " + s.diskFullString() +
		fmt.Sprintf(", %d idle spells of more than a block of ids before a cut store loss, %d first starts after a loss killed partway (without a lease)", s.idleSpells, s.lossStartsKilled) +
		"; " + s.world.String()
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

// forgetFrom forgets the ends of checkpoints from id on: a start after a
// store loss hands out again ids that left no trace in the destination
// (without a lease: an empty or aborted checkpoint's after the newest
// manifest and a block), whose checkpoints are new ones.
func (l *checkpointLog) forgetFrom(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.end {
		if k >= id {
			delete(l.end, k)
		}
	}
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
	// Parquet split by a field: batches carry their checked values per piece to the encoder.
	{Format: streamconf.FormatParquet, Schema: testSchema, Partition: "s={field:s}/h={ingest:%H}"},
}

// modelRun is one run of the model test: the engine under test with its
// rig, faults and crashes, the model of what must be in the destination,
// and what the run has checked so far. Its steps are its methods.
type modelRun struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	base  *faultfs.CrashFS
	sw    *faultfs.SwapInjector
	inj   *faultfs.InjectFS
	r     *rig
	hour  time.Time
	clock time.Time    // the engine's wall clock (Config.Now reads now): setClock moves it
	now   atomic.Int64 // clock, Unix ns, as the engine's goroutines read it
	ckLog *checkpointLog
	e     *Engine
	km    *keyModel
	m     *model
	st    modelStats

	puts, putBarriers int
	producers         []string
	streams           []string
	ans               answers
	verified          map[uint64]bool // committed ids checked against their answers
	committedDups     []dupClaim      // committed duplicates, checked at the next full check
	epochUnsure       map[string]bool // an init cut by a crash: its epoch bump may or may not be durable
	crash             *faultfs.CrashAfterInjector
	trace             []string

	// A checkpoint whose result a crash hid (pending) is decided by the
	// store at the restart: prepared means it committed.
	pendingID   uint64
	pendingSnap map[[2]string]int64
	cutFS       *faultfs.CrashFS // a power cut taken earlier, with its state store copy
	cutStore    string

	// older is a copy of the live state.db taken at an earlier step; a
	// later step restores it (a volume snapshot or backup brought back).
	older       []byte
	incarnation int
	zombies     map[string]int64 // forgotten incarnations' last epochs, by name

	world         modelWorld    // table streams, clock steps, retention (model_world_test.go)
	doomWatch     doomWatch     // the engine's doomed checkpoints (encfail_test.go)
	storeReplaced bool          // the state store was lost or replaced by a copy once
	storeFull     *storeFaults  // the state store's writes, refused while a disk is full (settleDoomed)
	full          modelDiskFull // a long disk-full stretch (model_diskfull_test.go)
	noLease       bool          // the engine runs without a node lease (modelLease)
}

type dupClaim struct {
	b  invariant.BatchID
	id uint64
}

// newModelRun starts the engine of a model run on a fresh rig, with its
// streams configured and no producer yet; with a node lease or without
// (modelLease).
func newModelRun(t *testing.T, seed uint64, lease bool) *modelRun {
	mr := &modelRun{t: t, seed: seed, noLease: !lease}
	mr.rng = rand.New(rand.NewPCG(mr.seed, mr.seed^0x9e3779b97f4a7c15))
	mr.base = faultfs.NewCrashFS()
	mr.sw = &faultfs.SwapInjector{}
	mr.inj = mr.newInjectFS(mr.base)
	mr.r = newRig(mr.t, mr.inj)
	mr.hour = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	mr.clock = mr.hour
	mr.now.Store(mr.clock.UnixNano())
	mr.world = newModelWorld()
	mr.world.stats = &mr.st.world
	mr.ckLog = &checkpointLog{end: map[uint64]recovery.State{}}
	mr.r.tweak = func(c *Config) {
		c.Hooks.Checkpoint = mr.ckLog.hook
		c.Parallel = 1 + mr.rng.IntN(3)
		c.Now = func() time.Time { return time.Unix(0, mr.now.Load()).UTC() }
		c.RollBytes = 600 // small files: rolls happen
		c.BufferSize = 128
		// Compressed and Parquet files encoded as batches arrive, a step
		// per 256 bytes, inline: the seed alone decides the order of ops.
		c.Encoders = staging.NewInlineEncoders(256)
		// Keys and producers expire as the clock passes them (clockStep
		// steps it, by the window and more); the model knows which may go.
		c.IdempotencyWindow, c.ProducerExpiry = modelKeyWindow, modelProducerExpiry
		c.TableLocation = "file://" + rigDest // table streams (tableStep)
		c.MaxKeys = modelMaxKeys              // the cap is reached: committed keys are dropped, never live ones (keyModel)
		c.idBlock = 8                         // ids reserved often: a refused reservation meets a doom (settleDoomed)
		// A node lease that never expires on this clock: every start must
		// know the lease its data dir left for its own, whatever fault or
		// crash cut the last one (lease_test.go has the expiry).
		// One destination for the commits, the manifests, the table
		// metadata and the lease, as eosink serve wires it: a lock a
		// killed incarnation left (the lease's, a table's version hint's)
		// is broken by a later start at once, as it knows the incarnation
		// dead (TestOrphanedTableLockOfFormerIncarnation).
		leaser := local.New(c.FS, rigDest, rigStaging)
		leaser.StaleLock = time.Hour // a left lock is broken by its owner, not its age
		if mr.storeReplaced {
			// A store lost or restored is a new file, for which the memo
			// of former incarnations does not count: their locks are
			// broken by age, and replacing a store takes longer than
			// StaleLock (10 s) does.
			leaser.StaleLock = time.Millisecond
		}
		c.Committer, c.Publisher = leaser, leaser
		c.Leaser, c.LeaseTimeout, c.Listen = leaser, 1<<20*time.Hour, "127.0.0.1:1"
		if mr.noLease {
			// No lease, so no memo of former incarnations: a lock a
			// killed one left (a table's version hint's) is broken by
			// its age alone.
			leaser.StaleLock = time.Millisecond
			c.Leaser = nil
		}
	}
	// The state store's write transactions go through storeFull, which
	// settleDoomed has refuse the reservation of ids ahead for space.
	mr.storeFull = mr.r.withStoreFaults()
	mr.withFullStore()
	mr.e = mr.r.start(nil)
	// s1 is a zstd stream and s2 a Parquet stream (streams_test.go): their
	// pre-commit encodes under the same crashes and faults. The empty
	// checkpoint is the barrier that puts them in force.
	for s, c := range map[string]streamconf.Config{
		"s1": {Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd},
		"s2": {Format: streamconf.FormatParquet, Schema: testSchema},
	} {
		if _, err := mr.e.PutStream(mr.t.Context(), s, c); err != nil {
			mr.t.Fatal(err)
		}
	}
	mr.r.checkpoint()
	mr.km = &keyModel{window: modelKeyWindow, now: mr.clock}
	mr.puts, mr.putBarriers = 0, 0
	mr.m = newModel()
	mr.m.fatal = mr.fail
	mr.producers = []string{"p0", "p1", "p2", "p3"}
	mr.streams = []string{"s0", "s1", "s2"}
	mr.ans = answers{}
	mr.verified = map[uint64]bool{}    // committed ids checked against their answers
	mr.epochUnsure = map[string]bool{} // an init cut by a crash: its epoch bump may or may not be durable

	// older is a copy of the live state.db taken at an earlier step; a
	// later step restores it (a volume snapshot or backup brought back).
	mr.incarnation = 0
	mr.zombies = map[string]int64{} // forgotten incarnations' last epochs, by name
	return mr
}

func runModel(t *testing.T, seed uint64, steps int, lease bool, opts ...func(*modelRun)) modelStats {
	mr := newModelRun(t, seed, lease)
	for _, o := range opts {
		o(mr)
	}
	defer func() { mr.t.Logf("keyed: %s", mr.km.st) }()
	defer func() {
		mr.t.Logf("stream configuration changes: %d, %d of them with a barrier checkpoint", mr.puts, mr.putBarriers)
	}()

	for step := range steps {
		if mr.crash != nil && mr.crash.Crashed() || mr.e.Err() != nil {
			mr.restart(mr.rng.IntN(2) == 0)
		}
		mr.settleDoomed() // encfail_test.go
		mr.diskFullStep()
		if mr.rng.IntN(12) == 0 {
			mr.note("%s", mr.km.step(mr.t, mr.rng, mr.m, mr.e, mr.ans, mr.streams, mr.fail))
			if mr.km.kicked {
				mr.settleKeyKick()
			}
			continue
		}
		if mr.rng.IntN(60) == 0 { // s0's configuration changes mid-flight
			mr.putStream()
			continue
		}
		if mr.rng.IntN(50) == 0 { // a table stream, a clock step, a retention job
			if mr.full.left == 0 {
				mr.worldStep()
			}
			continue
		}
		p := mr.producers[mr.rng.IntN(len(mr.producers))]
		s := mr.streams[mr.rng.IntN(len(mr.streams))]
		k := [2]string{p, s}
		_, inited := mr.m.epoch[p]
		var skip bool
		switch x := mr.rng.IntN(100); {
		case !inited || x < 3: // a (new incarnation of the) client inits and goes on from next_seq
			skip = mr.initProducer(p, inited)
		case x < 60:
			mr.write(p, s, k)
		case x < 66:
			skip = mr.duplicate(p, s, k)
		case x < 70:
			mr.gap(p, s, k)
		case x < 72:
			skip = mr.staleEpoch(p, s, k)
		case x < 73:
			mr.futureEpoch(p, s, k)
		case x < 78:
			mr.anonymous(s)
		case x == 85 && mr.crash == nil && mr.full.left == 0:
			skip = mr.doomBehindStuck(p, s, k)
		case x == 84 && mr.crash == nil && mr.full.left == 0:
			skip = mr.doomAtBlockEnd(p, s, k)
		case x >= 86 && x < 88 && mr.crash == nil:
			mr.checkpointDuringPreCommit(step)
		case x < 88 && mr.full.left > 0 && mr.rng.IntN(2) == 0:
			mr.checkpointBesideInits() // model_diskfull_test.go
		case x < 88:
			mr.checkpoint()
		case x < 92:
			skip = mr.injectFault()
		case x < 94:
			skip = mr.armCrash()
		case x < 96:
			mr.storeEvent()
		case x < 97: // the hour turns: new partitions
			mr.setClock(mr.clock.Add(time.Hour))
		default:
			if mr.crash == nil {
				mr.fullCheck()
			}
		}
		if skip {
			continue
		}
		if step%500 == 499 && mr.crash == nil && mr.e.Err() == nil {
			mr.settleDoomed()
			mr.quiesce()
		}
	}
	// The end: no faults, one last checkpoint, exact check, staging empty.
	if mr.full.left > 0 {
		mr.diskFullEnd()
	}
	mr.restart(false)
	mr.sw.Set(nil)
	res := mr.r.checkpoint()
	if res.State != recovery.Committed {
		mr.fail("final checkpoint: %+v", res)
	}
	mr.m.checkpointed(mr.m.snapshot(), true)
	mr.fullCheck()
	return mr.st
}

// write sends p's next batch on stream s.
func (mr *modelRun) write(p, s string, k [2]string) {
	mr.st.writes++
	err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, s, 1+mr.rng.IntN(4))
	mr.note("write %v seq %d: %v", k, mr.m.next[k], err)
	// A staging file that failed during the write (an inline encoding
	// step, a broken file) dooms its checkpoint: the write is refused
	// with its error, the answer a plain stream's write gets for it.
	// settleDoomed, at the next step, forgets what the checkpoint held.
	if d := mr.doomWatch.peek(mr.e); d != nil {
		if err := refusedFor(d, err); err != nil {
			mr.fail("write %v: %v", k, err)
		}
	}
}

// gap sends a batch beyond the next expected: refused, naming it.
func (mr *modelRun) gap(p, s string, k [2]string) {
	mr.st.gaps++
	seq := mr.m.next[k] + 1 + mr.rng.Int64N(3)
	_, err := send(mr.e, &Producer{ID: p, Epoch: mr.m.epoch[p]}, s, seq, 1)
	if exp, ok := isSeqErr(err); !ok || exp != mr.m.next[k] {
		mr.fail("gap %v/%d: %v, want expected_seq %d", k, seq, err, mr.m.next[k])
	}
}

// staleEpoch sends under an older epoch: fenced.
func (mr *modelRun) staleEpoch(p, s string, k [2]string) (skip bool) {
	if mr.m.epoch[p] == 0 {
		return true
	}
	mr.st.fenced++
	_, err := send(mr.e, &Producer{ID: p, Epoch: mr.m.epoch[p] - 1}, s, mr.m.next[k], 1)
	if !errors.Is(err, ErrFenced) {
		mr.fail("stale epoch: %v", err)
	}
	return false
}

// futureEpoch sends under an epoch never handed out: refused.
func (mr *modelRun) futureEpoch(p, s string, k [2]string) {
	mr.st.future++
	_, err := send(mr.e, &Producer{ID: p, Epoch: mr.m.epoch[p] + 1}, s, mr.m.next[k], 1)
	if !errors.Is(err, ErrInvalidEpoch) {
		mr.fail("future epoch: %v", err)
	}
}

// anonymous sends a batch without producer headers.
func (mr *modelRun) anonymous(s string) {
	mr.st.anon++
	mr.m.anonSeq++
	id := invariant.BatchID{Stream: s, Seq: mr.m.anonSeq}
	if res, err := send(mr.e, nil, s, mr.m.anonSeq, 2); err == nil {
		mr.m.anon[res.Checkpoint] = append(mr.m.anon[res.Checkpoint], id)
		mr.ans.add(res.Checkpoint, id)
	}
}

// checkpoint runs a checkpoint; one whose end a crash hid is decided by
// the store after a restart.
func (mr *modelRun) checkpoint() { mr.checkpointBeside(nil) }

// checkpointBeside is checkpoint with beside (nil: none) run while the
// checkpoint runs; beside returns once done is closed, or before.
func (mr *modelRun) checkpointBeside(beside func(done <-chan struct{})) {
	mr.st.checkpoints++
	id := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	armed := mr.crash // the poller must not read the variable the loop reassigns
	var res CheckpointResult
	var err error
	if beside == nil {
		res, err = checkpointUntil(mr.e, func() bool { return armed != nil && armed.Crashed() })
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err = checkpointUntil(mr.e, func() bool { return armed != nil && armed.Crashed() })
		}()
		beside(done)
		<-done
	}
	mr.note("checkpoint %d: %s %v %v", id, res.State, res.Error, err)
	switch {
	case err == nil && res.State == recovery.Committed:
		mr.st.committed++
		mr.m.checkpointed(snap, true)
		mr.m.resolveAnon(mr.t, mr.e)
	case err == nil:
		mr.st.aborted++
		mr.m.checkpointed(snap, false)
		mr.m.resolveAnon(mr.t, mr.e)
	case errors.Is(err, ErrDiskFull) && mr.full.left > 0 && mr.e.Err() == nil && !(armed != nil && armed.Crashed()):
		mr.checkpointRefusedForSpace(id, err)
	default:
		mr.pendingID, mr.pendingSnap = id, snap
		mr.restart(mr.rng.IntN(2) == 0)
	}
}

// injectFault injects one failure a few operations ahead.
func (mr *modelRun) injectFault() (skip bool) {
	if mr.crash != nil {
		return true
	}
	mr.st.injected++
	errno := []error{syscall.EIO, syscall.ENOSPC}[mr.rng.IntN(2)]
	kinds := sweepKinds
	if mr.rng.IntN(2) == 0 {
		kinds = faultfs.Kinds([]faultfs.OpKind{faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpOpen, faultfs.OpClose}[mr.rng.IntN(5)])
	}
	if mr.rng.IntN(4) == 0 {
		n := mr.rng.Int64N(8)
		mr.sw.Set(faultfs.ShortWriteNth(n, errno))
		mr.note("short write %d", n)
	} else {
		n := mr.rng.Int64N(20)
		mr.sw.Set(faultfs.FailNth(n, kinds, errno))
		mr.note("fail %d of %s", n, kinds)
	}
	return false
}

// armCrash arms a crash a few operations ahead.
func (mr *modelRun) armCrash() (skip bool) {
	if mr.crash != nil {
		return true
	}
	mr.crash = faultfs.CrashAfter(mr.rng.Int64N(40), sweepKinds)
	mr.sw.Set(mr.crash)
	mr.note("crash armed")
	return false
}

// quiesce turns faults off and runs a checkpoint; once one commits,
// everything must match. It may still abort: an earlier fault can have
// failed a compressed file's encoder while its batches were accepted
// (the error shows at the pre-commit). The model then forgets those
// batches as the engine does; a checkpoint whose end an error hid is
// decided by the store after a restart, as in the checkpoint step.
func (mr *modelRun) quiesce() {
	mr.sw.Set(nil)
	id := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	res, err := checkpointUntil(mr.e, func() bool { return false })
	mr.note("quiesce: checkpoint %d: %s %v %v", id, res.State, res.Error, err)
	switch {
	case err == nil && res.State == recovery.Committed:
		mr.m.checkpointed(snap, true)
		mr.fullCheck()
	case err == nil:
		mr.st.aborted++
		mr.st.quiesceAborted++
		mr.m.checkpointed(snap, false)
		mr.m.resolveAnon(mr.t, mr.e)
	default:
		mr.pendingID, mr.pendingSnap = id, snap
		mr.restart(false)
	}
}

func (mr *modelRun) initProducer(p string, inited bool) (skip bool) {
	mr.st.restarts++
	open := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	armed := mr.crash
	ctx, cancel := untilCtx(func() bool { return armed != nil && armed.Crashed() })
	ps, err := mr.e.InitProducer(ctx, wireID(p))
	cancel()
	if err != nil && errors.Is(err, ErrDiskFull) && mr.full.left > 0 && mr.e.Err() == nil && !(armed != nil && armed.Crashed()) {
		return mr.initRefusedForSpace(p, inited, open, snap, err)
	}
	if err != nil {
		// A fault stopped the engine, or the crash point hid the
		// barrier's end: only the store knows, after a restart.
		mr.note("init %s: %v", p, err)
		mr.st.initsFailed++
		mr.world.touchUnsure(p, mr.clock)
		if inited {
			mr.epochUnsure[p] = true
		}
		mr.pendingID, mr.pendingSnap = open, snap
		mr.restart(mr.rng.IntN(2) == 0)
		if !inited {
			return true // inited again at a later step
		}
		return false
	}
	if inited && ps.Epoch != mr.m.epoch[p]+1 {
		mr.fail("init %s: epoch %d after %d", p, ps.Epoch, mr.m.epoch[p])
	}
	mr.m.epoch[p] = ps.Epoch
	mr.world.touched(p, mr.clock)
	if state, ran := mr.ckLog.state(open); ran && mr.e.Status().OpenID > open {
		mr.st.barriers++
		if state == recovery.Aborted {
			mr.st.barriersAborted++
		}
		mr.m.checkpointed(snap, state == recovery.Committed)
		mr.m.resolveAnon(mr.t, mr.e)
	}
	mr.note("init %s: epoch %d %+v", p, ps.Epoch, ps.Streams)
	// I12: what init answers is durable, and all there is: the
	// client goes on from next_seq, whatever follows.
	for _, s := range mr.streams {
		k := [2]string{p, s}
		got, ok := ps.Streams[s]
		if !ok {
			got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
		}
		if got.NextSeq != mr.m.next[k] || got.NextSeq != mr.m.prepared[k] || got.CommittedSeq != mr.m.prepared[k]-1 {
			mr.fail("I12: init %s/%s: next_seq %d committed_seq %d; accepted next %d, prepared next %d", p, s, got.NextSeq, got.CommittedSeq, mr.m.next[k], mr.m.prepared[k])
		}
	}
	return false
}

func (mr *modelRun) duplicate(p, s string, k [2]string) (skip bool) {
	if mr.m.next[k] == 0 {
		return true
	}
	mr.st.dups++
	seq := mr.rng.Int64N(mr.m.next[k])
	if pend := mr.m.next[k] - mr.m.prepared[k]; pend > 0 && mr.rng.IntN(2) == 0 {
		seq = mr.m.prepared[k] + mr.rng.Int64N(pend) // one not yet committed
	}
	res, err := send(mr.e, &Producer{ID: p, Epoch: mr.m.epoch[p]}, s, seq, 1)
	if err != nil || !res.Duplicate || res.NextSeq != mr.m.next[k] {
		mr.fail("duplicate %v/%d: %+v %v", k, seq, res, err)
	}
	if want := seq < mr.m.prepared[k] && mr.m.prepared[k] > 0; res.Committed != want {
		mr.fail("I9: duplicate %v/%d reported committed %v, prepared (and so committed) next is %d", k, seq, res.Committed, mr.m.prepared[k])
	}
	b := invariant.BatchID{Producer: p, Stream: s, Seq: seq}
	if res.Committed {
		mr.st.dupsCommitted++
		c, err := mr.e.store.Get(res.Checkpoint)
		if errors.Is(err, recovery.ErrNotFound) {
			// Rebuilt from the destination after a store loss: the
			// checkpoint is known by its manifest only.
			if ok, _ := afero.Exists(mr.base, rigDest+"/"+layout.ManifestName(rigNode, res.Checkpoint)); ok {
				c, err = &recovery.Checkpoint{ID: res.Checkpoint, State: recovery.Committed}, nil
			}
		}
		if err != nil || c.State != recovery.Committed {
			mr.fail("I9/8a: committed duplicate %s names checkpoint %d: %+v %v", b, res.Checkpoint, c, err)
		}
		mr.committedDups = append(mr.committedDups, dupClaim{b, res.Checkpoint})
	} else if !mr.ans[res.Checkpoint][b] {
		mr.fail("duplicate %s rides in checkpoint %d, which did not accept it", b, res.Checkpoint)
	}
	return false
}

// A checkpoint with writes while it pre-commits (they go to the
// next checkpoint), and half the time a power cut right then:
// the ids those answers named must never name other data (I8).
func (mr *modelRun) checkpointDuringPreCommit(step int) {
	mr.st.checkpoints++
	mr.st.concurrent++
	id := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	cut := mr.rng.IntN(2) == 0
	k2 := [2]string{mr.producers[mr.rng.IntN(len(mr.producers))], mr.streams[mr.rng.IntN(len(mr.streams))]}
	_, k2inited := mr.m.epoch[k2[0]]
	type written struct {
		b   invariant.BatchID
		res WriteResult
		err error
	}
	var during []written
	var cutErr error
	mr.m.anonSeq++
	anonID := invariant.BatchID{Stream: k2[1], Seq: mr.m.anonSeq}
	storeCopy := filepath.Join(filepath.Dir(mr.r.storePath), fmt.Sprintf("state-cut-%d.db", step))
	stall := &duringInjector{run: func() error {
		// Runs once, in the coordinator, at the first staging sync.
		if k2inited {
			b := invariant.BatchID{Producer: k2[0], Stream: k2[1], Seq: mr.m.next[k2]}
			res, err := send(mr.e, &Producer{ID: k2[0], Epoch: mr.m.epoch[k2[0]]}, k2[1], b.Seq, 1)
			during = append(during, written{b, res, err})
		}
		res, err := send(mr.e, nil, k2[1], anonID.Seq, 1)
		during = append(during, written{anonID, res, err})
		if !cut {
			return nil
		}
		mr.cutFS, mr.cutStore = mr.base.CrashClone(), storeCopy
		data, err := os.ReadFile(mr.r.storePath)
		if err == nil {
			err = os.WriteFile(storeCopy, data, 0o600)
		}
		cutErr = err
		return faultfs.ErrCrashed
	}}
	mr.sw.Set(stall)
	res, err := checkpointUntil(mr.e, stall.crashed.Load)
	mr.note("checkpoint %d with writes during pre-commit (cut %v): %s %v %v", id, cut, res.State, res.Error, err)
	if cutErr != nil {
		mr.fail("copy state store at the cut: %v", cutErr)
	}
	for _, w := range during {
		if w.err != nil {
			continue
		}
		if w.res.Checkpoint != id+1 {
			mr.fail("write during the pre-commit of %d answered checkpoint %d", id, w.res.Checkpoint)
		}
		mr.ans.add(w.res.Checkpoint, w.b)
		if w.b.Producer == "" {
			mr.m.anon[w.res.Checkpoint] = append(mr.m.anon[w.res.Checkpoint], w.b)
		} else if w.res.Duplicate || w.res.NextSeq != w.b.Seq+1 {
			mr.fail("write %s during pre-commit: %+v", w.b, w.res)
		}
	}
	if stall.ran.Load() && cut {
		// The process died at the stall: nothing after it happened.
		mr.pendingID, mr.pendingSnap = id, snap
		mr.restart(true)
		return
	}
	mr.cutFS = nil
	mr.sw.Set(nil)
	for _, w := range during {
		if w.err == nil && w.b.Producer != "" {
			mr.m.next[k2] = w.b.Seq + 1
		}
	}
	switch {
	case err == nil && res.State == recovery.Committed:
		mr.st.committed++
		mr.m.checkpointed(snap, true)
	case err == nil:
		mr.st.aborted++
		mr.m.checkpointed(snap, false)
	default:
		mr.pendingID, mr.pendingSnap = id, snap
		mr.restart(false)
	}
	mr.m.resolveAnon(mr.t, mr.e)
}

// doomBehindStuck: the open checkpoint n holds p's next batch on s and
// is cut; its commit is stuck (renames of staging files fail, retried
// until they pass: I4), while n+1 takes p's next batch and is doomed (a
// staging file that can't be finished, noted as an encoder's failure
// notes it). n+1 must abort on its own at once, alone: writes are
// accepted into n+2 behind the stuck commit, p going on from n's
// barrier. Then the commit passes. (A liveness check the other steps
// lacked: their checkpoints end within the step, so a doom never met a
// stuck commit, and a refused write breaks no invariant; before the
// abort alone, every write was refused for as long as n was stuck.)
func (mr *modelRun) doomBehindStuck(p, s string, k [2]string) (skip bool) {
	if _, inited := mr.m.epoch[p]; !inited || mr.cutFS != nil || mr.e.Err() != nil || mr.doomWatch.peek(mr.e) != nil {
		return true
	}
	if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, s, 1); err != nil {
		mr.note("doom behind a stuck commit: write %v: %v", k, err)
		return true
	}
	mr.st.checkpoints++
	n := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	var stuck atomic.Bool
	var fired atomic.Int64
	stuck.Store(true)
	mr.sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		// The commit's renames of part files, not the lease document's
		// (a reservation of ids before the barrier writes it).
		if stuck.Load() && op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging) && strings.HasPrefix(filepath.Base(op.Path), "part-") {
			fired.Add(1)
			return syscall.EIO
		}
		return nil
	}))
	type ended struct {
		res CheckpointResult
		err error
	}
	done := make(chan ended, 1)
	go func() {
		res, err := checkpointUntil(mr.e, func() bool { return false })
		done <- ended{res, err}
	}()
	end := func() {
		stuck.Store(false)
		r := <-done
		mr.sw.Set(nil)
		mr.note("checkpoint %d (its commit was stuck): %s %v %v", n, r.res.State, r.res.Error, r.err)
		switch {
		case r.err == nil && r.res.State == recovery.Committed && r.res.ID == n:
			mr.st.committed++
			mr.m.checkpointed(snap, true)
			mr.m.resolveAnon(mr.t, mr.e)
		default:
			mr.fail("checkpoint %d, whose commit was stuck: %+v %v, want committed", n, r.res, r.err)
		}
	}
	for fired.Load() == 0 {
		select {
		case r := <-done:
			done <- r
			end() // ended before its commit: nothing was stuck
			return false
		case <-time.After(100 * time.Microsecond):
		}
	}
	// n is prepared (its commit runs): bound to commit.
	mr.m.checkpointed(snap, true)
	if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, s, 1); err != nil {
		mr.fail("write %v into %d behind the stuck commit of %d: %v", k, n+1, n, err)
	}
	mr.e.ing.doomFile(n+1, s, fmt.Errorf("model: a staging file can't be finished: %w", ErrDiskFull))
	mr.doomWatch.met(mr.e) // settled here
	mr.st.doomedBehindStuck++
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if state, ok := mr.ckLog.state(n + 1); ok {
			if state != recovery.Aborted {
				mr.fail("doomed checkpoint %d ended %s", n+1, state)
			}
			break
		}
		if time.Now().After(deadline) {
			_, err := send(mr.e, nil, s, 0, 1)
			mr.fail("doomed open checkpoint %d not aborted within 5 s behind the stuck commit of %d: writes refused meanwhile (%v)", n+1, n, err)
		}
	}
	mr.m.rollback() // p back to n's barrier
	if s, ok := mr.ckLog.state(n); ok {
		mr.fail("checkpoint %d ended (%s) while its commit was stuck", n, s)
	}
	seq := mr.m.next[k]
	res, err := mr.m.writeResult(mr.t, mr.e, p, s, 1)
	if err != nil || res.Checkpoint != n+2 {
		mr.fail("write %v/%d behind the stuck commit after the doomed checkpoint's abort: %+v %v, want accepted into %d", k, seq, res, err, n+2)
	}
	mr.ans.add(res.Checkpoint, invariant.BatchID{Producer: p, Stream: s, Seq: seq})
	mr.note("doomed %d behind the stuck commit of %d: aborted alone, %v/%d accepted into %d", n+1, n, k, seq, res.Checkpoint)
	end()
	return false
}

// doomAtBlockEnd: the data dir fills. The state store refuses every
// reservation of ids ahead (ENOSPC), and checkpoints go on, each while
// the ids it may hand out are reserved, until only the open checkpoint's
// next is. Then a staging file of the open checkpoint n can't be
// finished (doomed): the coordinator may not cut it (a cut's abort opens
// n+2, not reserved), so n must abort alone, with the coordinator free,
// opening n+1 (c907c6c): left open, its files would hold the space the
// store needs for ever, and every write be refused 507. Then the disk
// has room again.
func (mr *modelRun) doomAtBlockEnd(p, s string, k [2]string) (skip bool) {
	if _, inited := mr.m.epoch[p]; !inited || mr.cutFS != nil || mr.e.Err() != nil || mr.doomWatch.peek(mr.e) != nil {
		return true
	}
	mr.sw.Set(nil)
	mr.storeFull.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
	defer mr.storeFull.set(nil)
	for range 2 * mr.e.cfg.idBlock {
		if mr.e.pipe.reserved.Load() < mr.e.Status().OpenID+2 || mr.crash != nil || mr.e.Err() != nil {
			break
		}
		mr.checkpoint()
	}
	n, reserved := mr.e.Status().OpenID, mr.e.pipe.reserved.Load()
	if mr.crash != nil || mr.e.Err() != nil || reserved != n+1 || mr.doomWatch.peek(mr.e) != nil {
		mr.note("doom at the block's end: not reached (open %d, reserved %d)", n, reserved)
		return false
	}
	if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, s, 1); err != nil {
		mr.note("doom at the block's end: write %v: %v", k, err)
	}
	mr.e.ing.doomFile(n, s, fmt.Errorf("model: a staging file can't be finished: %w", ErrDiskFull))
	mr.doomWatch.met(mr.e) // settled here
	mr.st.doomedAtBlockEnd++
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if state, ok := mr.ckLog.state(n); ok {
			if state != recovery.Aborted {
				mr.fail("doomed checkpoint %d at the block's end ended %s", n, state)
			}
			break
		}
		if time.Now().After(deadline) {
			mr.fail("doomed open checkpoint %d not aborted within 5 s, only %d reserved (reserving more refused for space)", n, reserved)
		}
	}
	mr.m.rollback()
	mr.m.resolveAnon(mr.t, mr.e)
	if got := mr.e.Status().OpenID; got != n+1 {
		mr.fail("after the abort alone of %d at the block's end: open %d, want %d (reserved %d, I8)", n, got, n+1, reserved)
	}
	mr.note("doomed %d at the block's end (reserved %d): aborted alone", n, reserved)
	return false
}

func (mr *modelRun) storeEvent() {
	if mr.crash != nil || mr.cutFS != nil || mr.e.Err() != nil {
		mr.restart(mr.rng.IntN(2) == 0)
		return
	}
	y := mr.rng.IntN(40)
	if mr.full.left > 0 && y < 13 {
		y = 39 // these need a disk with room: a restart instead
	}
	switch {
	case y == 12: // the data dir fills for a long stretch (model_diskfull_test.go)
		mr.diskFullStart()
	case y < 4: // the state store is lost, or an older copy comes back
		mr.sw.Set(nil) // the loss is the fault of this step
		var copyOf []byte
		if y >= 2 && mr.older != nil {
			copyOf, mr.older = mr.older, nil
			mr.st.copiesRestored++
		} else {
			mr.st.storeLosses++
		}
		mr.loseStore(copyOf, mr.rng.IntN(2) == 0)
	case y < 6 && mr.noLease: // no older copy without a lease: lost instead
		mr.sw.Set(nil)
		mr.st.storeLosses++
		mr.loseStore(nil, mr.rng.IntN(2) == 0)
	case y < 6: // a snapshot of the live state.db, restored at a later step
		data, err := os.ReadFile(mr.r.storePath)
		if err != nil {
			mr.fail("copy state.db: %v", err)
		}
		mr.older = data
		mr.st.copiesTaken++
		mr.note("state.db copied")
		if mr.rng.IntN(2) == 0 {
			break // restored at a later step, if at all
		}
		// Restored soon, before the node reserves more ids: the
		// copy's reserved block still covers every manifest since.
		mr.sw.Set(nil)
		for range 1 + mr.rng.IntN(3) {
			for range 3 {
				p := mr.producers[mr.rng.IntN(len(mr.producers))]
				if _, inited := mr.m.epoch[p]; inited {
					if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, mr.streams[mr.rng.IntN(len(mr.streams))], 1); err != nil {
						mr.fail("write before the copy comes back: %v", err)
					}
				}
			}
			commitAll(mr.t, mr.e, mr.m, "before the copy comes back", mr.fail)
		}
		mr.storeReplaced = true
		mr.e, _ = loseStore(mr.t, mr.r, mr.e, mr.m, mr.older, mr.zombies, false, mr.leaseAfterLoss(), nil, mr.fail)
		mr.older = nil
		mr.st.copiesRestored++
		mr.km.storeLost()
		mr.world.touchesLost(mr.m)
		mr.note("state.db replaced by the copy")
		mr.fullCheck()
	case y < 8: // producers forgotten (DELETE, expiry), created again from seq 0
		mr.sw.Set(nil)
		mr.forget(mr.rng.IntN(3) == 0)
	case y < 10: // a manifest planted under this node's prefix
		mr.sw.Set(nil)
		mr.plantManifest(-1)
	case y < 12 && !mr.noLease: // the node lease expired, damaged or deleted; the store kept
		how := leaseAfterLoss(mr.rng.IntN(3))
		mr.r.stop()
		mr.sw.Set(nil)
		damageLease(mr.r.fs, how, mr.fail)
		mr.st.leasesDamaged++
		mr.note("lease %s", how)
		mr.restart(mr.rng.IntN(2) == 0)
	case y < 14 && !mr.noLease: // a copy taken mid-commit comes back after retention removed that commit's files (an older copy: not without a lease)
		mr.sw.Set(nil)
		mr.copyMidCommitAfterRetention()
	default:
		mr.restart(mr.rng.IntN(2) == 0)
	}
}

// copyMidCommitAfterRetention takes a copy of the live state.db while a
// checkpoint c commits (recorded prepared, its files not yet final: a
// backup runs at any moment), lets c commit and one more checkpoint
// after it with batches of the same producers and streams (so that c's
// are not their newest),
// then removes c's files that hold no producer's newest batch, as a
// retention job would (and, half the time, c's manifest with them), and
// puts the copy back. The start re-commits c: neither its staged data
// nor those final files exist (committer.ErrLost). It must become ready
// (r.start: not a replay retrying for ever), record c committed — it
// was — and tell every producer what the model knows committed (I12,
// loseStore); resends of c's batches are then committed duplicates.
// The files kept are not removed (retentionVictim's rule: a store lost
// later rebuilds producers from manifests whose files are held).
func (mr *modelRun) copyMidCommitAfterRetention() {
	var pairs [][2]string
	for range 1 + mr.rng.IntN(4) {
		p := mr.producers[mr.rng.IntN(len(mr.producers))]
		if _, inited := mr.m.epoch[p]; inited {
			pairs = append(pairs, [2]string{p, mr.streams[mr.rng.IntN(len(mr.streams))]})
		}
	}
	write := func() {
		for _, k := range pairs {
			if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, k[0], k[1], 1+mr.rng.IntN(2)); err != nil {
				mr.fail("write around a copy taken mid-commit: %v", err)
			}
		}
	}
	// Whatever is open commits first: the copy is to hold c prepared.
	commitAll(mr.t, mr.e, mr.m, "before a copy taken mid-commit", mr.fail)
	write()
	var copyOf []byte
	fence := mr.e.fin.Fence
	mr.e.fin.Fence = func() error {
		if copyOf == nil {
			data, err := os.ReadFile(mr.r.storePath)
			if err != nil {
				return err
			}
			copyOf = data
		}
		if fence != nil {
			return fence()
		}
		return nil
	}
	c := commitAll(mr.t, mr.e, mr.m, "a copy taken mid-commit", mr.fail)
	mr.e.fin.Fence = fence
	if copyOf == nil {
		return // nothing to commit: no checkpoint was prepared
	}
	write() // the same producers and streams: c's batches are not their newest
	commitAll(mr.t, mr.e, mr.m, "after a copy taken mid-commit", mr.fail)
	mr.fullCheck() // every data file in place is committed
	var removed int
	for _, f := range c.Files {
		if f.Stream == tableStream {
			continue // a table's files go by table maintenance
		}
		data, err := afero.ReadFile(mr.base, rigDest+"/"+f.Final)
		if err != nil {
			mr.fail("copy mid-commit: read %s: %v", f.Final, err)
		}
		bs, err := invariant.FileBatches(f.Final, data)
		if err != nil {
			mr.fail("copy mid-commit: read %s: %v", f.Final, err)
		}
		if slices.ContainsFunc(bs, func(b invariant.BatchID) bool {
			return b.Producer != "" && b.Seq == mr.m.prepared[[2]string{b.Producer, b.Stream}]-1
		}) {
			continue
		}
		mr.r.checker.Removed(f.Final, data)
		if err := mr.base.Remove(rigDest + "/" + f.Final); err != nil {
			mr.fail("copy mid-commit: remove %s: %v", f.Final, err)
		}
		if err := durable.SyncDir(mr.base, path.Dir(rigDest+"/"+f.Final)); err != nil {
			mr.fail("copy mid-commit: sync: %v", err)
		}
		removed++
	}
	if removed > 0 && mr.rng.IntN(2) == 0 {
		name := rigDest + "/" + layout.ManifestName(rigNode, c.ID)
		if err := mr.base.Remove(name); err != nil {
			mr.fail("copy mid-commit: remove the manifest: %v", err)
		}
		if err := durable.SyncDir(mr.base, path.Dir(name)); err != nil {
			mr.fail("copy mid-commit: sync: %v", err)
		}
	}
	mr.st.copiesMidCommit++
	mr.st.lostOnReplay += removed
	mr.note("state.db copied while checkpoint %d committed; %d of its %d files removed since", c.ID, removed, len(c.Files))
	mr.storeReplaced = true
	mr.e, _ = loseStore(mr.t, mr.r, mr.e, mr.m, copyOf, mr.zombies, false, mr.leaseAfterLoss(), nil, mr.fail)
	if got := mr.e.Status().LostFiles; got != int64(removed) {
		mr.fail("copy mid-commit: the start counted %d lost files, %d were removed", got, removed)
	}
	mr.st.copiesRestored++
	mr.km.storeLost()
	mr.world.touchesLost(mr.m)
	mr.note("state.db replaced by the copy taken mid-commit")
	mr.fullCheck()
}

// leaseAfterLoss picks how the node lease looks after a store loss: most
// often expired, as a process that stopped long ago leaves it; else
// unreadable or deleted, so that the start knows none of the ids
// reserved before.
func (mr *modelRun) leaseAfterLoss() leaseAfterLoss {
	return [...]leaseAfterLoss{leaseExpired, leaseExpired, leaseUnreadable, leaseDeleted}[mr.rng.IntN(4)]
}

// putStream changes s0's configuration mid-flight: a barrier, like init.
func (mr *modelRun) putStream() {
	mr.puts++
	mr.put("s0", s0Confs[mr.rng.IntN(len(s0Confs))])
}

// put configures stream (a barrier, like init) and reports whether the
// engine answered; on an error the store decides after a restart.
func (mr *modelRun) put(stream string, conf streamconf.Config) bool {
	open := mr.e.Status().OpenID
	snap := mr.m.snapshot()
	armed := mr.crash
	ctx, cancel := untilCtx(func() bool { return armed != nil && armed.Crashed() })
	_, err := mr.e.PutStream(ctx, stream, conf)
	cancel()
	mr.note("put %s %+v: %v", stream, conf, err)
	if err != nil {
		// A fault stopped the engine or refused the record, or the
		// crash point hid the barrier's end: the store decides.
		mr.pendingID, mr.pendingSnap = open, snap
		mr.restart(mr.rng.IntN(2) == 0)
		mr.fullCheck()
		return false
	}
	if state, ran := mr.ckLog.state(open); ran && mr.e.Status().OpenID > open {
		mr.putBarriers++
		mr.m.checkpointed(snap, state == recovery.Committed)
		mr.m.resolveAnon(mr.t, mr.e)
	}
	if got := mr.e.Stream(stream); got.ActiveVersion != got.Config.Version {
		mr.fail("put %s: answered with version %d in force, newest %d", stream, got.ActiveVersion, got.Config.Version)
	}
	return true
}

func (mr *modelRun) note(format string, args ...any) {
	mr.trace = append(mr.trace, fmt.Sprintf(format, args...))
	if len(mr.trace) > 40 {
		mr.trace = mr.trace[1:]
	}
}

func (mr *modelRun) fail(format string, args ...any) {
	mr.t.Helper()
	mr.t.Fatalf("seed %d: "+format+"\nlast steps:\n  %s", append(append([]any{mr.seed}, args...), strings.Join(mr.trace, "\n  "))...)
}

// restart stops the engine as a crash would, optionally power-cuts,
// starts again and checks I5. A checkpoint whose result the crash hid
// (pending) is decided by the store: prepared means it committed.
// killStart starts an engine and kills it after a random operation of
// its start (taking the lease, recovery, reserving ids) or soon after,
// as a crash-looping process is killed: the next start must take over
// whatever it left, at once.
func (mr *modelRun) killStart() {
	n := int64(mr.rng.IntN(80))
	c := faultfs.CrashAfter(n, sweepKinds)
	mr.sw.Set(c)
	if k, err := Open(mr.r.config(mr.r.fs)); err == nil {
		ctx, cancel := untilCtx(c.Crashed)
		_ = k.WaitReady(ctx)
		cancel()
		_ = k.Close()
	}
	mr.sw.Set(nil)
	mr.st.startsKilled++
	mr.note("start killed after op %d (crashed %v)", n, c.Crashed())
}

// settleKeyKick runs the checkpoint a key refused at the cap asked for.
// The cap's early checkpoint runs in the background: the open checkpoint
// of the first refusal ends by it or by this one, whichever comes first,
// holding what the producers sent so far.
func (mr *modelRun) settleKeyKick() {
	mr.km.kicked = false
	open, snap, armed := mr.km.kickedOpen, mr.m.snapshot(), mr.crash
	res, err := checkpointUntil(mr.e, func() bool { return armed != nil && armed.Crashed() })
	state, ran := mr.ckLog.state(open)
	mr.note("checkpoint after the key cap's kick: %d %s (asked: %d %s %v)", open, state, res.ID, res.State, err)
	if err == nil && ran {
		mr.m.checkpointed(snap, state == recovery.Committed)
		mr.m.resolveAnon(mr.t, mr.e)
		return
	}
	mr.pendingID, mr.pendingSnap = open, snap
	mr.restart(mr.rng.IntN(2) == 0)
}

func (mr *modelRun) restart(powerCut bool) {
	mr.r.stop()
	mr.sw.Set(nil)
	mr.storeFull.set(nil) // the start reserves ids: the disk has room again
	mr.crash = nil
	if mr.cutFS != nil {
		// The store as the cut left it goes back in place: the same
		// file (a power cut keeps the inode the lease memo names).
		data, err := os.ReadFile(mr.cutStore)
		if err == nil {
			err = os.WriteFile(mr.r.storePath, data, 0o600)
		}
		if err != nil {
			mr.fail("restore the store of a power cut: %v", err)
		}
		_ = os.Remove(mr.cutStore)
		mr.base, mr.cutFS = mr.cutFS, nil
		mr.inj = mr.newInjectFS(mr.base)
		mr.st.powerCuts++
	} else if powerCut {
		mr.base = mr.base.CrashClone()
		mr.inj = mr.newInjectFS(mr.base)
		mr.st.powerCuts++
	} else {
		mr.st.crashes++
	}
	mr.r.fs = mr.inj
	if mr.rng.IntN(3) == 0 {
		mr.killStart()
	}
	mr.e = mr.r.start(nil)
	mr.note("restart power=%v", powerCut)
	// I8: no id a file in the destination names is handed out again,
	// whatever the start found (a store kept, lost, a start killed).
	if top, open := highestPartID(mr.t, mr.base, mr.fail), mr.e.Status().OpenID; open <= top {
		mr.fail("I8: restart opened checkpoint %d, but a part file in the destination names %d", open, top)
	}
	if mr.pendingID != 0 {
		c, err := mr.e.store.Get(mr.pendingID)
		if err == nil && c.State != recovery.Aborted {
			for k, v := range mr.pendingSnap {
				mr.m.prepared[k] = v
			}
		}
		mr.pendingID, mr.pendingSnap = 0, nil
	}
	for k := range mr.m.next {
		mr.m.next[k] = mr.m.prepared[k]
	}
	for p := range mr.epochUnsure {
		ps, ok := mr.e.Producer(wireID(p))
		if !ok || (ps.Epoch != mr.m.epoch[p] && ps.Epoch != mr.m.epoch[p]+1) {
			mr.fail("init of %s cut by a crash: epoch %d (known %v), want %d or %d", p, ps.Epoch, ok, mr.m.epoch[p], mr.m.epoch[p]+1)
		}
		mr.m.epoch[p] = ps.Epoch
		delete(mr.epochUnsure, p)
	}
	mr.m.resolveAnon(mr.t, mr.e)
	checkI5(mr.t, mr.m, mr.e, mr.fail)
}

func (mr *modelRun) fullCheck() {
	mr.m.resolveAnon(mr.t, mr.e)
	mr.r.fs = mr.base // the checker reads the disk without faults
	rep := mr.r.checker0(mr.m.expect())
	mr.r.fs = mr.inj
	if err := rep.Err(); err != nil {
		mr.fail("step check: %v", err)
	}
	// I8: a committed checkpoint holds only batches answered with its
	// id, and every batch answered with an id that committed.
	for b, ids := range rep.Checkpoints {
		for _, id := range ids {
			if !mr.ans[id][b] {
				mr.fail("I8: checkpoint %d holds batch %s, which no answer named with that id", id, b)
			}
		}
	}
	open := mr.e.Status().OpenID
	for id, bs := range mr.ans {
		if id >= open || mr.verified[id] {
			continue // a committed id, once checked, cannot change (I7 holds its files)
		}
		c, err := mr.e.store.Get(id)
		if err != nil || c.State != recovery.Committed {
			continue
		}
		mr.st.idsChecked++
		for b := range bs {
			if !slices.Contains(rep.Checkpoints[b], id) {
				mr.fail("I8: checkpoint %d committed without batch %s, answered with it", id, b)
			}
		}
		mr.verified[id] = true
	}
	// I8: an id a set-aside file names was handed out (its commit was
	// cut): never again, for other data.
	if q := quarantinedIDs(rep); len(q) > 0 {
		for b, ids := range rep.Checkpoints {
			for _, id := range ids {
				if q[id] {
					mr.fail("I8: checkpoint %d holds batch %s, but a file set aside (a cut commit's) names %d too: the id was handed out twice", id, b, id)
				}
			}
		}
	}
	// I9: what a duplicate reported committed is in the destination.
	for _, d := range mr.committedDups {
		if rep.Batches[d.b] != 1 {
			mr.fail("I9: duplicate %s answered committed in %d, but the batch appears %d times", d.b, d.id, rep.Batches[d.b])
		}
	}
	mr.committedDups = mr.committedDups[:0]
	mr.checkTable()
	mr.st.checks++
}

// forget forgets one producer (DELETE) or, with expire, every idle
// one (the expiry), once everything is committed; each comes back at
// once as a new incarnation of the same id (its records name it
// p~N, sent as p: wireID), inits from seq 0 and commits a batch.
// loseStore loses the state store (or restores copyOf, an older copy of
// it), mid-commit of the last checkpoint when cut, and starts again.
//
// An older copy restored after a crash mid-commit is found when the
// destination has a manifest newer than the copy or the lease has ids
// reserved beyond it (docs/nodes.md); a copy taken in the same reserved
// block just before the crash looks current, and the half-committed
// checkpoint's files stay where they are (eosink verify reports them, in
// no manifest). That limit is documented, not modelled: a copy comes
// without a cut (seed 1796313107610262918 drew one; a cut after a copy
// has its own test, TestHalfCommittedCheckpointQuarantinedOlderCopy).
func (mr *modelRun) loseStore(copyOf []byte, cut bool) {
	lease := mr.leaseAfterLoss()
	cut = cut && copyOf == nil
	mr.storeReplaced = true
	confs := mr.streamConfs()
	var killFirst func()
	if mr.noLease {
		// Ids come from the destination only: at times the cut commit
		// is more than a block of ids beyond the newest manifest (the
		// ids between left no trace), and the first start is killed
		// partway (its rebuild, its set-aside, its reservation).
		if cut && mr.rng.IntN(2) == 0 {
			mr.idleSpell()
		}
		if mr.rng.IntN(3) == 0 {
			mr.st.lossStartsKilled++
			killFirst = mr.killStart
		}
	}
	mr.e, cut = loseStore(mr.t, mr.r, mr.e, mr.m, copyOf, mr.zombies, cut, lease, killFirst, mr.fail)
	if cut {
		mr.st.lostMidCommit++
	}
	mr.ckLog.forgetFrom(mr.e.Status().FirstID)
	if mr.noLease {
		mr.restoreStreams(confs)
	}
	mr.km.storeLost()
	mr.world.touchesLost(mr.m)
	mr.note("state store lost (older copy: %v, mid-commit: %v)", copyOf != nil, cut)
	// Then, at times, a forgotten-producers document planted before the
	// rebuilt store's first commit: the restart must not rebuild again
	// (believing every document) but check it as a store that kept up.
	plant := mr.rng.IntN(4) == 0
	// Ids answered but never committed left no trace in the
	// destination, so a lost store can't keep them out of
	// reach (recovery step 5 continues after the manifests;
	// see DESIGN). Only committed ids stay checked for I8.
	mr.r.fs = mr.base
	rep := mr.r.checker0(mr.m.expect())
	mr.r.fs = mr.inj
	inDest := map[uint64]bool{}
	for _, ids := range rep.Checkpoints {
		for _, id := range ids {
			inDest[id] = true
		}
	}
	// The files a start set aside name their ids too: a cut commit's
	// (I8; a rebuild continues beyond them, without a lease as well).
	for id := range quarantinedIDs(rep) {
		inDest[id] = true
	}
	for id := range mr.ans {
		if !inDest[id] {
			delete(mr.ans, id)
		}
	}
	mr.fullCheck()
	if plant {
		mr.plantManifest(5)
	}
}

// idleSpell commits what is accepted, then lets more than a block of ids
// pass without data (empty checkpoints, restarts that skip the rest of a
// reserved block), and writes one batch for the next commit.
func (mr *modelRun) idleSpell() {
	p := mr.lastInited()
	if p == "" {
		return
	}
	commitAll(mr.t, mr.e, mr.m, "before an idle spell", mr.fail)
	from := mr.e.Status().OpenID
	for mr.e.Status().OpenID < from+mr.e.cfg.idBlock+2 {
		if mr.rng.IntN(4) == 0 {
			mr.restart(false)
		} else {
			commitAll(mr.t, mr.e, mr.m, "an idle spell", mr.fail)
		}
	}
	if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, mr.streams[mr.rng.IntN(3)], 1); err != nil {
		mr.note("idle spell: write: %v", err)
		return
	}
	mr.st.idleSpells++
	mr.note("idle spell: ids %d to %d passed without data", from, mr.e.Status().OpenID-1)
}

// streamConfs returns the configurations PUT for the run's streams.
func (mr *modelRun) streamConfs() map[string]streamconf.Config {
	confs := map[string]streamconf.Config{}
	for _, s := range []string{"s0", "s1", "s2", tableStream} {
		if c := mr.e.Stream(s).Config; c.Version > 0 {
			confs[s] = c
		}
	}
	return confs
}

// restoreStreams PUTs confs again after a store loss without a lease, as
// its operator must: only the lease's destination keeps stream
// configurations (streamstore.go). Nothing was written since the start.
func (mr *modelRun) restoreStreams(confs map[string]streamconf.Config) {
	for _, s := range slices.Sorted(maps.Keys(confs)) {
		c := confs[s]
		c.Version = 0
		if _, err := mr.e.PutStream(mr.t.Context(), s, c); err != nil {
			mr.fail("put %s again after the store loss (no lease): %v", s, err)
		}
	}
	mr.note("stream configurations put again: %v", slices.Sorted(maps.Keys(confs)))
}

// quarantinedIDs are the checkpoint ids the names of the files a start
// set aside show.
func quarantinedIDs(rep *invariant.Report) map[uint64]bool {
	ids := map[uint64]bool{}
	for _, q := range rep.Quarantined {
		if _, id, _, _, ok := layout.ParsePartName(path.Base(q)); ok {
			ids[id] = true
		}
	}
	return ids
}

func (mr *modelRun) forget(expire bool) {
	commitAll(mr.t, mr.e, mr.m, "forget producers", mr.fail)
	var gone []int
	if expire {
		mr.st.expiries++
		if _, err := mr.e.ExpireProducers(time.Now().AddDate(100, 0, 0)); err != nil {
			mr.fail("expire producers: %v", err)
		}
		for i, p := range mr.producers {
			if _, inited := mr.m.epoch[p]; !inited {
				continue
			}
			if _, ok := mr.e.Producer(wireID(p)); !ok {
				gone = append(gone, i)
			}
		}
	} else {
		i := mr.rng.IntN(len(mr.producers))
		if _, inited := mr.m.epoch[mr.producers[i]]; !inited {
			return
		}
		if err := mr.e.DeleteProducer(mr.t.Context(), wireID(mr.producers[i])); err != nil {
			mr.fail("delete producer %s: %v", mr.producers[i], err)
		}
		gone = append(gone, i)
	}
	mr.reincarnate(gone, fmt.Sprintf("expiry %v", expire))
	switch mr.rng.IntN(4) {
	case 0, 1:
		commitAll(mr.t, mr.e, mr.m, "forget producers", mr.fail)
	case 2:
		// The store is lost before the new incarnations commit: the
		// destination shows only the forgotten ones' ranges.
		mr.st.lostAfterForget++
		mr.loseStore(nil, true)
	default:
		// Their batches ride in a later checkpoint.
	}
}

// reincarnate takes the producers at gone (indexes into producers) as
// forgotten by the engine: each comes back at once as a new incarnation
// of the same id (its records name it p~N, sent as p: wireID), inits
// from seq 0 and sends a batch.
func (mr *modelRun) reincarnate(gone []int, why string) {
	for _, i := range gone {
		p := mr.producers[i]
		mr.st.forgotten++
		for k, next := range mr.m.prepared {
			if k[0] != p {
				continue
			}
			for q := range next {
				mr.m.must[invariant.BatchID{Producer: k[0], Stream: k[1], Seq: q}] = true
			}
			delete(mr.m.prepared, k)
		}
		// Its accepted state too, also of streams with nothing prepared
		// (sent after the last prepare, set back to 0 by a restart): a
		// checkpoint's snapshot would carry them into prepared under the
		// forgotten incarnation's name.
		for k := range mr.m.next {
			if k[0] == p {
				delete(mr.m.next, k)
			}
		}
		mr.zombies[p] = mr.m.epoch[p]
		delete(mr.m.epoch, p)
		mr.incarnation++
		np := fmt.Sprintf("%s~%d", wireID(p), mr.incarnation)
		mr.producers[i] = np
		ps, err := mr.e.InitProducer(mr.t.Context(), wireID(np))
		if err != nil {
			mr.fail("init %s after it was forgotten: %v", np, err)
		}
		for s, ss := range ps.Streams {
			if ss.NextSeq != 0 {
				mr.fail("init %s after it was forgotten: stream %s next_seq %d, want 0", np, s, ss.NextSeq)
			}
		}
		mr.m.epoch[np] = ps.Epoch
		if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, np, mr.streams[mr.rng.IntN(len(mr.streams))], 1); err != nil {
			mr.fail("write %s after it was forgotten: %v", np, err)
		}
		mr.world.touched(np, mr.clock)
		mr.note("forgot %s (%s): now %s at epoch %d", p, why, np, ps.Epoch)
	}
}

// plantManifest plants a manifest under this node's prefix as another
// writer of the bucket could: ranges for a live producer naming files
// that are not there (beyond the ids the node reserved, or within
// them), a document that is not JSON (within them or beyond), or a name
// with an id near 2^64; a forgotten-producers document naming a live
// producer (forgetDoc), alone or beside a manifest within the ids that
// the rebuild would not believe. Beyond the reserved ids, the commit feed must
// give the node's next commit to a follower (feedPastPlanted; before the
// restart, which starts beyond every manifest it sees).
// After a crash the node must start, and believe none of it (I5,
// checked by restart); then the planted document is removed. kind
// chooses the plant (-1: at random).
func (mr *modelRun) plantManifest(kind int) {
	open := mr.e.Status().OpenID
	victim := mr.producers[mr.rng.IntN(len(mr.producers))]
	var id uint64
	var body []byte
	if kind < 0 {
		kind = mr.rng.IntN(6)
	}
	switch kind {
	case 0, 1:
		id = open + 1 // reserved, never committed: the store looks behind
		if kind == 0 {
			id = open + 1<<20 // beyond every id the node reserved
		}
		mf := &layout.Manifest{Checkpoint: id, Node: rigNode, CommittedAt: mr.clock,
			Files: []layout.ManifestFile{{Path: "s0/" + layout.PartName(rigNode, id, 0, "ndjson"), Stream: "s0", Bytes: 10, Records: 1,
				Producers: map[string]committer.SeqRanges{wireID(victim): {{0, 1 << 20}}}}}}
		var err error
		if body, err = layout.EncodeManifest(mf); err != nil {
			mr.fail("plant manifest: %v", err)
		}
	case 2:
		id, body = open+1, []byte("<html>not a manifest</html>")
	case 3:
		id, body = open+1<<20, []byte("<html>not a manifest</html>") // beyond every id reserved
	case 4:
		id, body = 1<<64-10, []byte("{}")
	}
	type plant struct {
		name string
		body []byte
	}
	plants := []plant{{rigDest + "/" + layout.ManifestName(rigNode, id), body}}
	// A forgotten-producers document forgetting a live producer at its
	// epoch: alone (kind 5), or beside a manifest within the reserved ids
	// that the rebuild would not believe (kinds 1, 2: its file absent,
	// not JSON), which must not make a start whose store kept up rebuild
	// and so believe the document (h8-adv: the start judged "behind" by
	// the names alone, 1a24847, 190a9ad).
	if kind == 5 || (kind == 1 || kind == 2) && mr.rng.IntN(2) == 0 {
		name, body, ok := mr.forgetDoc(victim, open)
		if !ok {
			return
		}
		if kind == 5 {
			plants = plants[:0]
		}
		plants = append(plants, plant{name, body})
	}
	// Durably, as a writer of the bucket does, and removed durably: the
	// node's own publishes sync the directory while it is there.
	for _, pl := range plants {
		err := mr.base.MkdirAll(filepath.Dir(pl.name), 0o755) // none yet before the first commit
		if err == nil {
			err = durable.ReplaceFile(mr.base, pl.name+".plant", pl.name, pl.body)
		}
		if err != nil {
			mr.fail("plant manifest: %v", err)
		}
		mr.st.planted++
		mr.note("planted %s (kind %d, ranges of %s)", pl.name, kind, victim)
	}
	if (kind == 0 || kind == 3 || kind == 4) && !mr.noLease { // beyond the ids the node reserved
		// Without a lease nothing bounds the feed (docs/feed.md).
		mr.feedPastPlanted(plants[0].name)
	}
	mr.restart(false)
	for _, pl := range plants {
		if err := mr.base.Remove(pl.name); err != nil {
			mr.fail("remove planted manifest: %v", err)
		}
		if err := durable.SyncDir(mr.base, filepath.Dir(pl.name)); err != nil {
			mr.fail("remove planted manifest: %v", err)
		}
	}
}

// newestManifest returns the highest checkpoint id of this node's
// manifests in the destination, 0 if none.
func (mr *modelRun) newestManifest() uint64 {
	var top uint64
	entries, _ := afero.ReadDir(mr.base, rigDest+"/_manifests/"+rigNode)
	for _, en := range entries {
		if _, id, ok := layout.ParseManifestName("_manifests/" + rigNode + "/" + en.Name()); ok && id < 1<<40 {
			top = max(top, id)
		}
	}
	return top
}

// lastInited is the last of the run's producers the model holds inited
// (an epoch), or "" if none is.
func (mr *modelRun) lastInited() string {
	var p string
	for _, q := range mr.producers {
		if _, inited := mr.m.epoch[q]; inited {
			p = q
		}
	}
	return p
}

// feedPastPlanted follows the commit feed (what GET /v1/commits serves)
// to its end while a document planted at a manifest name beyond every id
// the node reserved is there, then commits a batch: the feed must give
// that commit to a follower of the cursor. The planted id is no commit
// of the node's; a cursor moved past it would skip every later one (the
// downstream half of exactly-once; I13).
func (mr *modelRun) feedPastPlanted(planted string) {
	p := mr.lastInited()
	if p == "" {
		return
	}
	c, err := catalog.New(catalog.Config{Files: feedLeaseView{local.New(mr.base, rigDest, rigStaging), mr.clock}, Now: func() time.Time { return mr.clock }})
	if err != nil {
		mr.fail("feed: %v", err)
	}
	follow := func(cur catalog.Cursor) ([]uint64, catalog.Cursor) {
		var ids []uint64
		for range 10000 {
			page, err := c.Commits(mr.t.Context(), catalog.FeedQuery{After: cur, Limit: 100})
			if err != nil {
				mr.fail("feed after %v: %v", cur.Nodes(), err)
			}
			for _, fc := range page.Commits {
				if fc.Node == rigNode {
					ids = append(ids, fc.Checkpoint)
				}
			}
			cur = page.Next
			if !page.More && len(page.Commits) == 0 {
				return ids, cur
			}
		}
		mr.fail("feed: does not end")
		return nil, cur
	}
	_, cur := follow(catalog.Cursor{})
	// The checkpoint the batch commits in, which is not always the one
	// commitAll ends with: an earlier fault may have failed an encoder
	// while its batches were accepted, so the open checkpoint aborts at
	// its pre-commit, the batch with it, and the one that commits next
	// is empty (no manifest). Its client sends it again.
	k := [2]string{p, mr.streams[mr.rng.IntN(len(mr.streams))]}
	var id uint64
	for try := 0; id == 0; try++ {
		seq := mr.m.next[k]
		res, err := mr.m.writeResult(mr.t, mr.e, p, k[1], 1)
		if err != nil {
			mr.fail("write after a planted manifest: %v", err)
		}
		mr.ans.add(res.Checkpoint, invariant.BatchID{Producer: p, Stream: k[1], Seq: seq})
		commitAll(mr.t, mr.e, mr.m, "after a planted manifest", mr.fail)
		switch {
		case mr.m.prepared[k] > seq:
			id = res.Checkpoint
		case try == 2:
			mr.fail("write after a planted manifest: %v/%d not committed after %d tries", k, seq, try+1)
		}
	}
	got, next := follow(cur)
	mr.st.feedsFollowed++
	if !slices.Contains(got, id) {
		mr.fail("feed: with %s planted, checkpoint %d committed after a follower's cursor %v is not given after it (given %v, cursor now %v)", planted, id, cur.Nodes(), got, next.Nodes())
	}
}

// feedLeaseView is the destination as the feed reads it, with the node
// lease's times those of a lease that checks (layout.CheckLease): renewed
// at the model's clock, expiring --lease-timeout's most later. The
// model's lease never expires (a timeout of 2^20 hours, beyond the most
// a reader believes), so the feed would take no bound from it (the ids it
// reserved, I8), which is what keeps a planted id from moving a cursor.
type feedLeaseView struct {
	*local.Local
	now time.Time
}

func (v feedLeaseView) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	rc, en, err := v.Local.Open(ctx, name)
	if err != nil || name != layout.LeaseName(rigNode) {
		return rc, en, err
	}
	defer rc.Close()
	l, err := layout.ReadLease(rc)
	if err != nil {
		return nil, en, err
	}
	l.RenewedAt, l.ExpiresAt = v.now, v.now.Add(layout.MaxLeaseTimeout)
	data, err := json.Marshal(l)
	if err != nil {
		return nil, en, err
	}
	return nopCloser{bytes.NewReader(data)}, en, nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

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
	// A staging file's, not the lease document's that a reservation of
	// ids writes before the barrier (also *.inprogress).
	if op.Kind != faultfs.OpSync || !strings.HasSuffix(op.Path, ".inprogress") || !strings.HasPrefix(filepath.Base(op.Path), "part-") {
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

// forgetDoc is a forgotten-producers document forgetting live producer
// victim at its epoch, after the checkpoint open minus one (as the node
// names its own), or the newest committed one or the one before: the
// lowest a start whose store kept up applies, where a seal's checkpoint
// past the newest commit believed it unsealed. A store with no commit
// since its start (new, or rebuilt after a loss): the newest manifest,
// which a rebuild went through, or the one before. The next start must
// not believe it (layout.ForgottenSeal), or the producer's committed
// batches are written again after its next init (I2), and its client
// sees unknown_producer. ok is false when victim is not live.
func (mr *modelRun) forgetDoc(victim string, open uint64) (name string, body []byte, ok bool) {
	epoch, live := mr.m.epoch[victim]
	if !live {
		return "", nil, false
	}
	id := open - 1
	switch last := mr.e.Status().LastDone; {
	case mr.rng.IntN(2) == 0 && last > 0:
		id = last - uint64(mr.rng.IntN(2))
	case last == 0:
		if top := mr.newestManifest(); top > 1 && mr.rng.IntN(3) > 0 {
			id = top - uint64(mr.rng.IntN(2))
		}
	}
	name = rigDest + "/" + layout.ForgottenName(rigNode, id, 7)
	body = fmt.Appendf(nil, `{"node":%q,"after_checkpoint":%d,"producers":{%q:%d}}`, rigNode, id, wireID(victim), epoch)
	return name, body, true
}
