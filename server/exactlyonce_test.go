package server

import (
	"fmt"
	"maps"
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

	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// stallInjector holds the first sync of a staging file (a pre-commit) once
// armed, until the test lets it go; from then on, with crash set, every
// operation fails as if the process had died.
type stallInjector struct {
	armed   atomic.Bool
	crashed atomic.Bool
	once    sync.Once
	stalled chan struct{} // closed when the sync is held
	release chan struct{} // closed by the test
}

func newStall() *stallInjector {
	return &stallInjector{stalled: make(chan struct{}), release: make(chan struct{})}
}

func (s *stallInjector) MaybeError(op faultfs.Op) error {
	if s.crashed.Load() {
		return faultfs.ErrCrashed
	}
	if !s.armed.Load() || op.Kind != faultfs.OpSync || !strings.HasSuffix(op.Path, ".inprogress") {
		return nil
	}
	held := false
	s.once.Do(func() { held = true })
	if !held {
		return nil
	}
	close(s.stalled)
	<-s.release
	if s.crashed.Load() {
		return faultfs.ErrCrashed
	}
	return nil
}

// powerCutDuringPreCommit stalls checkpoint id's pre-commit, lets write run
// while it is held (its batches go to id+1), then cuts the power: the next
// engine starts from the disk's durable state and a copy of the state store
// taken at that instant (the store syncs every transaction).
func powerCutDuringPreCommit(t *testing.T, r *rig, base *faultfs.CrashFS, stall *stallInjector, write func()) {
	t.Helper()
	stall.armed.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = checkpointIn(r.e)
	}()
	select {
	case <-stall.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("pre-commit never reached its sync")
	}
	write()
	clone := base.CrashClone()
	data := r.storeCopy()
	copyPath := filepath.Join(filepath.Dir(r.storePath), "state-at-cut.db")
	if err := os.WriteFile(copyPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	stall.crashed.Store(true)
	close(stall.release)
	r.stop()
	<-done
	r.fs, r.storePath = clone, copyPath
	r.tweak = nil
}

// TestCheckpointIDsNeverReused (I8): the process dies while checkpoint N
// pre-commits and N+1 already answers writes. No id any answer named
// before the crash may name other data after the restart.
func TestCheckpointIDsNeverReused(t *testing.T) {
	for _, before := range []int{0, 1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("after %d checkpoints", before), func(t *testing.T) {
			base := faultfs.NewCrashFS()
			stall := newStall()
			r := newRig(t, faultfs.NewInjectFS(base, stall))
			r.tweak = func(c *Config) { c.idBlock = 4 } // cross block boundaries
			e := r.start(nil)
			answered := map[uint64]map[invariant.BatchID]bool{}
			var seen []uint64
			anon := int64(0)
			write := func(e *Engine) {
				t.Helper()
				anon++
				res, err := send(e, nil, "s", anon, 2)
				if err != nil {
					t.Fatalf("write %d: %v", anon, err)
				}
				if answered[res.Checkpoint] == nil {
					answered[res.Checkpoint] = map[invariant.BatchID]bool{}
				}
				answered[res.Checkpoint][invariant.BatchID{Stream: "s", Seq: anon}] = true
				seen = append(seen, res.Checkpoint)
			}
			for range before {
				write(e)
				r.commit()
			}
			write(e) // into N, which stalls in pre-commit
			powerCutDuringPreCommit(t, r, base, stall, func() { write(e) })
			n := seen[len(seen)-1]
			if seen[len(seen)-2] != n-1 {
				t.Fatalf("writes during the pre-commit of %d answered %d", seen[len(seen)-2], n)
			}
			beforeCrash := map[uint64][]invariant.BatchID{}
			for id, bs := range answered {
				for b := range bs {
					beforeCrash[id] = append(beforeCrash[id], b)
				}
			}
			e = r.start(nil)
			if open := e.Status().OpenID; open <= n {
				t.Errorf("restart opens checkpoint %d; %d was handed out before the crash", open, n)
			}
			for range 3 {
				write(e)
				r.commit()
			}
			rep := r.check(invariant.Expect{})
			for b, ids := range rep.Checkpoints {
				for _, id := range ids {
					if !answered[id][b] {
						t.Errorf("I8: checkpoint %d holds batch %s, which was answered with another id", id, b)
					}
				}
			}
			// An id answered before the crash that reads "committed" now
			// must hold what it was answered for.
			for id, bs := range beforeCrash {
				c, err := e.store.Get(id)
				if err != nil || c.State != recovery.Committed {
					continue
				}
				for _, b := range bs {
					if !slices.Contains(rep.Checkpoints[b], id) {
						t.Errorf("I8: checkpoint %d is committed, but batch %s answered with it before the crash is not in it", id, b)
					}
				}
			}
		})
	}
}

