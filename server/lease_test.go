package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// flakyLeaser fails lease writes while down is set, as a destination out
// of reach would.
type flakyLeaser struct {
	committer.Leaser
	down atomic.Bool
}

func (f *flakyLeaser) WriteLease(ctx context.Context, name string, data []byte, version string) (string, error) {
	if f.down.Load() {
		return "", fmt.Errorf("write lease %s: %w: unreachable", name, committer.ErrTransient)
	}
	return f.Leaser.WriteLease(ctx, name, data, version)
}

// leaseRig returns a rig whose engines hold a lease in the rig's
// destination, with timeout, and a store of their own per call.
func leaseRig(t *testing.T, fs afero.Fs, timeout time.Duration, leaser func(committer.Leaser) committer.Leaser) *rig {
	t.Helper()
	r := newRig(t, fs)
	r.tweak = func(c *Config) {
		var l committer.Leaser = local.New(c.FS, rigDest, rigStaging)
		if leaser != nil {
			l = leaser(l)
		}
		c.Leaser, c.LeaseTimeout, c.Listen = l, timeout, "127.0.0.1:1"
	}
	return r
}

func readLease(t *testing.T, fs afero.Fs) Lease {
	t.Helper()
	data, err := afero.ReadFile(fs, rigDest+"/"+layout.LeaseName(rigNode))
	if err != nil {
		t.Fatal(err)
	}
	var l Lease
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// openSecond opens another engine with the rig's node id and its own
// state store, and waits until it is ready or has failed.
func openSecond(t *testing.T, r *rig) (*Engine, error) {
	t.Helper()
	return openWithStore(t, r, filepath.Join(fastTempDir(t), "state.db"))
}

// openWithStore opens another engine with the rig's node id over the
// state store at storePath, and waits until it is ready or has failed.
func openWithStore(t *testing.T, r *rig, storePath string) (*Engine, error) {
	t.Helper()
	cfg := r.config(r.fs)
	cfg.StorePath = storePath
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return e, e.WaitReady(ctx)
}

// A second live node with the same id refuses to start, naming the
// holder; once the first is gone (a crash: no release), the second takes
// over after the lease timeout, not before.
func TestLeaseSecondNodeRefusedThenTakesOver(t *testing.T) {
	const timeout = 600 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	e := r.start(nil)
	held := readLease(t, r.fs)
	if held.Incarnation == "" || held.Listen != "127.0.0.1:1" || !held.ExpiresAt.After(held.RenewedAt) {
		t.Fatalf("lease document: %+v", held)
	}
	_, err := openSecond(t, r)
	if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), held.Incarnation) {
		t.Fatalf("second node: %v, want ErrLeaseHeld naming incarnation %s", err, held.Incarnation)
	}
	// Renewals keep it: after several timeouts the first still holds it.
	time.Sleep(2 * timeout)
	if l := readLease(t, r.fs); l.Incarnation != held.Incarnation || !l.RenewedAt.After(held.RenewedAt) {
		t.Fatalf("lease after 2 timeouts: %+v, want renewed by %s", l, held.Incarnation)
	}
	mustSend(t, e, nil, "s", 1, 1)
	r.commit()
	r.stop() // a crash: the lease stays until it expires
	crashed := time.Now()
	e2, err := openSecond(t, r)
	for errors.Is(err, ErrLeaseHeld) {
		_ = e2.Close()
		time.Sleep(50 * time.Millisecond)
		e2, err = openSecond(t, r)
	}
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(crashed); waited < timeout/2 {
		t.Fatalf("took over %s after the crash, before the lease could expire (timeout %s)", waited, timeout)
	}
	if l := readLease(t, r.fs); l.Incarnation == held.Incarnation {
		t.Fatalf("lease still names the crashed incarnation: %+v", l)
	}
	mustSend(t, e2, nil, "s", 2, 1)
	if res := checkpointWithin(t, e2, 10*time.Second); res.State != recovery.Committed {
		t.Fatalf("checkpoint of the new holder: %+v", res)
	}
	// A clean shutdown releases: a third node starts at once.
	if err := e2.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := openSecond(t, r); err != nil {
		t.Fatalf("after a clean shutdown: %v", err)
	}
}

