package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Tests of a doomed open checkpoint aborted alone while the checkpoint
// before it is prepared and committing (doomed.go, abortDoomedOpen): its
// crash and restart, the resends of its keyed and producer batches, and
// the coordinator cutting it at the same moment.

// stuckCommit is an engine whose checkpoint n is prepared and stuck
// committing (a rename that fails while stuck is set, retried: I4).
type stuckCommit struct {
	base  *faultfs.CrashFS // under the injector: a power cut is its CrashClone
	r     *rig
	e     *Engine
	ends  *ckEnds
	n     uint64
	stuck atomic.Bool
	fired atomic.Int64
	// failRemove fails the removal of staging files (EIO).
	failRemove atomic.Bool
	done       chan error // n's checkpoint call
}

// ckEnds counts each checkpoint's ends as the hook reports them: one
// each, whoever aborts it.
type ckEnds struct {
	mu  sync.Mutex
	end map[uint64][]recovery.State
}

func (c *ckEnds) hook(r CheckpointResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.end[r.ID] = append(c.end[r.ID], r.State)
}

func (c *ckEnds) state(id uint64) (recovery.State, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.end[id]
	if len(s) == 0 {
		return "", 0
	}
	return s[len(s)-1], len(s)
}

// newStuckCommit starts the engine, runs fill (writes into checkpoint
// n), and cuts n with its commit stuck; opts change the configuration.
func newStuckCommit(t *testing.T, fill func(e *Engine), opts ...func(*Config)) *stuckCommit {
	sc := &stuckCommit{ends: &ckEnds{end: map[uint64][]recovery.State{}}, base: faultfs.NewCrashFS()}
	fsys := faultfs.NewInjectFS(sc.base, faultfs.InjectorFunc(func(op faultfs.Op) error {
		if sc.stuck.Load() && op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging) {
			sc.fired.Add(1)
			return syscall.EIO
		}
		if sc.failRemove.Load() && op.Kind == faultfs.OpRemove && strings.HasPrefix(op.Path, rigStaging) {
			return syscall.EIO
		}
		return nil
	}))
	sc.r = newRig(t, fsys)
	sc.r.tweak = func(c *Config) {
		c.Hooks.Checkpoint = sc.ends.hook
		for _, o := range opts {
			o(c)
		}
	}
	sc.e = sc.r.start(nil)
	sc.r.commit()
	fill(sc.e)
	sc.n = sc.e.Status().OpenID
	sc.stuck.Store(true)
	sc.done = commitInBackground(sc.e, sc.n)
	t.Cleanup(func() { sc.stuck.Store(false) })
	// Status says so once the failed try is reported, after the rename.
	waitFor(t, "checkpoint n's commit stuck", func() bool { return sc.e.Status().StuckCheckpoint == sc.n })
	return sc
}

// aloneKeyed is anonymous batch seq of stream k, sent with an idempotency key.
func aloneKeyed(seq int64) Write {
	data := invariant.Batch(invariant.BatchID{Stream: "k", Seq: seq}, 1)
	return Write{Stream: "k", Ext: "ndjson", Data: data, Records: 1, Key: NewIdempotencyKey(fmt.Sprint("key-", seq), data)}
}

func aloneAnon(seq int64) Write {
	return Write{Stream: "c", Ext: "ndjson", Data: invariant.Batch(invariant.BatchID{Stream: "c", Seq: seq}, 1), Records: 1}
}

func mustWrite(t *testing.T, e *Engine, w Write, want uint64, dup bool) WriteResult {
	t.Helper()
	res, err := e.Write(w)
	if err != nil || res.Checkpoint != want || res.Duplicate != dup {
		t.Fatalf("write %s: %+v %v, want checkpoint %d duplicate %v", w.Data, res, err, want, dup)
	}
	return res
}