// TestManifestRangesExact: a clock that steps back across an hour and
// again forward puts one producer's batches of one stream into two files
// of one checkpoint, interleaved. Each file's manifest ranges name exactly
// its own sequence numbers, so which file holds seq n has one answer.
func TestManifestRangesExact(t *testing.T) {
	r := newRig(t, nil)
	clock := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r.tweak = func(c *Config) { c.Now = func() time.Time { return clock } }
	e := r.start(nil)
	p := r.initProducer("p")
	must := map[invariant.BatchID]bool{}
	for seq, step := range []time.Duration{0, -time.Minute, time.Minute, -time.Minute, 0, time.Minute} {
		clock = clock.Add(step)
		mustSend(t, e, p, "s", int64(seq), 2)
		must[invariant.BatchID{Producer: "p", Stream: "s", Seq: int64(seq)}] = true
	}
	res := r.checkpoint()
	if len(res.Files) != 2 {
		t.Fatalf("want two files (two hours), got %+v", res.Files)
	}
	got := map[string]string{}
	for _, f := range res.Files {
		got[path.Base(path.Dir(f.Final))] = fmt.Sprint(f.Producers["p"])
	}
	if want := map[string]string{"hour=10": "[[0 0] [2 2] [5 5]]", "hour=09": "[[1 1] [3 4]]"}; !maps.Equal(got, want) {
		t.Errorf("ranges %v, want %v", got, want)
	}
	r.check(invariant.Expect{Must: must, Exact: true}) // the checker reads the manifest
}

// failStaging fails every operation of one kind on a staging file while
// on.
type failStaging struct {
	kind faultfs.OpKind
	on   atomic.Bool
}

func (f *failStaging) MaybeError(op faultfs.Op) error {
	if f.on.Load() && op.Kind == f.kind && strings.HasSuffix(op.Path, ".inprogress") {
		return syscall.EIO
	}
	return nil
}

// startInjected starts an engine over a memory file system whose
// operations inj may fail, with producer "p" initialised.
func startInjected(t *testing.T, inj faultfs.Injector) (*rig, *Engine, *Producer) {
	t.Helper()
	r := newRig(t, faultfs.NewInjectFS(afero.NewMemMapFs(), inj))
	e := r.start(nil)
	return r, e, r.initProducer("p")
}

// failPreCommits fails the close of every staging file while on (after
// its fsync passed): the pre-commit fails and the checkpoint aborts. (A
// failed fsync would stop the engine too: TestStagingSyncFailureStops.)
func failPreCommits() *failStaging { return &failStaging{kind: faultfs.OpClose} }

// failSyncs fails the sync of every staging file while on.
func failSyncs() *failStaging { return &failStaging{kind: faultfs.OpSync} }

// A staging file's fsync fails at pre-commit: the checkpoint aborts (its
// files deleted, the abort recorded, a wait=commit client answered
// "aborted" so it resends), and the engine stops, as after a failed fsync
// anywhere (I14): the disk may have dropped pages it said it wrote, also
// of files a later checkpoint would count on.
func TestStagingSyncFailureStops(t *testing.T) {
	faults := failSyncs()
	r, e, p := startInjected(t, faults)
	mustSend(t, e, p, "s", 0, 1)
	faults.on.Store(true)
	res, err := e.Checkpoint(t.Context())
	if res.State != recovery.Aborted {
		t.Fatalf("checkpoint with a staging file's fsync failed: %+v, %v; want aborted", res, err)
	}
	if !waitFailed(t, e, 10*time.Second) {
		t.Fatal("a staging file's fsync failed at pre-commit and the engine goes on (I14: a failed fsync stops it everywhere)")
	}
	faults.on.Store(false)
	r.stop()
	e = r.start(nil)
	st, _ := e.Producer("p")
	if got := st.Streams["s"].NextSeq; got != 0 {
		t.Fatalf("after the restart p's next seq is %d; want 0 (its batch aborted)", got)
	}
	mustSend(t, e, p, "s", 0, 1)
	r.commit()
}

