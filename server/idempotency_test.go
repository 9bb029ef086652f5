package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// keyed writes batch id (anonymous, seq is its id) with an idempotency key.
func keyed(e *Engine, key, stream string, seq int64, n int) (WriteResult, error) {
	data := invariant.Batch(invariant.BatchID{Stream: stream, Seq: seq}, n)
	return e.Write(Write{Stream: stream, Ext: "ndjson", Data: data, Records: n, Key: NewIdempotencyKey(key, data)})
}

func wantDup(t *testing.T, res WriteResult, err error, ckpt uint64, committed bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !res.Duplicate || res.Committed != committed || res.Checkpoint != ckpt || res.Records != 0 {
		t.Fatalf("retry: got %+v, want a duplicate in checkpoint %d, committed %v", res, ckpt, committed)
	}
}

func wantNew(t *testing.T, res WriteResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if res.Duplicate {
		t.Fatalf("write: got a duplicate %+v, want it accepted as new", res)
	}
}

// TestIdempotencyKeyLifecycle: a retry rides in its batch's checkpoint
// (202) until it commits, then is answered committed (200) across a
// restart; another body under the key is refused; keys are per stream.
func TestIdempotencyKeyLifecycle(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	first, err := keyed(e, "k1", "s", 1, 3)
	wantNew(t, first, err)
	res, err := keyed(e, "k1", "s", 1, 3)
	wantDup(t, res, err, first.Checkpoint, false)
	if _, err := keyed(e, "k1", "s", 2, 3); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("same key, other body: err %v, want ErrKeyReused", err)
	}
	other, err := keyed(e, "k1", "t", 1, 3) // another stream: another key
	wantNew(t, other, err)
	if n := e.Status().Keys; n != 2 {
		t.Fatalf("status: %d keys, want 2", n)
	}

	if res := r.checkpoint(); res.State != recovery.Committed || res.ID != first.Checkpoint {
		t.Fatalf("checkpoint: %+v", res)
	}
	res, err = keyed(e, "k1", "s", 1, 3)
	wantDup(t, res, err, first.Checkpoint, true)

	r.stop()
	e = r.start(nil)
	res, err = keyed(e, "k1", "s", 1, 3)
	wantDup(t, res, err, first.Checkpoint, true)
	if _, err := keyed(e, "k1", "s", 2, 3); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("after restart, same key, other body: err %v, want ErrKeyReused", err)
	}
	r.checkpoint()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true, {Stream: "t", Seq: 1}: true}, Exact: true})
}

// TestIdempotencyKeyForgottenBeforePrepare: a key whose batch was lost in
// a crash before its prepare is forgotten (I5), so the retry is written.
func TestIdempotencyKeyForgottenBeforePrepare(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	res, err := keyed(e, "k", "s", 1, 2)
	wantNew(t, res, err)
	r.stop() // a crash: the batch was never prepared
	e = r.start(nil)
	res, err = keyed(e, "k", "s", 1, 2)
	wantNew(t, res, err)
	r.checkpoint()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true}, Exact: true})
}

// TestIdempotencyKeyForgottenOnAbort: the keys of an aborted checkpoint,
// and of the open one aborted with it, are forgotten; the retries are
// written once.
func TestIdempotencyKeyForgottenOnAbort(t *testing.T) {
	r, f := storeRig(t)
	e := r.start(nil)
	res, err := keyed(e, "a", "s", 1, 2)
	wantNew(t, res, err)
	f.set(failOp("prepare", recovery.BeforeCommit, errPageENOSPC, 1))
	release := make(chan struct{})
	entered := make(chan struct{})
	f.set(func(n int, op string, ph recovery.Phase) error {
		if op == "prepare" && ph == recovery.BeforeCommit {
			close(entered)
			<-release
			return errPageENOSPC
		}
		return nil
	})
	done := make(chan CheckpointResult)
	go func() { res, _ := e.Checkpoint(t.Context()); done <- res }()
	<-entered
	// Accepted into the next checkpoint while the first one is failing.
	res, err = keyed(e, "b", "s", 2, 2)
	wantNew(t, res, err)
	close(release)
	if got := <-done; got.State != recovery.Aborted {
		t.Fatalf("checkpoint: %+v, want aborted", got)
	}
	f.set(nil)
	for _, k := range []struct {
		key string
		seq int64
	}{{"a", 1}, {"b", 2}} {
		res, err := keyed(e, k.key, "s", k.seq, 2)
		wantNew(t, res, err)
	}
	r.checkpoint()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true, {Stream: "s", Seq: 2}: true}, Exact: true})
}