// doomAlone fills n+1 with producer p's batch 1 on b, keyed batch 101
// and anonymous batch 102, waits on n+1 (wait=commit), dooms n+1 and
// checks its abort alone: the waiter told "aborted", n+1 recorded
// aborted, n+2 open and empty, the counts given back, and what n holds
// still riding in n.
func (sc *stuckCommit) doomAlone(t *testing.T, p *Producer) {
	t.Helper()
	e, n := sc.e, sc.n
	heldBefore := e.Status().Held
	mustSend(t, e, p, "b", 1, 1)
	mustWrite(t, e, aloneKeyed(101), n+1, false)
	mustWrite(t, e, aloneAnon(102), n+1, false)
	waited := make(chan error, 1)
	go func() { waited <- e.Wait(context.Background(), n+1) }()
	e.ing.doomFile(n+1, "b", fmt.Errorf("step: %w", ErrDiskFull))
	waitFor(t, "the doomed checkpoint's abort", func() bool { s, _ := sc.ends.state(n + 1); return s != "" })
	if s, k := sc.ends.state(n + 1); s != recovery.Aborted || k != 1 {
		t.Fatalf("checkpoint %d: %q, ended %d times, want aborted once", n+1, s, k)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("wait=commit of %d: %v, want aborted", n+1, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("wait=commit of the doomed checkpoint: no answer")
	}
	if ck, err := e.store.Get(n + 1); err != nil || ck.State != recovery.Aborted {
		t.Fatalf("store's checkpoint %d: %+v %v, want aborted", n+1, ck, err)
	}
	st := e.Status()
	if st.OpenID != n+2 || st.OpenBytes != 0 || st.OpenRecords != 0 || st.OpenFiles != 0 || st.Held != heldBefore || st.StuckCheckpoint != n {
		t.Fatalf("status after the abort alone: %+v, want n+2=%d open and empty, held %d, %d stuck", st, n+2, heldBefore, n)
	}
	if s, _ := sc.ends.state(n); s != "" {
		t.Fatalf("checkpoint %d ended (%q) while its commit is stuck", n, s)
	}
	// n's batches still ride in n: retries are duplicates, not committed.
	if res, err := send(e, p, "b", 0, 1); err != nil || !res.Duplicate || res.Committed || res.Checkpoint != n {
		t.Fatalf("retry of p's batch 0 (in %d): %+v %v", n, res, err)
	}
	if res, err := e.Write(aloneKeyed(100)); err != nil || !res.Duplicate || res.Committed || res.Checkpoint != n {
		t.Fatalf("retry of keyed batch 100 (in %d): %+v %v", n, res, err)
	}
	// p goes on from n's barrier: its batch 2 is a gap.
	if _, err := send(e, p, "b", 2, 1); err == nil {
		t.Fatal("p's batch 2 accepted after its batch 1 was aborted")
	} else if exp, ok := isSeqErr(err); !ok || exp != 1 {
		t.Fatalf("p's batch 2 after the abort: %v, want expected_seq 1", err)
	}
}

// fillN writes p's batch 0 on b and keyed batch 100 into checkpoint n.
func fillN(t *testing.T, p **Producer) func(e *Engine) {
	return func(e *Engine) {
		st, err := e.InitProducer(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		*p = &Producer{ID: "p", Epoch: st.Epoch}
		mustSend(t, e, *p, "b", 0, 1)
		mustWrite(t, e, aloneKeyed(100), e.Status().OpenID, false)
	}
}

// TestDoomAloneResendsCommitOnce: behind n's stuck commit, n+1 is
// doomed and aborts alone; its keyed and producer batches are resent
// into n+2 (accepted as new: the key forgotten, p back to n's barrier),
// their retries are duplicates; a checkpoint asked for meanwhile waits
// for n; once n commits, n+2 commits, and each batch is in the
// destination once.
func TestDoomAloneResendsCommitOnce(t *testing.T) {
	var p *Producer
	sc := newStuckCommit(t, fillN(t, &p))
	e, n := sc.e, sc.n
	sc.doomAlone(t, p)
	mustSend(t, e, p, "b", 1, 1)
	mustWrite(t, e, aloneKeyed(101), n+2, false)
	mustWrite(t, e, aloneAnon(102), n+2, false)
	if res, err := send(e, p, "b", 1, 1); err != nil || !res.Duplicate || res.Checkpoint != n+2 {
		t.Fatalf("retry of the resent batch 1: %+v %v", res, err)
	}
	mustWrite(t, e, aloneKeyed(101), n+2, true)
	asked := commitInBackground(e, n+2) // queued behind n
	time.Sleep(20 * time.Millisecond)
	sc.stuck.Store(false)
	if err := <-sc.done; err != nil {
		t.Fatalf("checkpoint %d: %v", n, err)
	}
	if err := <-asked; err != nil {
		t.Fatalf("checkpoint asked for behind the stuck one: %v", err)
	}
	if s, k := sc.ends.state(n + 2); s != recovery.Committed || k != 1 {
		t.Fatalf("checkpoint %d: %q (%d ends), want committed", n+2, s, k)
	}
	if s, k := sc.ends.state(n + 1); s != recovery.Aborted || k != 1 {
		t.Fatalf("checkpoint %d: %q (%d ends), want aborted once", n+1, s, k)
	}
	for seq := range int64(2) {
		if res, err := send(e, p, "b", seq, 1); err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("retry of p's batch %d: %+v %v, want a committed duplicate", seq, res, err)
		}
	}
	for _, seq := range []int64{100, 101} {
		if res, err := e.Write(aloneKeyed(seq)); err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("retry of keyed batch %d: %+v %v, want a committed duplicate", seq, res, err)
		}
	}
	sc.r.check(doomAloneExpect())
}

