package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/eosink/eosink/recovery"
)

// Idempotency keys (DESIGN "Idempotency keys"): for writes without
// producer headers, a key per stream makes a retry safe.
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
//     accepted as new. And, once prepared, after the window or when the
//     cap pushes it out.
//
// Bounds (I11): keys are kept for Config.IdempotencyWindow after their
// prepare and at most Config.MaxKeys of them, in memory and in the store.
// Past the cap the oldest prepared keys are dropped early, which shortens
// the window for everyone rather than refuse writes: a retry of a dropped
// key would be written again. The keys of unprepared batches are bounded by
// MaxUncommittedBytes (each holds a batch) and never dropped.

// Defaults of the idempotency key bounds.
const (
	DefaultIdempotencyWindow = 24 * time.Hour
	DefaultMaxKeys           = 1_000_000
)

// IdempotencyKey is a write's key with the SHA-256 of its decoded body.
type IdempotencyKey struct {
	Key  string
	Hash [32]byte
}

// NewIdempotencyKey keys body by key.
func NewIdempotencyKey(key string, body []byte) *IdempotencyKey {
	return &IdempotencyKey{Key: key, Hash: sha256.Sum256(body)}
}

// BodyKey keys a body by its own content: the key is the hex SHA-256 of
// the decoded body (a stream's "dedup": "body"). An identical batch within
// the window is then a duplicate too, retried or not.
func BodyKey(body []byte) *IdempotencyKey {
	sum := sha256.Sum256(body)
	return &IdempotencyKey{Key: hex.EncodeToString(sum[:]), Hash: sum}
}

type keyState struct {
	hash     [32]byte
	ckpt     uint64 // the checkpoint holding the batch
	prepared bool
	at       time.Time // when prepared
}

// keyTable is the engine's idempotency keys, guarded by Engine.mu.
type keyTable struct {
	m     map[string]*keyState // by stream 0x00 key
	open  []recovery.Key       // accepted into the open checkpoint, not prepared
	order []keyOrder           // prepared keys, oldest first, from head
	head  int
}

type keyOrder struct {
	id string
	at time.Time
}

func keyID(stream, key string) string { return stream + "\x00" + key }

// keyLookupLocked answers a write whose key was seen: ok is false when the
// key is unknown (or expired) and the write goes on as new.
func (e *Engine) keyLookupLocked(stream string, k *IdempotencyKey) (res WriteResult, ok bool, err error) {
	id := keyID(stream, k.Key)
	ks := e.keys.m[id]
	if ks == nil {
		return res, false, nil
	}
	if ks.prepared && e.cfg.IdempotencyWindow > 0 && e.cfg.Now().Sub(ks.at) > e.cfg.IdempotencyWindow {
		delete(e.keys.m, id) // its order entry is skipped when reached
		return res, false, nil
	}
	if ks.hash != k.Hash {
		e.reject("idempotency_key_reused")
		return res, true, fmt.Errorf("stream %s key %q: %w", stream, k.Key, ErrKeyReused)
	}
	// Checkpoints commit in order and never abort once prepared, so a
	// prepared key's checkpoint is committed once lastDone reached it.
	res = WriteResult{Checkpoint: ks.ckpt, Duplicate: true, Committed: ks.prepared && ks.ckpt <= e.lastDone}
	if h := e.cfg.Hooks.Duplicate; h != nil {
		h(stream)
	}
	return res, true, nil
}

// keyAcceptLocked records k for a batch appended to the open checkpoint.
func (e *Engine) keyAcceptLocked(stream string, k *IdempotencyKey) {
	if e.keys.m == nil {
		e.keys.m = map[string]*keyState{}
	}
	if e.cfg.MaxKeys > 0 && len(e.keys.m) >= e.cfg.MaxKeys {
		e.keyExpireLocked(e.cfg.Now(), 1)
	}
	e.keys.m[keyID(stream, k.Key)] = &keyState{hash: k.Hash, ckpt: e.openID}
	e.keys.open = append(e.keys.open, recovery.Key{Stream: stream, Key: k.Key, Hash: k.Hash, Checkpoint: e.openID})
}

// keyBarrierLocked takes the open checkpoint's keys for its prepare, at
// time at.
func (e *Engine) keyBarrierLocked(at time.Time) ([]recovery.Key, recovery.KeyPolicy) {
	keys := e.keys.open
	e.keys.open = nil
	for i := range keys {
		keys[i].At = at
	}
	pol := recovery.KeyPolicy{Max: e.cfg.MaxKeys}
	if e.cfg.IdempotencyWindow > 0 {
		pol.ExpireBefore = at.Add(-e.cfg.IdempotencyWindow)
	}
	return keys, pol
}

// keyPreparedLocked marks keys prepared: they now survive crashes.
func (e *Engine) keyPreparedLocked(keys []recovery.Key) {
	for _, k := range keys {
		id := keyID(k.Stream, k.Key)
		if ks := e.keys.m[id]; ks != nil && ks.ckpt == k.Checkpoint {
			ks.prepared, ks.at = true, k.At
			e.keys.order = append(e.keys.order, keyOrder{id, k.At})
		}
	}
	e.keyExpireLocked(e.cfg.Now(), 0)
}

// keyForgetLocked forgets the keys of aborted batches, so their retries
// are accepted.
func (e *Engine) keyForgetLocked(keys []recovery.Key) {
	for _, k := range keys {
		id := keyID(k.Stream, k.Key)
		if ks := e.keys.m[id]; ks != nil && ks.ckpt == k.Checkpoint && !ks.prepared {
			delete(e.keys.m, id)
		}
	}
}

// keyLoadLocked restores the prepared keys at recovery, oldest first.
func (e *Engine) keyLoadLocked(keys []recovery.Key) {
	e.keys = keyTable{m: make(map[string]*keyState, len(keys))}
	for _, k := range keys {
		id := keyID(k.Stream, k.Key)
		e.keys.m[id] = &keyState{hash: k.Hash, ckpt: k.Checkpoint, prepared: true, at: k.At}
		e.keys.order = append(e.keys.order, keyOrder{id, k.At})
	}
	e.keyExpireLocked(e.cfg.Now(), 0)
}

// keyExpireLocked drops prepared keys older than the window, then the
// oldest while more than MaxKeys-room are held.
func (e *Engine) keyExpireLocked(now time.Time, room int) {
	t := &e.keys
	for t.head < len(t.order) {
		o := t.order[t.head]
		ks := t.m[o.id]
		if ks == nil || !ks.prepared || !ks.at.Equal(o.at) {
			t.head++ // expired at lookup, maybe accepted again since: a stale entry
			continue
		}
		old := e.cfg.IdempotencyWindow > 0 && now.Sub(ks.at) > e.cfg.IdempotencyWindow
		full := e.cfg.MaxKeys > 0 && len(t.m)+room > e.cfg.MaxKeys
		if !old && !full {
			break
		}
		delete(t.m, o.id)
		t.head++
	}
	if t.head > 1024 && t.head > len(t.order)/2 {
		t.order = append([]keyOrder(nil), t.order[t.head:]...)
		t.head = 0
	}
}

// KeyCount returns how many idempotency keys the engine holds in memory.
func (e *Engine) KeyCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.keys.m)
}
