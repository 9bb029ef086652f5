package recovery

import (
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
// Two buckets hold them:
//
//	idem_keys   <stream> 0x00 <key>            -> JSON Key
//	idem_order  <at unix ns:8 BE> <stream> 0x00 <key> -> empty
//
// idem_order sorts keys by the time they were prepared, so expiry and the
// cap drop the oldest first without scanning every key. meta "idem_count"
// counts the keys. A key's window runs from its prepare; the engine passes
// the bounds (KeyPolicy) with each prepare.
var (
	bucketKeys     = []byte("idem_keys")
	bucketKeyOrder = []byte("idem_order")
	keyKeyCount    = []byte("idem_count")
)

// Key is one idempotency key as recorded.
type Key struct {
	Stream string
	Key    string
	// Hash is the SHA-256 of the decoded request body.
	Hash [32]byte
	// Checkpoint is the checkpoint that prepared the key's batch.
	Checkpoint uint64
	At         time.Time
}

// KeyPolicy bounds the recorded keys (I11): keys prepared before
// ExpireBefore are dropped, and beyond Max keys the oldest are dropped
// early. Zero values turn a bound off.
type KeyPolicy struct {
	ExpireBefore time.Time
	Max          int
}

func keyID(stream, key string) []byte { return []byte(stream + "\x00" + key) }

func orderKey(at time.Time, id []byte) []byte {
	ns := at.UnixNano()
	if ns < 0 {
		ns = 0
	}
	out := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(out, uint64(ns))
	return append(out, id...)
}

// putKeys records keys and applies the policy, inside a write transaction.
// A key already recorded (a retry accepted after its first batch was
// forgotten cannot be; this only guards replays) is replaced.
func putKeys(tx *bolt.Tx, keys []Key, pol KeyPolicy) error {
	if len(keys) == 0 && pol.ExpireBefore.IsZero() && pol.Max <= 0 {
		return nil
	}
	kb, err := tx.CreateBucketIfNotExists(bucketKeys)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketKeys, err)
	}
	ob, err := tx.CreateBucketIfNotExists(bucketKeyOrder)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketKeyOrder, err)
	}
	meta := tx.Bucket(bucketMeta)
	count := uint64(0)
	if v := meta.Get(keyKeyCount); len(v) == 8 {
		count = binary.BigEndian.Uint64(v)
	}
	for i := range keys {
		k := &keys[i]
		id := keyID(k.Stream, k.Key)
		if old := kb.Get(id); old != nil {
			if o, err := decodeKey(old); err == nil {
				if err := ob.Delete(orderKey(o.At, id)); err != nil {
					return err
				}
			}
			count--
		}
		v, err := encodeKey(k)
		if err != nil {
			return fmt.Errorf("encode idempotency key: %w", err)
		}
		if err := kb.Put(id, v); err != nil {
			return fmt.Errorf("put idempotency key: %w", err)
		}
		if err := ob.Put(orderKey(k.At, id), nil); err != nil {
			return fmt.Errorf("put idempotency key order: %w", err)
		}
		count++
	}
	// Expire by time, then by count: oldest first.
	c := ob.Cursor()
	var drop [][]byte
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		at := time.Unix(0, int64(binary.BigEndian.Uint64(k[:8])))
		over := pol.Max > 0 && count-uint64(len(drop)) > uint64(pol.Max)
		if !over && (pol.ExpireBefore.IsZero() || !at.Before(pol.ExpireBefore)) {
			break
		}
		drop = append(drop, append([]byte(nil), k...))
	}
	for _, k := range drop {
		if err := ob.Delete(k); err != nil {
			return err
		}
		if err := kb.Delete(k[8:]); err != nil {
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
// oldest first. A record that does not decode is ErrCorrupt, naming the
// file, as recovery refuses to guess what a key guarded.
func (s *Store) Keys(since time.Time) ([]Key, error) {
	var out []Key
	err := s.view(func(tx *bolt.Tx) error {
		kb, ob := tx.Bucket(bucketKeys), tx.Bucket(bucketKeyOrder)
		if kb == nil || ob == nil {
			return nil
		}
		c := ob.Cursor()
		for k, _ := c.Seek(orderKey(since, nil)); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				return s.corrupt("idempotency key order entry %x", k)
			}
			v := kb.Get(k[8:])
			if v == nil {
				return s.corrupt("idempotency key %q: ordered but missing", k[8:])
			}
			key, err := decodeKey(v)
			if err != nil || string(keyID(key.Stream, key.Key)) != string(k[8:]) {
				return s.corrupt("idempotency key %q: undecodable record", k[8:])
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

// KeyCount returns how many idempotency keys the store holds.
func (s *Store) KeyCount() (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyKeyCount); len(v) == 8 {
			n = int(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return n, err
}