func doomAloneExpect() invariant.Expect {
	must := map[invariant.BatchID]bool{}
	for _, b := range []invariant.BatchID{{Producer: "p", Stream: "b", Seq: 0}, {Producer: "p", Stream: "b", Seq: 1},
		{Stream: "k", Seq: 100}, {Stream: "k", Seq: 101}, {Stream: "c", Seq: 102}} {
		must[b] = true
	}
	return invariant.Expect{Must: must, Exact: true}
}

// resendsCommit: after a restart, p (at epoch) resends b's batch 1 and
// the keyed and anonymous batches of n+1 are written again, each into
// open, the open checkpoint; they commit once with the batches of
// doomAloneExpect.
func (sc *stuckCommit) resendsCommit(t *testing.T, e *Engine, epoch int64, open uint64) {
	t.Helper()
	mustSend(t, e, &Producer{ID: "p", Epoch: epoch}, "b", 1, 1)
	mustWrite(t, e, aloneKeyed(101), open, false)
	mustWrite(t, e, aloneAnon(102), open, false)
	sc.r.commit()
	sc.r.check(doomAloneExpect())
}

// TestDoomAloneCrash: the engine is closed as a crash would (or the
// power is cut) right after n+1's abort alone, with n still stuck and n+2
// holding resends, or with the removal of n+1's staging files failed
// (left to recovery); the restart commits n, n+1 stays aborted, n+2's
// batches are gone (never prepared), no staging file is left; producer p
// is back at n's state (init says next 1, committed 0), the key of n+1's
// batch is forgotten, n's is committed; the resends commit once.
func TestDoomAloneCrash(t *testing.T) {
	for _, tc := range []struct{ resent, powerCut, removeFails bool }{
		{false, false, false}, {true, false, false}, {true, true, false}, {false, false, true}, {false, true, true},
	} {
		t.Run(fmt.Sprintf("resent=%v/powercut=%v/removefails=%v", tc.resent, tc.powerCut, tc.removeFails), func(t *testing.T) {
			var p *Producer
			sc := newStuckCommit(t, fillN(t, &p))
			e, n := sc.e, sc.n
			sc.failRemove.Store(tc.removeFails)
			sc.doomAlone(t, p)
			if tc.removeFails {
				if names, _ := stagingNames(sc.r.fs, rigStaging); !slices.ContainsFunc(names, func(s string) bool { return strings.Contains(s, fmt.Sprintf("-%020d-", n+1)) }) {
					t.Fatalf("staging files of %d gone although their removal failed: %v", n+1, names)
				}
			}
			if tc.resent {
				mustSend(t, e, p, "b", 1, 1)
				mustWrite(t, e, aloneKeyed(101), n+2, false)
			}
			var cut *faultfs.CrashFS
			if tc.powerCut {
				cut = sc.base.CrashClone()
			}
			sc.r.stop() // a crash: n still stuck
			if err := <-sc.done; err == nil {
				t.Fatalf("checkpoint %d ended before the crash", n)
			}
			sc.stuck.Store(false)
			sc.failRemove.Store(false)
			if cut != nil {
				sc.r.fs = cut
			}
			e = sc.r.start(nil)
			if names, err := stagingNames(sc.r.fs, rigStaging); err != nil || len(names) != 0 {
				t.Fatalf("staging files after the restart: %v %v, want none", names, err)
			}
			for id, want := range map[uint64]recovery.State{n: recovery.Committed, n + 1: recovery.Aborted} {
				if ck, err := e.store.Get(id); err != nil || ck.State != want {
					t.Fatalf("after the restart, checkpoint %d: %+v %v, want %s", id, ck, err, want)
				}
			}
			if ck, err := e.store.Get(n + 2); err == nil {
				t.Fatalf("after the restart, checkpoint %d (never prepared) recorded: %+v", n+2, ck)
			}
			if open := e.Status().OpenID; open <= n+2 {
				t.Fatalf("after the restart the open checkpoint is %d: ids up to %d were answered (I8)", open, n+2)
			}
			st := sc.r.initState("p")
			if ss := st.Streams["b"]; ss.NextSeq != 1 || ss.CommittedSeq != 0 {
				t.Fatalf("p after the restart: %+v, want next 1, committed 0", st)
			}
			open := e.Status().OpenID
			if res, err := e.Write(aloneKeyed(100)); err != nil || !res.Duplicate || !res.Committed {
				t.Fatalf("retry of keyed batch 100 (committed in %d): %+v %v", n, res, err)
			}
			sc.resendsCommit(t, e, st.Epoch, open)
		})
	}
}

