package recovery

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Idempotency keys (DESIGN "Idempotency keys") are recorded in the
// transaction that prepares their batch's checkpoint, like producer
// sequence numbers (I5): a key accepted but not prepared is forgotten by a
// crash, so the client's retry is accepted again.
//
// One bucket holds them, as fixed-size binary rows (doc.go):
//
//	idem  <at unix ns:8 BE> <id:16>  ->  <body hash:16> <checkpoint:8 BE>
//
// ordered by the time they were prepared, so expiry and the cap drop the
// oldest first without scanning every key, and a start reads the window
// with one seek. The engine gives each prepare a time after the last one
// (server keyBarrierLocked), so this is the checkpoints' order, and one
// checkpoint's rows are in id order: the order the engine drops keys in. meta "idem_count" counts the rows. A key's window runs
// from its prepare; the engine passes the bounds (KeyPolicy) with each
// prepare. A key of a checkpoint not yet committed is never dropped.
var (
	bucketKeyLog = []byte("idem")
	keyKeyCount  = []byte("idem_count")
	// The version 2 buckets, read once by migrate2.
	bucketKeysV2     = []byte("idem_keys")
	bucketKeyOrderV2 = []byte("idem_order")
)

// KeyIDSize and KeyHashSize are the sizes of a key's id and body hash.
const (
	KeyIDSize   = 16
	KeyHashSize = 16
	keyRowKey   = 8 + KeyIDSize
	keyRowValue = KeyHashSize + 8
)

// Key is one idempotency key as recorded: not the client's key itself but
// its id, KeyID of (scope, stream, key).
type Key struct {
	ID [KeyIDSize]byte
	// Hash is BodyHash of the decoded request body.
	Hash [KeyHashSize]byte
	// Checkpoint is the checkpoint that prepared the key's batch.
	Checkpoint uint64
	At         time.Time
}

// KeyID is the id an idempotency key is recorded by: the first 16 bytes
// of the SHA-256 of scope, NUL, stream, NUL, key. Scope is what keys are
// scoped by (the engine's caller: a digest of the client's token, "" when
// tokens are off) and holds no NUL; a stream name and a key hold none
// either, so distinct triples hash distinct inputs. 128 bits keep
// accidental collisions out of reach at any cap, and a client can't aim
// its key at another scope's without a second preimage.
func KeyID(scope, stream, key string) [KeyIDSize]byte {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(stream))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var id [KeyIDSize]byte
	copy(id[:], h.Sum(nil))
	return id
}

// BodyHash is what a key records of its batch's decoded body: the first
// 16 bytes of its SHA-256, enough to tell a retry from another body.
func BodyHash(body []byte) [KeyHashSize]byte {
	sum := sha256.Sum256(body)
	var h [KeyHashSize]byte
	copy(h[:], sum[:])
	return h
}

// KeyPolicy bounds the recorded keys (I11): keys prepared before
// ExpireBefore are dropped, and beyond Max keys the oldest are dropped
// early; a key whose checkpoint is not committed yet is never dropped.
// Zero values turn a bound off.
type KeyPolicy struct {
	ExpireBefore time.Time
	Max          int
}

func keyRow(k *Key) (key, value []byte) {
	key = make([]byte, keyRowKey)
	ns := k.At.UnixNano()
	if ns < 0 {
		ns = 0
	}
	binary.BigEndian.PutUint64(key, uint64(ns))
	copy(key[8:], k.ID[:])
	value = make([]byte, keyRowValue)
	copy(value, k.Hash[:])
	binary.BigEndian.PutUint64(value[KeyHashSize:], k.Checkpoint)
	return key, value
}

func decodeKeyRow(key, value []byte) (Key, bool) {
	if len(key) != keyRowKey || len(value) != keyRowValue {
		return Key{}, false
	}
	var k Key
	k.At = time.Unix(0, int64(binary.BigEndian.Uint64(key))).UTC()
	copy(k.ID[:], key[8:])
	copy(k.Hash[:], value)
	k.Checkpoint = binary.BigEndian.Uint64(value[KeyHashSize:])
	return k, true
}

// putKeys records keys and applies the policy, inside a write transaction.
// The same id recorded again (a retry accepted after its key expired) is a
// second, newer row; the engine loads rows oldest first, so the newer one
// wins, and the older one expires first.
func putKeys(tx *bolt.Tx, keys []Key, pol KeyPolicy) error {
	if len(keys) == 0 && pol.ExpireBefore.IsZero() && pol.Max <= 0 {
		return nil
	}
	b := tx.Bucket(bucketKeyLog)
	if b == nil {
		var err error
		if b, err = tx.CreateBucket(bucketKeyLog); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketKeyLog, err)
		}
	}
	// Rows arrive in time order, mostly at the end: full pages.
	b.FillPercent = 1
	meta := tx.Bucket(bucketMeta)
	count := uint64(0)
	if v := meta.Get(keyKeyCount); len(v) == 8 {
		count = binary.BigEndian.Uint64(v)
	}
	committed := uint64(0)
	if v := meta.Get(keyLastCommitted); len(v) == 8 {
		committed = binary.BigEndian.Uint64(v)
	}
	for i := range keys {
		k, v := keyRow(&keys[i])
		if b.Get(k) == nil {
			count++
		}
		if err := b.Put(k, v); err != nil {
			return fmt.Errorf("put idempotency key: %w", err)
		}
	}
	// Expire by time, then by count, oldest first; the keys of checkpoints
	// not committed (the one being prepared) are passed over, never
	// dropped, whatever the cap.
	c := b.Cursor()
	var drop [][]byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		over := pol.Max > 0 && count-uint64(len(drop)) > uint64(pol.Max)
		old := false
		if len(k) >= 8 && !pol.ExpireBefore.IsZero() {
			old = time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))).Before(pol.ExpireBefore)
		}
		if !over && !old {
			break
		}
		if len(v) == keyRowValue && binary.BigEndian.Uint64(v[KeyHashSize:]) > committed {
			continue
		}
		drop = append(drop, append([]byte(nil), k...))
	}
	for _, k := range drop {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if len(keys) == 0 && len(drop) == 0 {
		return nil // nothing changed: no page to write
	}
	count -= uint64(len(drop))
	return meta.Put(keyKeyCount, u64(count))
}

// Keys returns every recorded idempotency key prepared at or after since,
// oldest first. A row that does not decode is ErrCorrupt, naming the
// file, as recovery refuses to guess what a key guarded.
func (s *Store) Keys(since time.Time) ([]Key, error) {
	var out []Key
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeyLog)
		if b == nil {
			return nil
		}
		from := Key{At: since}
		seek, _ := keyRow(&from)
		c := b.Cursor()
		for k, v := c.Seek(seek[:8]); k != nil; k, v = c.Next() {
			key, ok := decodeKeyRow(k, v)
			if !ok {
				return s.corrupt("idempotency key row %x: undecodable", k)
			}
			out = append(out, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// KeyCount returns how many idempotency key rows the store holds.
func (s *Store) KeyCount() (int, error) { return s.metaCount(keyKeyCount) }
