package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
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

// TestKeyCapAfterClockBack: the wall clock steps back between two
// checkpoints that prepare keys, and the key cap then drops a committed
// key. The engine drops the oldest by checkpoint; the state store must
// drop the same one, or, after a restart, it holds what the engine had
// forgotten: a key accepted again with another body (its old batch's key
// dropped) is loaded with the old body's row, and a retry of the new,
// committed batch is refused as reused (422) instead of answered as a
// duplicate. Written from the model test's clock steps (model_world_test
// .go), which step the clock back beside a key cap of 12.
func TestKeyCapAfterClockBack(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	r, write := keyCapStart(t, &now)
	writeNew(t, write, "a", 1)
	r.commit()
	now = now.Add(-5 * time.Hour) // the clock steps back
	writeNew(t, write, "b", 2)
	r.commit()
	writeNew(t, write, "c", 3) // the cap: a committed key goes
	r.commit()
	// The engine dropped a (the oldest checkpoint): a is new again, with
	// another body.
	res := writeNew(t, write, "a", 4)
	r.commit()
	again, err := write("a", 4)
	wantDup(t, again, err, res.Checkpoint, true)
	r.stop()
	r.start(nil)
	again, err = write("a", 4)
	if errors.Is(err, ErrKeyReused) {
		t.Fatalf("after a restart, the retry of key a's committed batch (checkpoint %d) is refused as reused: the store kept a's older row", res.Checkpoint)
	}
	wantDup(t, again, err, res.Checkpoint, true)
}

// keyNamesByID returns two key names of stream s whose ids order against
// their names' order: the store orders a prepare time's rows by id.
func keyNamesByID(t *testing.T, s string) (hi, lo string) {
	t.Helper()
	for i := 0; i < 64; i++ {
		a, b := fmt.Sprintf("k%d", i), fmt.Sprintf("k%d", i+1)
		ia, ib := recovery.KeyID("", s, a), recovery.KeyID("", s, b)
		if bytes.Compare(ia[:], ib[:]) > 0 {
			return a, b
		}
	}
	t.Fatal("no two key names with descending ids")
	return "", ""
}

// TestKeyCapTiedTimes: checkpoints prepare keys at one time (the clock
// did not move, or stepped back: prepare times are clamped to the latest
// given), and the key cap then drops a committed key. The engine drops
// the oldest checkpoint's; the store ordered rows by (time, id), so with
// tied times it dropped the smallest id, here the newer checkpoint's key
// the engine still held: after a restart, a retry of that committed batch
// was written again (found by the model test, seed 942253448: "keyed:
// retry of key-393 (batch /s0/672 in ..., remembered) written again").
func TestKeyCapTiedTimes(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	r, write := keyCapStart(t, &now)
	older, newer := keyNamesByID(t, "s") // newer's id is the smaller
	writeNew(t, write, older, 1)
	r.commit()
	kept := writeNew(t, write, newer, 2)
	r.commit()
	writeNew(t, write, "c", 3) // the cap: the oldest checkpoint's key goes
	r.commit()
	again, err := write(newer, 2)
	wantDup(t, again, err, kept.Checkpoint, true)
	r.stop()
	r.start(nil)
	again, err = write(newer, 2)
	if err == nil && !again.Duplicate {
		t.Fatalf("after a restart, the retry of key %s's committed batch (checkpoint %d) was written again in %d: the store dropped its row, the engine %s's", newer, kept.Checkpoint, again.Checkpoint, older)
	}
	wantDup(t, again, err, kept.Checkpoint, true)
}