// TestDoomAloneRacesCut: n's commit fails a few times and then passes
// while n+1 is doomed at a random moment and writers go on, so the
// coordinator's barrier (free again, cutting the doomed n+1 and aborting
// it with n+2) races the abort alone. Either way each checkpoint ends
// once, every batch answered into a committed checkpoint is in the
// destination once, none of an aborted one, and writes go on after.
func TestDoomAloneRacesCut(t *testing.T) {
	alone, cut := 0, 0
	for i := range 30 {
		seed := uint64(i)
		rng := rand.New(rand.NewPCG(seed, 7))
		var stuckLeft atomic.Int64
		fsys := faultfs.NewInjectFS(faultfs.NewCrashFS(), faultfs.InjectorFunc(func(op faultfs.Op) error {
			if op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging) && stuckLeft.Add(-1) >= 0 {
				return syscall.EIO
			}
			return nil
		}))
		r := newRig(t, fsys)
		r.foreign = true
		ends := &ckEnds{end: map[uint64][]recovery.State{}}
		r.tweak = func(c *Config) { c.Hooks.Checkpoint = ends.hook }
		e := r.start(nil)
		r.commit()
		var mu sync.Mutex
		in := map[int64]uint64{} // anonymous batch -> the checkpoint it was answered into
		var next atomic.Int64
		write := func() {
			seq := next.Add(1)
			res, err := e.Write(aloneAnon(seq))
			if err == nil {
				mu.Lock()
				in[seq] = res.Checkpoint
				mu.Unlock()
			}
		}
		write()
		n := e.Status().OpenID
		stuckLeft.Store(int64(rng.IntN(4)))
		done := commitInBackground(e, n)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range uint64(2) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, w)) // its own: a Rand is not safe for concurrent use
				for {
					select {
					case <-stop:
						return
					default:
					}
					write()
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		// Doom the open checkpoint once n is cut and it holds a file (a
		// doom comes from one), as an inline encoding step does: under
		// the ingest lock.
		var doomed uint64
		waitFor(t, "a file in the checkpoint after n", func() bool {
			e.ing.mu.Lock()
			defer e.ing.mu.Unlock()
			if e.ing.openID == n || len(e.ing.openTxns) == 0 {
				return false
			}
			doomed = e.ing.openID
			e.ing.doomFile(doomed, "c", fmt.Errorf("step: %w", ErrDiskFull))
			return true
		})
		waitFor(t, "the doomed checkpoint's end", func() bool { s, _ := ends.state(doomed); return s != "" })
		time.Sleep(2 * time.Millisecond)
		close(stop)
		wg.Wait()
		if err := <-done; err != nil {
			t.Fatalf("seed %d: checkpoint %d: %v", seed, n, err)
		}
		// Writes go on after the doom.
		res, err := e.Write(aloneAnon(next.Add(1)))
		if err != nil {
			t.Fatalf("seed %d: write after the doom: %v", seed, err)
		}
		mu.Lock()
		in[next.Load()] = res.Checkpoint
		mu.Unlock()
		r.commit()
		if s, k := ends.state(doomed); s != recovery.Aborted || k != 1 {
			t.Fatalf("seed %d: doomed checkpoint %d: %q, %d ends, want aborted once", seed, doomed, s, k)
		}
		if s, _ := ends.state(doomed + 1); s == recovery.Aborted {
			cut++
		} else {
			alone++
		}
		exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, MustNot: map[invariant.BatchID]bool{}, Exact: true}
		ends.mu.Lock()
		for id, s := range ends.end {
			if len(s) != 1 {
				t.Errorf("seed %d: checkpoint %d ended %d times: %v", seed, id, len(s), s)
			}
		}
		ends.mu.Unlock()
		for seq, id := range in {
			b := invariant.BatchID{Stream: "c", Seq: seq}
			switch s, _ := ends.state(id); s {
			case recovery.Committed:
				exp.Must[b] = true
			case recovery.Aborted:
				exp.MustNot[b] = true
			default:
				t.Fatalf("seed %d: batch %d answered into checkpoint %d, which did not end", seed, seq, id)
			}
		}
		r.foreign = false
		r.check(exp)
		r.stop()
	}
	t.Logf("doomed checkpoint aborted alone %d times, cut by the coordinator %d times", alone, cut)
}