// A node whose renewals fail stops committing once its lease is older
// than the timeout minus the margin — nothing of its checkpoint reaches
// the destination — and commits again once a renewal succeeds.
func TestLeaseStaleStopsCommits(t *testing.T) {
	const timeout = 400 * time.Millisecond
	var fl *flakyLeaser
	r := leaseRig(t, nil, timeout, func(l committer.Leaser) committer.Leaser {
		fl = &flakyLeaser{Leaser: l}
		return fl
	})
	e := r.start(nil)
	fl.down.Store(true)
	time.Sleep(timeout) // past timeout minus margin since the last renewal
	mustSend(t, e, nil, "s", 1, 1)
	res := r.checkpoint()
	if res.State != recovery.Aborted || !strings.Contains(res.Error, ErrLeaseStale.Error()) {
		t.Fatalf("checkpoint with a stale lease: %+v, want aborted for %v", res, ErrLeaseStale)
	}
	r.check(invariant.Expect{Exact: true}) // nothing in the destination
	fl.down.Store(false)
	waitRenewed(t, e, "after the destination came back")
	mustSend(t, e, nil, "s", 2, 1)
	r.commit()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 2}: true}, Exact: true})
}

// A node whose lease another process took is fenced: the engine stops
// and refuses writes, and commits nothing more.
func TestLeaseLostStopsEngine(t *testing.T) {
	const timeout = 300 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	e := r.start(nil)
	mustSend(t, e, nil, "s", 1, 1)
	// Another process takes it (as one would after an expiry it saw).
	thief := readLease(t, r.fs)
	thief.Incarnation, thief.ExpiresAt = "thief", time.Now().Add(time.Hour)
	data, _ := json.Marshal(thief)
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.LeaseName(rigNode), data, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Failed():
	case <-time.After(5 * time.Second):
		t.Fatalf("engine still running after its lease was taken")
	}
	if err := e.Err(); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "thief") {
		t.Fatalf("engine error: %v, want ErrLeaseLost naming the new holder", err)
	}
	if _, err := send(e, nil, "s", 2, 1); err == nil {
		t.Fatalf("a fenced engine accepted a write")
	}
	r.check(invariant.Expect{Exact: true})
}

// I8 across a lost state store: ids handed out by checkpoints that left
// no manifest (empty ones) are beyond the highest manifest plus a block;
// the lease's reserved mark still puts the rebuilt node beyond them.
// Fails before the lease carried the mark: the new node opened at
// manifest + block + 2.
func TestLeaseReservedSurvivesStoreLoss(t *testing.T) {
	r, named := leaseRigNamingIDs(t)
	e := r.e
	if l := readLease(t, r.fs); l.Reserved < named {
		t.Fatalf("lease reserves up to %d, but id %d was handed out", l.Reserved, named)
	}
	r.stopLosingStore()
	time.Sleep(250 * time.Millisecond) // the crashed holder's lease expires
	e = r.start(nil)
	if open := e.Status().OpenID; open <= named {
		t.Fatalf("open checkpoint %d after the store was lost; id %d was handed out before (I8)", open, named)
	}
}

// leaseRigNamingIDs starts a lease rig (timeout 200ms) reserving ids 4 at
// a time, commits one batch, then runs 20 empty checkpoints: they name
// ids that no manifest records. It returns the rig and the highest id
// named, the open checkpoint's included.
func leaseRigNamingIDs(t *testing.T) (*rig, uint64) {
	t.Helper()
	r := leaseRig(t, nil, 200*time.Millisecond, nil)
	tweak := r.tweak
	r.tweak = func(c *Config) { tweak(c); c.idBlock = 4 }
	e := r.start(nil)
	mustSend(t, e, nil, "s", 1, 1)
	r.commit()
	var named uint64
	for range 20 {
		named = r.checkpoint().ID // empty: no manifest, but the id was named
	}
	return r, max(named, e.Status().OpenID)
}

// A restart on the same data dir (the state store's file lock is ours, so
// the former holder is dead) takes the lease over at once; another data
// dir must still wait for the timeout.
func TestLeaseRestartSameDataDirAtOnce(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	r.start(nil)
	first := readLease(t, r.fs)
	r.stop() // a crash: no release
	begin := time.Now()
	r.start(nil)
	if l := readLease(t, r.fs); l.Incarnation == first.Incarnation {
		t.Fatalf("restart kept the crashed incarnation's lease: %+v", l)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("restart on the same data dir took %s", d)
	}
	// A node on another data dir cannot tell the holder from a crashed
	// one until it renews (every 20 minutes here): it waits.
	waitRecovering(t, openWaiting(t, r), "waiting for node lease")
}

