package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/eosink/eosink/recovery"
)

// Idempotency keys (DESIGN "Idempotency keys"): for writes without
// producer headers, a key per (scope, stream) makes a retry safe. The
// scope is Write.Scope: the client's token when tokens are on, so one
// client can't take another's key; "" without tokens.
//
// Life of a key, all under the ingest lock:
//
//   - accepted: the batch was appended to the open checkpoint N. A retry
//     with the same body is a duplicate riding in N (202); with another
//     body it is ErrKeyReused.
//   - prepared: N's "prepared" record holds the key (recovery/keys.go), so
//     it survives crashes (I5). It is committed once N is, which answers a
//     retry 200.
//   - forgotten: N (or the checkpoint before it, which aborts N along) was
//     aborted, or the process died before N's prepare: the retry is
//     accepted as new. And, once committed, after the window or when the
//     cap pushes it out.
//
// Bounds (I11): keys are kept for Config.IdempotencyWindow after their
// prepare and at most Config.MaxKeys of them, in memory and in the store;
// at most Config.MaxOpenKeys are accepted into one checkpoint (a
// quarter of the cap by default). A key is
// never forgotten while its batch is not committed, whatever the bounds:
// past the cap the oldest committed keys are dropped early (a retry of one
// would be written again: the window is shorter for everyone), and when
// none is left to drop, or the open checkpoint holds its most, a new key
// is refused with ErrBackpressure and the open checkpoint is asked to end
// now, which makes room.
//
// A key costs a fixed few dozen bytes whatever its length: the engine and
// the store keep its id (recovery.KeyID, 16 bytes) and its body's hash
// (recovery.BodyHash, 16 bytes), never the key.

// Defaults of the idempotency key bounds.
const (
	DefaultIdempotencyWindow = 24 * time.Hour
	DefaultMaxKeys           = 1_000_000
)

// IdempotencyKey is a write's key with the hash of its decoded body.
type IdempotencyKey struct {
	Key  string
	Hash [recovery.KeyHashSize]byte
}

// NewIdempotencyKey keys body by key.
func NewIdempotencyKey(key string, body []byte) *IdempotencyKey {
	return &IdempotencyKey{Key: key, Hash: recovery.BodyHash(body)}
}

// BodyKey keys a body by its own content: the key is the hex SHA-256 of
// the decoded body (a stream's "dedup": "body"). An identical batch within
// the window is then a duplicate too, retried or not.
func BodyKey(body []byte) *IdempotencyKey {
	sum := sha256.Sum256(body)
	k := &IdempotencyKey{Key: hex.EncodeToString(sum[:])}
	copy(k.Hash[:], sum[:])
	return k
}

type keyID = [recovery.KeyIDSize]byte

// keyState is a known key: its body's hash and the checkpoint holding its
// batch. Checkpoints commit in order and never abort once prepared, so the
// batch is committed once lastDone reached ckpt; before, it is live.
type keyState struct {
	hash [recovery.KeyHashSize]byte
	ckpt uint64
}

// keyTable is the engine's idempotency keys, guarded by Engine.mu.
type keyTable struct {
	m    map[keyID]keyState
	open []recovery.Key // accepted into the open checkpoint, not prepared
	// ids holds the prepared keys by checkpoint, oldest first from iHead;
	// groups says which checkpoint prepared which (from gHead on).
	ids    []keyID
	groups []keyGroup
	iHead  int
	gHead  int
	// latest is the newest prepare time given to keys (Unix ns): prepare
	// times never go back, whatever the wall clock does (keyBarrierLocked).
	latest int64
}

// keyGroup is the keys one checkpoint prepared: ids up to end.
type keyGroup struct {
	ckpt uint64
	at   int64 // prepare time, Unix ns
	end  int
}

func writeKeyID(w *Write) keyID { return recovery.KeyID(w.Scope, w.Stream, w.Key.Key) }

// maxOpenKeys is the most keys one checkpoint accepts: a quarter of the
// cap, so the open and the in-flight checkpoint's keys leave half of it to
// committed ones, but no fewer than a small cap's whole.
func (in *ingest) maxOpenKeys() int {
	if in.e.cfg.MaxOpenKeys > 0 {
		return in.e.cfg.MaxOpenKeys
	}
	return max(in.e.cfg.MaxKeys/4, min(in.e.cfg.MaxKeys, 1024))
}