// TestDoomAloneStoreFaults: the state store fails the record of the
// abort alone. Refused for space (nothing written): the abort goes on
// unrecorded (not prepared is aborted to recovery), writes go on into
// n+2. A failed write (fdatasync): the engine stops (I14). Either way the
// restart commits n, n+1 is not recorded otherwise than aborted, no id
// answered is handed out again (I8), and the resends commit once.
func TestDoomAloneStoreFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase recovery.Phase
		err   error
		stops bool
	}{
		{"ENOSPC", recovery.BeforeCommit, errPageENOSPC, false},
		{"EIO-after-commit", recovery.AfterCommit, syscall.EIO, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *Producer
			f := &storeFaults{}
			sc := newStuckCommit(t, fillN(t, &p), func(c *Config) { c.StoreOptions.WriteFault = f.hook })
			e, n := sc.e, sc.n
			f.set(failOp("abort", tc.phase, tc.err, 1))
			mustSend(t, e, p, "b", 1, 1)
			e.ing.doomFile(n+1, "b", fmt.Errorf("step: %w", ErrDiskFull))
			waitFor(t, "the doomed checkpoint's abort", func() bool { s, _ := sc.ends.state(n + 1); return s != "" })
			if s, k := sc.ends.state(n + 1); s != recovery.Aborted || k != 1 {
				t.Fatalf("checkpoint %d: %q (%d ends), want aborted once", n+1, s, k)
			}
			if len(f.fired) != 1 {
				t.Fatalf("store faults fired: %v, want the abort's", f.fired)
			}
			if tc.stops {
				if !waitFailed(t, e, 5*time.Second) || !errors.Is(e.Err(), recovery.ErrWriteFailed) {
					t.Fatalf("engine after a failed record of the abort: %v, want stopped (ErrWriteFailed)", e.Err())
				}
				sc.r.closeStopped(e)
			} else {
				if ck, err := e.store.Get(n + 1); err == nil {
					t.Fatalf("checkpoint %d recorded (%+v) although the store refused it", n+1, ck)
				}
				mustSend(t, e, p, "b", 1, 1) // accepted into n+2
				if e.Err() != nil {
					t.Fatalf("engine stopped after a record refused for space: %v", e.Err())
				}
				sc.r.stop()
			}
			<-sc.done
			sc.stuck.Store(false)
			f.set(nil)
			e = sc.r.start(nil)
			if ck, err := e.store.Get(n); err != nil || ck.State != recovery.Committed {
				t.Fatalf("after the restart, checkpoint %d: %+v %v, want committed", n, ck, err)
			}
			if ck, err := e.store.Get(n + 1); err == nil && ck.State != recovery.Aborted {
				t.Fatalf("after the restart, checkpoint %d: %+v, want aborted or unrecorded", n+1, ck)
			}
			open := e.Status().OpenID
			if open <= n+2 {
				t.Fatalf("after the restart the open checkpoint is %d: ids up to %d were answered (I8)", open, n+2)
			}
			sc.resendsCommit(t, e, sc.r.initState("p").Epoch, open)
		})
	}
}