// killedStart opens an engine whose leaser is wrap(the rig's), waits
// until reached (the moment the test kills it: the start has done what
// says) and closes it there, as a kill would leave things. The rig's
// leaser is its own again afterwards.
func killedStart(t *testing.T, r *rig, wrap func(committer.Leaser) committer.Leaser, reached <-chan struct{}, what string) {
	t.Helper()
	plain := r.tweak
	r.tweak = func(c *Config) {
		plain(c)
		c.Leaser = wrap(c.Leaser)
	}
	defer func() { r.tweak = plain }()
	e, err := Open(r.config(r.fs))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("the start never %s", what)
	}
	_ = e.Close() // the kill: nothing after that point ran
}

// landedLeaser lets a lease write land, then behaves as a process that
// never saw the answer: the first `lose` writes answer a transient error
// (a timeout after the PUT reached the store), or, with kill set, every
// write waits until its engine stops (a SIGKILL right after the write).
type landedLeaser struct {
	committer.Leaser
	lose   atomic.Int32
	kill   bool
	landed chan struct{}
}

func (l *landedLeaser) WriteLease(ctx context.Context, name string, data []byte, version string) (string, error) {
	v, err := l.Leaser.WriteLease(ctx, name, data, version)
	if err != nil {
		return v, err
	}
	if l.kill {
		close(l.landed)
		<-ctx.Done()
		return "", ctx.Err()
	}
	if l.lose.Add(-1) >= 0 {
		return "", fmt.Errorf("write lease %s: %w: answer lost", name, committer.ErrTransient)
	}
	return v, nil
}

// A create-only lease write that landed but whose answer was lost is
// retried; the retry finds this very incarnation in the lease and takes it
// (it was refused as "held by another process" until the lease expired).
func TestLeaseWriteAnswerLost(t *testing.T) {
	var w *landedLeaser
	r := leaseRig(t, nil, time.Hour, func(l committer.Leaser) committer.Leaser {
		w = &landedLeaser{Leaser: l}
		w.lose.Store(1)
		return w
	})
	r.start(nil)
	if got := w.lose.Load(); got >= 0 {
		t.Fatalf("the lost answer was not exercised (lose %d)", got)
	}
	if l := readLease(t, r.fs); l.Incarnation != r.e.lease.doc.Incarnation {
		t.Fatalf("lease holds %s, the engine is %s", l.Incarnation, r.e.lease.doc.Incarnation)
	}
	mustSend(t, r.e, nil, "s", 1, 1)
	r.commit()
}

// A process killed right after its lease write landed, before anything
// else ran, leaves a lease naming an incarnation that nothing recorded
// after the fact. The next start on the same data dir must know it for its
// own and take over at once, not refuse for --lease-timeout (seen in
// TestCrashLoopLocal: "node lease held by another process" on a restart).
func TestLeaseRestartAfterKillMidTake(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	r.start(nil)
	first := readLease(t, r.fs)
	r.stop()

	w := &landedLeaser{kill: true, landed: make(chan struct{})}
	killedStart(t, r, func(l committer.Leaser) committer.Leaser { w.Leaser = l; return w }, w.landed, "wrote its lease")
	second := readLease(t, r.fs)
	if second.Incarnation == first.Incarnation {
		t.Fatalf("the killed start did not replace the lease: %+v", second)
	}

	r.start(nil)
	if l := readLease(t, r.fs); l.Incarnation == second.Incarnation || l.Incarnation == first.Incarnation {
		t.Fatalf("restart kept an old incarnation's lease: %+v", l)
	}
	// A node on another data dir cannot tell the holder from a crashed
	// one until it renews (every 20 minutes here): it waits.
	waitRecovering(t, openWaiting(t, r), "waiting for node lease")
}