// TestInitIsABarrier (I12): a producer restarts while batches of its
// earlier incarnation are accepted but not prepared. The next_seq init
// returns stays valid whatever follows — a crash, or an abort — and the
// new incarnation goes on from it. Init's own barrier may abort, too.
func TestInitIsABarrier(t *testing.T) {
	for _, tc := range []struct {
		name         string
		barrierFails bool   // the checkpoint init runs aborts
		then         string // "crash" or "abort"
	}{
		{"crash", false, "crash"},
		{"abort", false, "abort"},
		{"barrier aborts, then crash", true, "crash"},
		{"barrier aborts, then abort", true, "abort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := failPreCommits()
			r := newRig(t, faultfs.NewInjectFS(afero.NewMemMapFs(), faults))
			e := r.start(nil)
			old := r.initState("p")
			for seq := range int64(3) { // the first incarnation: accepted, never prepared
				mustSend(t, e, &Producer{ID: "p", Epoch: old.Epoch}, "s", seq, 2)
			}
			faults.on.Store(tc.barrierFails)
			ps, err := e.InitProducer(t.Context(), "p") // the second incarnation
			faults.on.Store(false)
			if err != nil {
				t.Fatal(err)
			}
			next, committed := ps.Streams["s"].NextSeq, ps.Streams["s"].CommittedSeq
			want := int64(3)
			if tc.barrierFails {
				want = 0
			}
			if next != want || committed != want-1 {
				t.Errorf("init: next_seq %d committed_seq %d, want %d and %d", next, committed, want, want-1)
			}
			p := &Producer{ID: "p", Epoch: ps.Epoch}
			if _, err := send(e, p, "s", next, 2); err != nil {
				t.Fatalf("send next_seq %d: %v", next, err)
			}
			switch tc.then {
			case "crash":
				r.stop()
				e = r.start(nil)
			case "abort":
				faults.on.Store(true)
				res := r.checkpoint()
				faults.on.Store(false)
				if res.State != recovery.Aborted {
					t.Fatalf("checkpoint did not abort: %+v", res)
				}
			}
			// The new incarnation resends what it holds beyond committed_seq.
			for seq := next; seq < next+2; seq++ {
				res, err := send(e, p, "s", seq, 2)
				if err != nil {
					exp, _ := isSeqErr(err)
					t.Fatalf("I12: after init answered next_seq %d and a %s, seq %d: %v (expected_seq %d)", next, tc.then, seq, err, exp)
				}
				if res.Duplicate {
					t.Fatalf("seq %d: a duplicate of a lost batch: %+v", seq, res)
				}
			}
			r.commit()
			must := map[invariant.BatchID]bool{}
			for seq := range next + 2 {
				must[invariant.BatchID{Producer: "p", Stream: "s", Seq: seq}] = true
			}
			r.check(invariant.Expect{Must: must, Exact: true})
		})
	}
}

// TestCommittedDuplicateNamesItsCheckpoint (8a): a duplicate of a
// committed batch names the committed checkpoint that committed its
// producer's newest batch on the stream (here the one holding it), never
// a newer checkpoint of other data, nor, after a restart, an aborted or
// reserved id.
func TestCommittedDuplicateNamesItsCheckpoint(t *testing.T) {
	faults := failPreCommits()
	r, e, p := startInjected(t, faults)
	mustSend(t, e, p, "s", 0, 2)
	holder := r.checkpoint()
	b := invariant.BatchID{Producer: "p", Stream: "s", Seq: 0}
	check := func(when string) {
		t.Helper()
		res, err := send(e, p, "s", 0, 2)
		if err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("%s: duplicate %+v %v", when, res, err)
		}
		c, err := e.store.Get(res.Checkpoint)
		if err != nil || c.State != recovery.Committed {
			t.Fatalf("%s: duplicate names checkpoint %d: %+v %v", when, res.Checkpoint, c, err)
		}
		rep := r.check(invariant.Expect{Must: map[invariant.BatchID]bool{b: true}})
		if !slices.Contains(rep.Checkpoints[b], res.Checkpoint) {
			t.Fatalf("%s: duplicate names checkpoint %d; the batch is in %v", when, res.Checkpoint, rep.Checkpoints[b])
		}
	}
	if _, err := send(e, nil, "other", 1, 1); err != nil { // a newer checkpoint of other data
		t.Fatal(err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.ID == holder.ID {
		t.Fatalf("checkpoint %+v", res)
	}
	check("after a newer checkpoint")
	mustSend(t, e, nil, "other", 2, 1)
	faults.on.Store(true)
	if res := r.checkpoint(); res.State != recovery.Aborted {
		t.Fatalf("checkpoint did not abort: %+v", res)
	}
	faults.on.Store(false)
	check("after an abort")
	r.stop()
	e = r.start(nil)
	check("after a restart")
}

// TestStatusAfterRestart: after a restart the status names the newest
// committed checkpoint as the last one done (not the reserved high-water
// mark, which no checkpoint has), and the first id of this start, below
// which ids the store lacks were never used or ended before it.
func TestStatusAfterRestart(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	mustSend(t, e, nil, "s", 1, 1)
	done := r.checkpoint()
	r.stop()
	e = r.start(nil)
	st := e.Status()
	if st.LastDone != done.ID {
		t.Errorf("last done %d after a restart, want %d, the newest committed", st.LastDone, done.ID)
	}
	if st.FirstID != st.OpenID || st.FirstID <= done.ID+1 {
		t.Errorf("first id of this start %d, open %d, last committed %d", st.FirstID, st.OpenID, done.ID)
	}
}