// keyLookupLocked answers a write whose key was seen: ok is false when the
// key is unknown (or expired) and the write goes on as new. A new key
// that can't be kept is refused with ErrBackpressure.
func (in *ingest) keyLookupLocked(w *Write) (res WriteResult, ok bool, err error) {
	in.keyExpireLocked(in.e.cfg.Now(), 0)
	id := writeKeyID(w)
	ks, known := in.keys.m[id]
	if !known {
		return res, false, in.keyRoomLocked(w.Stream)
	}
	if ks.hash != w.Key.Hash {
		in.reject("idempotency_key_reused")
		return res, true, fmt.Errorf("stream %s key %q: %w", w.Stream, w.Key.Key, ErrKeyReused)
	}
	res = WriteResult{Checkpoint: ks.ckpt, Duplicate: true, Committed: ks.ckpt <= in.lastDone}
	if h := in.e.cfg.Hooks.Duplicate; h != nil {
		h(w.Stream)
	}
	return res, true, nil
}

// keyRoomLocked makes room for one more key, dropping the oldest committed
// ones past the cap, or refuses it.
func (in *ingest) keyRoomLocked(stream string) error {
	if n := len(in.keys.open); n >= in.maxOpenKeys() {
		in.earlyLocked()
		in.reject("backpressure")
		return fmt.Errorf("stream %s: %d idempotency keys in the open checkpoint, the most per checkpoint: %w", stream, n, ErrBackpressure)
	}
	if len(in.keys.m) < in.e.cfg.MaxKeys {
		return nil
	}
	in.keyExpireLocked(in.e.cfg.Now(), 1)
	if n := len(in.keys.m); n >= in.e.cfg.MaxKeys {
		// Every key held is of a batch not committed yet: none may go.
		in.earlyLocked()
		in.reject("backpressure")
		return fmt.Errorf("stream %s: %d idempotency keys held, none committed (--idempotency-max-keys): %w", stream, n, ErrBackpressure)
	}
	return nil
}

// keyAcceptLocked records w's key for its batch, appended to the open
// checkpoint.
func (in *ingest) keyAcceptLocked(w *Write) {
	if in.keys.m == nil {
		in.keys.m = map[keyID]keyState{}
	}
	id := writeKeyID(w)
	in.keys.m[id] = keyState{hash: w.Key.Hash, ckpt: in.openID}
	in.keys.open = append(in.keys.open, recovery.Key{ID: id, Hash: w.Key.Hash, Checkpoint: in.openID})
}

