package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// Adversarial tests of the abort alone (doomed.go) that the tests in
// doomalone_test.go do not cover: dooms in a row behind one stuck commit
// with ids reserved a few at a time (the abort alone must stop where the
// reservation ends, I8), and the admin calls that are barriers or need a
// producer idle (init, DELETE) around it.

// TestDoomAloneInARow: with n's commit stuck and ids reserved two at a
// time, producer p has batch 0 in n; its batch 1 and producer q's batch 0
// ride in n+1. DELETE q is refused (busy); n+1 aborts alone; then DELETE q
// is refused for the outage only (not busy: its document can't be
// published), and passes once the commit does; init p
// answers at once (p's only batch is prepared) with next 1, and p's batch 1
// at the new epoch rides in n+2, which is doomed and aborts alone too; p's
// resend rides in n+3, doomed again. Whether or not that one aborts alone
// (the id after it may not be reserved), no answer names an id beyond the
// reserved ones, and once n's commit passes each batch answered into a
// checkpoint that committed is in the destination once; a restart opens
// beyond every id answered, and init says p's next is 2.
func TestDoomAloneInARow(t *testing.T) {
	var p *Producer
	var q *Producer
	sc := newStuckCommit(t, fillN(t, &p), func(c *Config) { c.idBlock = 2 })
	e, n := sc.e, sc.n
	answered := n
	note := func(res WriteResult) {
		if res.Checkpoint > answered {
			answered = res.Checkpoint
		}
		if r := e.pipe.reserved.Load(); res.Checkpoint > r {
			t.Fatalf("a write answered checkpoint %d, beyond the reserved %d (I8)", res.Checkpoint, r)
		}
	}
	// q is known before n's barrier, so its init is no barrier.
	// (fillN ran already: init q now, nothing of it is in n.)
	st, err := e.InitProducer(t.Context(), "q")
	if err != nil {
		t.Fatal(err)
	}
	q = &Producer{ID: "q", Epoch: st.Epoch}
	note(mustSend(t, e, p, "b", 1, 1))
	note(mustSend(t, e, q, "b", 0, 1))
	if err := e.DeleteProducer(t.Context(), "q"); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("DELETE q with its batch 0 open in %d: %v, want busy", n+1, err)
	}
	// Init p while its batch 1 is open: a barrier that can't pass behind the
	// stuck commit (retry), until the abort alone.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err = e.InitProducer(ctx, "p")
	cancel()
	if err == nil {
		t.Fatalf("init p with its batch 1 open in %d behind a stuck commit: answered", n+1)
	}
	e.ing.doomFile(n+1, "b", fmt.Errorf("step: %w", ErrDiskFull))
	waitFor(t, "n+1's abort alone", func() bool { s, _ := sc.ends.state(n + 1); return s == recovery.Aborted })
	// Not busy now; the forget's document can't be published while the
	// destination fails (the stuck rename): retry, q kept.
	if err := e.DeleteProducer(t.Context(), "q"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("DELETE q after its only batch aborted, destination failing: %v, want not ready", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	st, err = e.InitProducer(ctx, "p")
	cancel()
	if err != nil {
		t.Fatalf("init p with only batch 0 (prepared in %d) uncommitted: %v", n, err)
	}
	if ss := st.Streams["b"]; ss.NextSeq != 1 {
		t.Fatalf("init p after n+1's abort alone: %+v, want next 1", st)
	}
	old := p
	p = &Producer{ID: "p", Epoch: st.Epoch}
	if _, err := send(e, old, "b", 1, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("p's old epoch after init: %v, want fenced", err)
	}
	note(mustWrite(t, e, aloneKeyed(101), n+2, false))
	note(mustSend(t, e, p, "b", 1, 1))
	e.ing.doomFile(n+2, "b", fmt.Errorf("step: %w", ErrDiskFull))
	waitFor(t, "n+2's abort alone", func() bool { s, _ := sc.ends.state(n + 2); return s == recovery.Aborted })
	if res, err := send(e, p, "b", 2, 1); err == nil {
		t.Fatalf("p's batch 2 after its batch 1 aborted with n+2: %+v", res)
	} else if exp, ok := isSeqErr(err); !ok || exp != 1 {
		t.Fatalf("p's batch 2 after n+2's abort: %v, want expected_seq 1", err)
	}
	note(mustWrite(t, e, aloneKeyed(101), n+3, false))
	note(mustSend(t, e, p, "b", 1, 1))
	e.ing.doomFile(n+3, "b", fmt.Errorf("step: %w", ErrDiskFull))
	if r := e.pipe.reserved.Load(); r > n+3 {
		waitFor(t, "n+3's abort alone", func() bool { s, _ := sc.ends.state(n + 3); return s == recovery.Aborted })
	} else {
		// Not alone: the id after it is not reserved (I8). The doom
		// holds writes until the coordinator is free.
		time.Sleep(50 * time.Millisecond)
		if s, _ := sc.ends.state(n + 3); s != "" {
			t.Fatalf("n+3 ended (%q) behind the stuck commit with n+4 beyond the reserved %d", s, r)
		}
		if res, err := send(e, p, "b", 2, 1); err == nil {
			t.Fatalf("a write into doomed n+3 accepted: %+v", res)
		}
		if st := e.Status(); st.OpenID != n+3 {
			t.Fatalf("open checkpoint %d, want n+3=%d", st.OpenID, n+3)
		}
	}
	sc.stuck.Store(false)
	if err := <-sc.done; err != nil {
		t.Fatalf("checkpoint %d: %v", n, err)
	}
	waitFor(t, "n+3's abort", func() bool { s, _ := sc.ends.state(n + 3); return s == recovery.Aborted })
	for id := n + 1; id <= n+3; id++ {
		if s, k := sc.ends.state(id); s != recovery.Aborted || k != 1 {
			t.Fatalf("checkpoint %d: %q, %d ends, want aborted once", id, s, k)
		}
	}
	if err := e.DeleteProducer(t.Context(), "q"); err != nil {
		t.Fatalf("DELETE q (its only batch aborted): %v", err)
	}
	if _, err := send(e, q, "b", 0, 1); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("q's write after its DELETE: %v, want unknown producer", err)
	}
	// Resends after all that: p's batch 1 (at its new epoch), key 101.
	res := mustSend(t, e, p, "b", 1, 1)
	note(res)
	note(mustWrite(t, e, aloneKeyed(101), res.Checkpoint, false))
	sc.r.commit()
	for seq := range int64(2) {
		if res, err := send(e, p, "b", seq, 1); err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("retry of p's batch %d: %+v %v, want a committed duplicate", seq, res, err)
		}
	}
	sc.r.stop()
	e = sc.r.start(nil)
	if open := e.Status().OpenID; open <= answered {
		t.Fatalf("after the restart the open checkpoint is %d: %d was answered (I8)", open, answered)
	}
	if ss := sc.r.initState("p").Streams["b"]; ss.NextSeq != 2 || ss.CommittedSeq != 1 {
		t.Fatalf("p after the restart: %+v, want next 2, committed 1", ss)
	}
	must := map[invariant.BatchID]bool{}
	for _, b := range []invariant.BatchID{{Producer: "p", Stream: "b", Seq: 0}, {Producer: "p", Stream: "b", Seq: 1},
		{Stream: "k", Seq: 100}, {Stream: "k", Seq: 101}} {
		must[b] = true
	}
	sc.r.check(invariant.Expect{Must: must, Exact: true})
}