// TestIdempotencyKeyBounds: keys expire after the window and past the cap
// the oldest go first, in memory and in the store (I11).
func TestIdempotencyKeyBounds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	r := newRig(t, nil)
	r.broken = "batches whose keys were dropped are written again, by design"
	r.tweak = func(c *Config) { c.Now = clock; c.IdempotencyWindow = time.Hour; c.MaxKeys = 3 }
	e := r.start(nil)
	for i := range 5 {
		res, err := keyed(e, string(rune('a'+i)), "s", int64(i), 1)
		wantNew(t, res, err)
		r.checkpoint()
		now = now.Add(time.Minute)
	}
	if n := e.KeyCount(); n != 3 {
		t.Fatalf("keys in memory: %d, want the cap 3", n)
	}
	if n, err := e.store.KeyCount(); err != nil || n != 3 {
		t.Fatalf("keys in the store: %d (%v), want the cap 3", n, err)
	}
	// The oldest (a, b) were dropped: a retry is written again. The newest is kept.
	res, err := keyed(e, "e", "s", 4, 1)
	wantDup(t, res, err, res.Checkpoint, true)
	res, err = keyed(e, "a", "s", 0, 1)
	wantNew(t, res, err)

	now = now.Add(2 * time.Hour)
	res, err = keyed(e, "e", "s", 4, 1) // past the window
	wantNew(t, res, err)
	r.checkpoint()
	if n, err := e.store.KeyCount(); err != nil || n != 2 {
		t.Fatalf("keys in the store after the window: %d (%v), want 2 (a and e, written since)", n, err)
	}
	r.stop()
	now = now.Add(59 * time.Minute) // both prepared at the same barrier: still in the window
	e = r.start(nil)
	if n := e.KeyCount(); n != 2 {
		t.Fatalf("keys loaded at recovery: %d, want 2", n)
	}
	now = now.Add(2 * time.Minute)
	r.stop()
	e = r.start(nil)
	if n := e.KeyCount(); n != 0 {
		t.Fatalf("keys loaded at recovery past the window: %d, want 0", n)
	}
}

// TestBodyKey: the body key is the hex SHA-256 of the body, and keys two
// identical bodies the same.
func TestBodyKey(t *testing.T) {
	a, b := BodyKey([]byte("x\n")), BodyKey([]byte("x\n"))
	if a.Key != b.Key || a.Hash != b.Hash || len(a.Key) != 64 {
		t.Fatalf("body keys %q %q", a.Key, b.Key)
	}
	if c := BodyKey([]byte("y\n")); c.Key == a.Key {
		t.Fatal("different bodies, same key")
	}
}

// waitStuck waits until e's commit is failing and retried.
func waitStuck(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Status().Stuck == "" {
		if time.Now().After(deadline) {
			t.Fatal("the commit never got stuck")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKeyCapKeepsUncommittedKeys: past the key cap, the keys of a
// checkpoint prepared but not yet committed (its commit retried through
// an outage) are kept: a new key is refused with backpressure, and the
// retry of a kept key is a duplicate, never written twice. Before, the cap
// dropped the oldest prepared key, committed or not, and its retry was
// written again.
func TestKeyCapKeepsUncommittedKeys(t *testing.T) {
	var sc *committertest.Stuck
	r := newRig(t, nil)
	r.tweak = func(c *Config) {
		c.MaxKeys = 2
		sc = &committertest.Stuck{Committer: c.Committer}
		c.Committer = sc
	}
	e := r.start(nil)
	a, err := keyed(e, "a", "s", 1, 1)
	wantNew(t, a, err)
	b, err := keyed(e, "b", "s", 2, 1)
	wantNew(t, b, err)
	sc.On.Store(true)
	done := make(chan CheckpointResult, 1)
	go func() { res, _ := e.Checkpoint(context.Background()); done <- res }()
	waitStuck(t, e)
	// a and b are prepared, not committed: the cap may not drop them.
	if _, err := keyed(e, "c", "s", 3, 1); !errors.Is(err, ErrBackpressure) {
		t.Errorf("a new key past the cap with every key uncommitted: err %v, want ErrBackpressure", err)
	}
	res, err := keyed(e, "a", "s", 1, 1)
	wantDup(t, res, err, a.Checkpoint, false)
	sc.On.Store(false)
	if got := <-done; got.State != recovery.Committed {
		t.Fatalf("checkpoint: %+v", got)
	}
	// Committed now: the cap drops the oldest for a new key; of one
	// checkpoint's keys, the smallest id first, as the store does
	// (keyBarrierLocked).
	c, err := keyed(e, "c", "s", 3, 1)
	wantNew(t, c, err)
	kept, seq := "b", int64(2)
	if ia, ib := recovery.KeyID("", "s", "a"), recovery.KeyID("", "s", "b"); bytes.Compare(ia[:], ib[:]) > 0 {
		kept, seq = "a", 1
	}
	res, err = keyed(e, kept, "s", seq, 1)
	wantDup(t, res, err, b.Checkpoint, true)
	r.checkpoint()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true, {Stream: "s", Seq: 2}: true, {Stream: "s", Seq: 3}: true}, Exact: true})
}

