package server

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

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
	r := keyCapRig(t, &now)
	e := r.start(nil)
	write := func(key string, seq int64) (WriteResult, error) { return keyWrite(e, key, seq) }
	res, err := write("a", 1)
	wantNew(t, res, err)
	r.commit()
	now = now.Add(-5 * time.Hour) // the clock steps back
	res, err = write("b", 2)
	wantNew(t, res, err)
	r.commit()
	res, err = write("c", 3) // the cap: a committed key goes
	wantNew(t, res, err)
	r.commit()
	// The engine dropped a (the oldest checkpoint): a is new again, with
	// another body.
	res, err = write("a", 4)
	wantNew(t, res, err)
	r.commit()
	again, err := write("a", 4)
	wantDup(t, again, err, res.Checkpoint, true)
	r.stop()
	e = r.start(nil)
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
	r := keyCapRig(t, &now)
	e := r.start(nil)
	write := func(key string, seq int64) (WriteResult, error) { return keyWrite(e, key, seq) }
	older, newer := keyNamesByID(t, "s") // newer's id is the smaller
	res, err := write(older, 1)
	wantNew(t, res, err)
	r.commit()
	kept, err := write(newer, 2)
	wantNew(t, kept, err)
	r.commit()
	res, err = write("c", 3) // the cap: the oldest checkpoint's key goes
	wantNew(t, res, err)
	r.commit()
	again, err := write(newer, 2)
	wantDup(t, again, err, kept.Checkpoint, true)
	r.stop()
	e = r.start(nil)
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
	r := keyCapRig(t, &now)
	e := r.start(nil)
	write := func(key string, seq int64) (WriteResult, error) { return keyWrite(e, key, seq) }
	first, second := keyNamesByID(t, "s") // second's id is the smaller
	a, err := write(first, 1)
	wantNew(t, a, err)
	b, err := write(second, 2)
	wantNew(t, b, err)
	r.commit()
	res, err := write("c", 3) // the cap: one of the two goes
	wantNew(t, res, err)
	r.commit()
	// Whichever the engine kept must survive a restart.
	heldKey, held, seq := first, a, int64(1)
	e.ing.mu.Lock()
	_, ok := e.ing.keys.m[recovery.KeyID("", "s", first)]
	e.ing.mu.Unlock()
	if !ok {
		heldKey, held, seq = second, b, 2
	}
	again, err := write(heldKey, seq)
	wantDup(t, again, err, held.Checkpoint, true)
	r.stop()
	e = r.start(nil)
	again, err = write(heldKey, seq)
	if err == nil && !again.Duplicate {
		t.Fatalf("after a restart, the retry of key %s's committed batch (checkpoint %d), held by the engine before, was written again in %d", heldKey, held.Checkpoint, again.Checkpoint)
	}
	wantDup(t, again, err, held.Checkpoint, true)
}

// keyCapRig is a rig whose engine keeps at most 2 idempotency keys for a
// day, on the clock *now.
func keyCapRig(t *testing.T, now *time.Time) *rig {
	r := newRig(t, nil)
	r.broken = "keys dropped by the cap: their batches may be written again, by design"
	r.tweak = func(c *Config) {
		c.Now = func() time.Time { return *now }
		c.IdempotencyWindow, c.MaxKeys = 24*time.Hour, 2
	}
	return r
}

// keyWrite writes batch seq of stream s (one record) under key.
func keyWrite(e *Engine, key string, seq int64) (WriteResult, error) {
	body := invariant.Batch(invariant.BatchID{Stream: "s", Seq: seq}, 1)
	return e.Write(Write{Stream: "s", Ext: "ndjson", Data: body, Records: 1, Key: NewIdempotencyKey(key, body)})
}