// waitRenewed waits up to 5s for e's lease fence to pass again (a renewal
// went through); when says after what, for the failure.
func waitRenewed(t *testing.T, e *Engine, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.life.leaseCheck() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("lease not renewed %s: %v", when, e.life.leaseCheck())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// staleLockHour makes the local leaser take a lease lock for stale only
// after an hour: a test that passes broke the lock knowingly, not by
// waiting.
func staleLockHour(l committer.Leaser) committer.Leaser {
	l.(*local.Local).StaleLock = time.Hour
	return l
}

// A process killed inside a lease compare-and-swap leaves the local lock
// file (<lease>.lock) behind. Every start swaps the lease it finds, so a
// crash loop hits this often (by hand: 1 start in 40 killed 0-40 ms in).
// The next start on the same data dir knows the lock's owner is dead and
// breaks it at once; before, it waited for the lock's stale age (10 s; an
// hour here, so the old code cannot pass by waiting).
func TestLeaseLockOfKilledProcessBrokenAtOnce(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, staleLockHour)
	r.start(nil)
	killed := readLease(t, r.fs).Incarnation
	r.stop()
	lock := rigDest + "/" + layout.LeaseName(rigNode) + ".lock"
	// What the killed process's lock says: its owner, the incarnation.
	if err := afero.WriteFile(r.fs, lock, []byte(killed), 0o644); err != nil {
		t.Fatal(err)
	}
	r.start(nil)
	if l := readLease(t, r.fs); l.Incarnation == killed {
		t.Fatalf("restart kept the killed incarnation's lease: %+v", l)
	}
	if ok, _ := afero.Exists(r.fs, lock); ok {
		t.Fatal("the lock file is still there after the take-over")
	}
	r.stop()

	// A lock naming a writer nobody here knows for dead (another data
	// dir's live process) is never broken early.
	if err := afero.WriteFile(r.fs, lock, []byte("someone-else"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Open(r.config(r.fs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err == nil {
		t.Fatal("a start broke a lock held by an unknown writer")
	}
	_ = e.Close()
	if err := r.fs.Remove(lock); err != nil {
		t.Fatal(err)
	}
	r.start(nil)
}

// stuckLeaser never writes: a lease write waits until its engine stops,
// as a process killed just before the write.
type stuckLeaser struct {
	committer.Leaser
	called chan struct{}
}

func (s *stuckLeaser) WriteLease(ctx context.Context, _ string, _ []byte, _ string) (string, error) {
	select {
	case s.called <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return "", ctx.Err()
}

// A holds the lease; B is killed holding the lease lock (the lease still
// names A); C is killed after it recorded itself, before it reached the
// lock. D must still know B for dead and break its lock at once: the memo
// keeps every former incarnation, up to memoMax (C once dropped B, not
// being the lease's holder).
func TestLeaseLockOfKilledProcessSurvivesAnotherKilledStart(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, staleLockHour)
	r.start(nil)
	a := readLease(t, r.fs).Incarnation
	r.stop()
	memo := filepath.Join(filepath.Dir(r.storePath), "lease-incarnation")
	lock := rigDest + "/" + layout.LeaseName(rigNode) + ".lock"
	// B, as the new code leaves it: itself and A in the memo, its lock.
	if err := os.WriteFile(memo, []byte("store "+storeIdentity(r.storePath)+"\nb-killed\n"+a+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, lock, []byte("b-killed"), 0o644); err != nil {
		t.Fatal(err)
	}
	// C: killed right before its lease write.
	stuck := &stuckLeaser{called: make(chan struct{}, 1)}
	killedStart(t, r, func(l committer.Leaser) committer.Leaser { stuck.Leaser = l; return stuck }, stuck.called, "came to its lease write")
	// D.
	r.start(nil)
	if ok, _ := afero.Exists(r.fs, lock); ok {
		t.Fatal("B's lock is still there")
	}
	data, err := os.ReadFile(memo)
	if err != nil {
		t.Fatal(err)
	}
	// The holder first; the former ones kept (bounded by memoMax): locks
	// of theirs other than the lease's may remain
	// (TestOrphanedTableLockOfFormerIncarnation).
	got := strings.Fields(string(data))
	if len(got) < 3 || !slices.Equal(got[:3], []string{"store", storeIdentity(r.storePath), r.e.lease.doc.Incarnation}) || !slices.Contains(got, "b-killed") || len(got) > 2+memoMax {
		t.Fatalf("memo after a swap through the lock: %v, want the holder %s first, then the former ones (b-killed among them)", got, r.e.lease.doc.Incarnation)
	}
}