// TestDoomedAbortsWhileReservingFails: the data dir is full, so a staging
// file of the open checkpoint n can't be finished (doomed) and the state
// store refuses writes for space, the reservation of the next block of
// ids too. The coordinator is free, and the ids the abort of n hands out
// (n+1, and n+2 that its abort opens) are reserved already; only the
// reservation ahead, which the checkpoint asks for at half a block, is
// refused. n must abort (its staging files deleted: on one disk that is
// the space the store needs) and writes be taken again into n+2. Failed
// before: every checkpoint stopped at the refused reservation, before its
// barrier, so the doom held every write refused (507) and n's files on
// the full disk, for as long as the store's writes were refused.
func TestDoomedAbortsWhileReservingFails(t *testing.T) {
	r, f := storeRig(t)
	ends := &ckEnds{end: map[uint64][]recovery.State{}}
	r.tweak = func(c *Config) { c.StoreOptions.WriteFault = f.hook; c.idBlock = 8; c.Hooks.Checkpoint = ends.hook }
	e := r.start(nil)
	// Empty checkpoints until the next one must reserve ahead (reserveIDs:
	// at half a block), with the ids it may hand out still reserved.
	for e.pipe.reserved.Load() >= e.Status().OpenID+e.cfg.idBlock/2+2 {
		r.commit()
	}
	n := e.Status().OpenID
	if e.pipe.reserved.Load() < n+2 {
		t.Fatalf("reserved %d, open %d: the ids the abort hands out are not reserved", e.pipe.reserved.Load(), n)
	}
	mustSend(t, e, nil, "s", 1, 1)
	f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
	e.ing.doomFile(n, "s", fmt.Errorf("step: %w", ErrDiskFull))
	deadline := time.Now().Add(5 * time.Second)
	for s, _ := ends.state(n); s == "" && time.Now().Before(deadline); s, _ = ends.state(n) {
		time.Sleep(time.Millisecond)
	}
	if s, k := ends.state(n); s != recovery.Aborted || k != 1 {
		t.Fatalf("doomed checkpoint %d with the coordinator free and its ids reserved, the reservation ahead refused for space: %q (%d ends) after 5 s, want aborted (status %+v)", n, s, k, e.Status())
	}
	res := mustSend(t, e, nil, "s", 2, 1)
	if res.Checkpoint != n+2 || res.Checkpoint > e.pipe.reserved.Load() {
		t.Fatalf("write after the abort: %+v, want checkpoint n+2=%d within the reserved %d", res, n+2, e.pipe.reserved.Load())
	}
	f.set(nil)
	r.commit()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 2}: true}, Exact: true})
}