// keyBarrierLocked takes the open checkpoint's keys for its prepare, at
// time at, or just after the latest prepare time given before if the
// wall clock did not move or stepped back since, sorted by id: the store
// keeps key rows in (time, id) order and drops the oldest first, and a
// restart loads them so (a newer row of a key wins), which must be the
// engine's order: by checkpoint, and in one checkpoint as filed by
// keyPreparedLocked. Failed before: after a step back, the cap dropped
// one key in the engine and another in the store, and a key accepted
// again with another body came back from the store with its old body
// (TestKeyCapAfterClockBack); and with tied times (the clock clamped to
// the latest, or not moving) the store dropped the smallest id, a newer
// checkpoint's key the engine held, whose retry after a restart was
// written again (TestKeyCapTiedTimes), or, in one checkpoint, another
// key than the engine, which dropped in acceptance order
// (TestKeyCapOneCheckpoint). A key prepared after a step back is kept up
// to the step longer. State stores written before keep their tied rows:
// a start loads them in the store's order, which the engine then follows,
// and every later prepare is after them.
func (in *ingest) keyBarrierLocked(at time.Time) ([]recovery.Key, recovery.KeyPolicy) {
	keys := in.keys.open
	in.keys.open = nil
	if len(keys) > 0 {
		if next := time.Unix(0, in.keys.latest+1); in.keys.latest != 0 && at.Before(next) {
			at = next
		}
		in.keys.latest = at.UnixNano()
		slices.SortFunc(keys, func(a, b recovery.Key) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	} else if latest := time.Unix(0, in.keys.latest); at.Before(latest) {
		at = latest
	}
	for i := range keys {
		keys[i].At = at
	}
	pol := recovery.KeyPolicy{Max: in.e.cfg.MaxKeys}
	if in.e.cfg.IdempotencyWindow > 0 {
		pol.ExpireBefore = at.Add(-in.e.cfg.IdempotencyWindow)
	}
	return keys, pol
}

// keyPreparedLocked files the keys of a prepared checkpoint by age: they
// now survive crashes, and expire once committed.
func (in *ingest) keyPreparedLocked(keys []recovery.Key) {
	t := &in.keys
	start := len(t.ids)
	for _, k := range keys {
		if ks, ok := t.m[k.ID]; ok && ks.ckpt == k.Checkpoint {
			t.ids = append(t.ids, k.ID)
		}
	}
	if len(t.ids) > start {
		t.groups = append(t.groups, keyGroup{ckpt: keys[0].Checkpoint, at: keys[0].At.UnixNano(), end: len(t.ids)})
	}
	in.keyExpireLocked(in.e.cfg.Now(), 0)
}

// keyForgetLocked forgets the keys of aborted batches, so their retries
// are accepted.
func (in *ingest) keyForgetLocked(keys []recovery.Key) {
	for _, k := range keys {
		if ks, ok := in.keys.m[k.ID]; ok && ks.ckpt == k.Checkpoint {
			delete(in.keys.m, k.ID)
		}
	}
}

// keyLoadLocked restores the prepared keys at recovery, oldest first; a
// newer row of an id wins over an older one.
func (in *ingest) keyLoadLocked(keys []recovery.Key) {
	in.keys = keyTable{m: make(map[keyID]keyState, len(keys)), ids: make([]keyID, 0, len(keys))}
	t := &in.keys
	for _, k := range keys {
		t.m[k.ID] = keyState{hash: k.Hash, ckpt: k.Checkpoint}
		at := k.At.UnixNano()
		if n := len(t.groups); n == 0 || t.groups[n-1].ckpt != k.Checkpoint || t.groups[n-1].at != at {
			t.groups = append(t.groups, keyGroup{ckpt: k.Checkpoint, at: at})
		}
		t.ids = append(t.ids, k.ID)
		t.groups[len(t.groups)-1].end = len(t.ids)
		t.latest = max(t.latest, at)
	}
	in.keyExpireLocked(in.e.cfg.Now(), 0)
}

// keyExpireLocked drops committed keys older than the window, then the
// oldest committed ones while more than MaxKeys-room are held. It stops at
// the first key not committed: its batch may still be written, so its
// retry must stay a duplicate.
func (in *ingest) keyExpireLocked(now time.Time, room int) {
	t := &in.keys
	for t.gHead < len(t.groups) {
		g := t.groups[t.gHead]
		if g.ckpt > in.lastDone {
			break
		}
		old := in.e.cfg.IdempotencyWindow > 0 && now.Sub(time.Unix(0, g.at)) > in.e.cfg.IdempotencyWindow
		for t.iHead < g.end && (old || len(t.m)+room > in.e.cfg.MaxKeys) {
			id := t.ids[t.iHead]
			t.iHead++
			if ks, ok := t.m[id]; ok && ks.ckpt == g.ckpt {
				delete(t.m, id) // else accepted again since: a stale entry
			}
		}
		if t.iHead < g.end {
			break
		}
		t.gHead++
	}
	// Give back what is gone once it is most of what is held.
	if t.iHead > 1024 && t.iHead > len(t.ids)/2 || t.gHead > 64 && t.gHead > len(t.groups)/2 {
		t.ids = append([]keyID(nil), t.ids[t.iHead:]...)
		t.groups = append([]keyGroup(nil), t.groups[t.gHead:]...)
		for i := range t.groups {
			t.groups[i].end -= t.iHead
		}
		t.iHead, t.gHead = 0, 0
	}
}

// KeyCount returns how many idempotency keys the engine holds in memory.
func (e *Engine) KeyCount() int {
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	return len(e.ing.keys.m)
}
