package server

import (
	"errors"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
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
	r := newRig(t, nil)
	r.broken = "keys dropped by the cap: their batches may be written again, by design"
	r.tweak = func(c *Config) {
		c.Now = func() time.Time { return now }
		c.IdempotencyWindow, c.MaxKeys = 24*time.Hour, 2
	}
	e := r.start(nil)
	body := func(seq int64) []byte { return invariant.Batch(invariant.BatchID{Stream: "s", Seq: seq}, 1) }
	write := func(key string, seq int64) (WriteResult, error) {
		return e.Write(Write{Stream: "s", Ext: "ndjson", Data: body(seq), Records: 1, Key: NewIdempotencyKey(key, body(seq))})
	}
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