// TestDoomedAbortsAtBlockEnd: as TestDoomedAbortsWhileReservingFails, but
// the reservation ahead is refused for space over checkpoint after
// checkpoint until only the open one's successor is reserved (reserved =
// n+1): a cut could hand out n+2 (its abort takes n+1 and opens n+2), so
// the coordinator may not cut n; but the doomed open checkpoint n may
// abort alone (abortOpenLocked opens n+1, reserved). On a full data dir
// its staging files hold the space the store needs: left alone, n never
// ends, every write is refused 507 until an operator frees space.
func TestDoomedAbortsAtBlockEnd(t *testing.T) {
	r, f := storeRig(t)
	ends := &ckEnds{end: map[uint64][]recovery.State{}}
	r.tweak = func(c *Config) { c.StoreOptions.WriteFault = f.hook; c.idBlock = 8; c.Hooks.Checkpoint = ends.hook }
	e := r.start(nil)
	f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
	// Checkpoints with data go on while the ids they may hand out are
	// reserved (5f1833d), until the reserve runs out.
	n, seq := useUpReserve(t, e)
	if _, err := e.Checkpoint(context.Background()); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("checkpoint at the end of the reserve: %v, want refused for space", err)
	}
	mustSend(t, e, nil, "s", seq, 1)
	e.ing.doomFile(n, "s", fmt.Errorf("step: %w", ErrDiskFull))
	deadline := time.Now().Add(5 * time.Second)
	for s, _ := ends.state(n); s == "" && time.Now().Before(deadline); s, _ = ends.state(n) {
		time.Sleep(time.Millisecond)
	}
	if s, k := ends.state(n); s != recovery.Aborted || k != 1 {
		t.Fatalf("doomed open checkpoint %d, the coordinator free, %d reserved (its abort alone opens %d), reservations refused for space: %q (%d ends) after 5 s, want aborted (status %+v)", n, n+1, n+1, s, k, e.Status())
	}
	res := mustSend(t, e, nil, "s", seq+1, 1)
	if res.Checkpoint != n+1 || res.Checkpoint > e.pipe.reserved.Load() {
		t.Fatalf("write after the abort: %+v, want checkpoint n+1=%d within the reserved %d", res, n+1, e.pipe.reserved.Load())
	}
	f.set(nil)
	r.commit()
	must := map[invariant.BatchID]bool{{Stream: "s", Seq: seq + 1}: true}
	for i := int64(0); i < seq; i++ {
		must[invariant.BatchID{Stream: "s", Seq: i}] = true
	}
	r.check(invariant.Expect{Must: must, Exact: true})
}

// blockEndRig has r's engines reserve ids 8 at a time, report checkpoint
// ends to the returned ckEnds and write their state store through the
// returned storeFaults (after r's tweak).
func blockEndRig(r *rig) (*storeFaults, *ckEnds) {
	f := r.withStoreFaults()
	ends := &ckEnds{end: map[uint64][]recovery.State{}}
	before := r.tweak
	r.tweak = func(c *Config) {
		before(c)
		c.idBlock = 8
		c.Hooks.Checkpoint = ends.hook
	}
	return f, ends
}

// useUpReserve commits anonymous batches of stream s (seq 0 up), a
// checkpoint each, while the ids a checkpoint may hand out are reserved
// (reserving ahead refused for space, 5f1833d), until only the open
// checkpoint's next is. It returns the open checkpoint n (reserved
// n+1) and the next seq.
func useUpReserve(t *testing.T, e *Engine) (n uint64, seq int64) {
	t.Helper()
	for e.pipe.reserved.Load() >= e.Status().OpenID+2 {
		mustSend(t, e, nil, "s", seq, 1)
		seq++
		if res, err := e.Checkpoint(context.Background()); err != nil || res.State != recovery.Committed {
			t.Fatalf("checkpoint with ids reserved: %+v, %v", res, err)
		}
	}
	n = e.Status().OpenID
	if got := e.pipe.reserved.Load(); got != n+1 {
		t.Fatalf("reserved %d, open %d: want reserved = open+1", got, n)
	}
	return n, seq
}