// TestDoomAloneLinger: with group commit on, a wait=commit client of
// doomed n+1 asked for it to start soon; it aborts alone (the client
// told "aborted"), and the linger asks for nothing more; a client then
// waiting on n+2 gets its commit once n's passes, with no checkpoint
// asked for.
func TestDoomAloneLinger(t *testing.T) {
	var p *Producer
	sc := newStuckCommit(t, fillN(t, &p), func(c *Config) { c.CommitLinger = 2 * time.Millisecond })
	e, n := sc.e, sc.n
	sc.doomAlone(t, p) // its waiter of n+1 asked for the linger
	mustSend(t, e, p, "b", 1, 1)
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		waited <- e.Wait(ctx, n+2)
	}()
	time.Sleep(20 * time.Millisecond)
	sc.stuck.Store(false)
	if err := <-sc.done; err != nil {
		t.Fatalf("checkpoint %d: %v", n, err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("wait=commit of %d behind the stuck commit: %v", n+2, err)
	}
	// The hook runs after the waiters are released (pipeline.finished).
	waitFor(t, "n+2's end reported", func() bool { s, _ := sc.ends.state(n + 2); return s != "" })
	if s, k := sc.ends.state(n + 2); s != recovery.Committed || k != 1 {
		t.Fatalf("checkpoint %d: %q (%d ends), want committed once", n+2, s, k)
	}
	mustWrite(t, e, aloneKeyed(101), n+3, false)
	mustWrite(t, e, aloneAnon(102), n+3, false)
	sc.r.commit()
	sc.r.check(doomAloneExpect())
}

// stagingNames lists the staging directory of fs.
func stagingNames(fs afero.Fs, dir string) ([]string, error) {
	fis, err := afero.ReadDir(fs, dir)
	names := make([]string, 0, len(fis))
	for _, fi := range fis {
		names = append(names, fi.Name())
	}
	return names, err
}