// TestKeysPerCheckpointBounded: the open checkpoint accepts at most
// MaxOpenKeys keys; the next is refused with backpressure and the
// checkpoint ends at once (interval 0: nothing else would end it), after
// which the retry is accepted. Before, keys of unprepared batches were
// bounded only by the bytes their batches held.
func TestKeysPerCheckpointBounded(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.MaxKeys = 100; c.MaxOpenKeys = 2 }
	e := r.start(nil)
	for i := range 2 {
		res, err := keyed(e, string(rune('a'+i)), "s", int64(i), 1)
		wantNew(t, res, err)
	}
	if _, err := keyed(e, "c", "s", 2, 1); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("a third key in the open checkpoint: err %v, want ErrBackpressure", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Status().LastDone == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the open checkpoint was not ended early")
		}
		time.Sleep(time.Millisecond)
	}
	res, err := keyed(e, "c", "s", 2, 1)
	wantNew(t, res, err)
	r.checkpoint()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 0}: true, {Stream: "s", Seq: 1}: true, {Stream: "s", Seq: 2}: true}, Exact: true})
}

// TestKeyTableBounded drives the key table through many checkpoints past
// the cap: the newest MaxKeys keys are kept, older ones dropped oldest
// first, and what the table holds for them stays within a small multiple
// of the cap (what is dropped is given back).
func TestKeyTableBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &Engine{cfg: Config{MaxKeys: 100, IdempotencyWindow: time.Hour, Now: func() time.Time { return now }}}
	e.ing.e = e
	e.ing.openID = 1
	key := func(i int) *Write {
		return &Write{Stream: "s", Key: NewIdempotencyKey(fmt.Sprint("k", i), []byte{byte(i)})}
	}
	n := 0
	for range 300 {
		for range 10 {
			w := key(n)
			if _, ok, err := e.ing.keyLookupLocked(w); ok || err != nil {
				t.Fatalf("key %d: known %v, err %v", n, ok, err)
			}
			e.ing.keyAcceptLocked(w)
			n++
		}
		keys, _ := e.ing.keyBarrierLocked(now)
		e.ing.keyPreparedLocked(keys)
		e.ing.lastDone = e.ing.openID
		e.ing.openID++
		now = now.Add(time.Second)
		if len(e.ing.keys.m) > 100 {
			t.Fatalf("%d keys held, cap 100", len(e.ing.keys.m))
		}
		if held := len(e.ing.keys.ids) - e.ing.keys.iHead; held > 100 || len(e.ing.keys.ids) > 2*100+1024 || len(e.ing.keys.groups) > 2*64+20 {
			t.Fatalf("table holds %d ids (%d live), %d groups", len(e.ing.keys.ids), held, len(e.ing.keys.groups))
		}
	}
	for i := n - 100; i < n; i++ {
		if res, ok, err := e.ing.keyLookupLocked(key(i)); !ok || err != nil || !res.Committed {
			t.Fatalf("key %d of the newest 100: %+v known %v err %v", i, res, ok, err)
		}
	}
	if _, ok, _ := e.ing.keyLookupLocked(key(n - 101)); ok {
		t.Fatal("key past the cap still known")
	}
	// The window: an hour later every key is gone.
	now = now.Add(2 * time.Hour)
	if _, ok, _ := e.ing.keyLookupLocked(key(n - 1)); ok || len(e.ing.keys.m) != 0 {
		t.Fatalf("past the window: newest known %v, %d keys held", ok, len(e.ing.keys.m))
	}
}