// TestKeyCapOneCheckpoint: two keys prepared by one checkpoint, and the
// key cap then drops one of them. The engine must drop the one the store
// drops (the store orders a prepare's rows by id), or after a restart the
// key the engine held is forgotten and its retry written again.
func TestKeyCapOneCheckpoint(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	r, write := keyCapStart(t, &now)
	first, second := keyNamesByID(t, "s") // second's id is the smaller
	a := writeNew(t, write, first, 1)
	b := writeNew(t, write, second, 2)
	r.commit()
	writeNew(t, write, "c", 3) // the cap: one of the two goes
	r.commit()
	// Whichever the engine kept must survive a restart.
	heldKey, held, seq := first, a, int64(1)
	e := r.e
	e.ing.mu.Lock()
	_, ok := e.ing.keys.m[recovery.KeyID("", "s", first)]
	e.ing.mu.Unlock()
	if !ok {
		heldKey, held, seq = second, b, 2
	}
	again, err := write(heldKey, seq)
	wantDup(t, again, err, held.Checkpoint, true)
	r.stop()
	r.start(nil)
	again, err = write(heldKey, seq)
	if err == nil && !again.Duplicate {
		t.Fatalf("after a restart, the retry of key %s's committed batch (checkpoint %d), held by the engine before, was written again in %d", heldKey, held.Checkpoint, again.Checkpoint)
	}
	wantDup(t, again, err, held.Checkpoint, true)
}

// writeNew writes batch seq under key with write (keyCapStart's) and
// fails the test unless it is accepted as new.
func writeNew(t *testing.T, write func(key string, seq int64) (WriteResult, error), key string, seq int64) WriteResult {
	t.Helper()
	res, err := write(key, seq)
	wantNew(t, res, err)
	return res
}

// keyCapStart starts a rig whose engine keeps at most 2 idempotency keys
// for a day, on the clock *now. write writes batch seq of stream s under
// key (keyWrite) to the engine the rig's latest start opened.
func keyCapStart(t *testing.T, now *time.Time) (r *rig, write func(key string, seq int64) (WriteResult, error)) {
	t.Helper()
	r = newRig(t, nil)
	r.broken = "keys dropped by the cap: their batches may be written again, by design"
	r.tweak = func(c *Config) {
		c.Now = func() time.Time { return *now }
		c.IdempotencyWindow, c.MaxKeys = 24*time.Hour, 2
	}
	r.start(nil)
	return r, func(key string, seq int64) (WriteResult, error) { return keyWrite(r.e, key, seq) }
}

// keyWrite writes batch seq of stream s (one record) under key.
func keyWrite(e *Engine, key string, seq int64) (WriteResult, error) {
	body := invariant.Batch(invariant.BatchID{Stream: "s", Seq: seq}, 1)
	return e.Write(Write{Stream: "s", Ext: "ndjson", Data: body, Records: 1, Key: NewIdempotencyKey(key, body)})
}

// BenchmarkKeyCost measures what an idempotency key costs once its batch
// is committed: heap bytes held by the engine and bytes of state.db, per
// key, for 100k keys of 36 characters (a UUID) and of 255 (the most) prepared over ten
// checkpoints. key0 is the same writes without keys (the files, in
// memory, and the checkpoint rows): subtract it. Run:
//
//	go test ./server -run '^$' -bench KeyCost -benchtime 1x
func BenchmarkKeyCost(b *testing.B) {
	for _, size := range []int{0, 36, 255} {
		b.Run(fmt.Sprintf("key%d", size), func(b *testing.B) { benchKeyCost(b, size, 100_000, 10) })
	}
}

func benchKeyCost(b *testing.B, size, keys, ckpts int) {
	pad := strings.Repeat("k", max(size-36, 0))
	for range b.N {
		r := newRig(b, nil)
		r.broken = "a measurement, not a check"
		e := r.start(nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		data := invariant.Batch(invariant.BatchID{Stream: "s", Seq: 1}, 1)
		for i := range keys {
			key := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) + pad
			w := Write{Stream: "s", Ext: "ndjson", Data: data, Records: 1}
			if size > 0 {
				w.Key = newKeyForCost(key, data)
			}
			if _, err := e.Write(w); err != nil {
				b.Fatal(err)
			}
			if (i+1)%(keys/ckpts) == 0 {
				r.checkpoint()
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := e.KeyCount(); size > 0 && n != keys {
			b.Fatalf("%d keys held, want %d", n, keys)
		}
		r.stop()
		fi, err := os.Stat(r.storePath)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(keys), "heapB/key")
		b.ReportMetric(float64(fi.Size())/float64(keys), "dbB/key")
	}
}

func newKeyForCost(key string, data []byte) *IdempotencyKey { return NewIdempotencyKey(key, data) }
