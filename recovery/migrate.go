package recovery

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// migrate1 turns a version 1 store into version 2, in the open
// transaction, once: producer rows holding every stream become a head
// plus one entry per (producer, stream), indexed by activity (now, so the
// expiry window starts at the upgrade); prepared checkpoints enter the
// pending index; the newest committed id moves to meta; rows beyond the
// retention are left for the next commit's prune. Every row it reads is
// checked, as version 1's open did.
func (s *Store) migrate1(tx *bolt.Tx) error {
	now := time.Now()
	var old []producerV1Record
	if err := tx.Bucket(bucketProducers).ForEach(func(k, v []byte) error {
		var p producerV1Record
		if err := json.Unmarshal(v, &p); err != nil || p.ID != string(k) {
			return s.corrupt("producer %q: undecodable record", k)
		}
		old = append(old, p)
		return nil
	}); err != nil {
		return err
	}
	for i := range old {
		p := &old[i]
		if err := putHead(tx, &producerRecord{ID: p.ID, Epoch: p.Epoch}, now); err != nil {
			return err
		}
		for stream, ss := range p.Streams {
			if err := putSeq(tx, p.ID, stream, StreamSeq{NextSeq: ss.NextSeq, CommittedSeq: ss.CommittedSeq, CommittedIn: ss.CommittedIn}); err != nil {
				return err
			}
		}
	}
	pending := tx.Bucket(bucketPending)
	var committed uint64
	if err := tx.Bucket(bucketCheckpoints).ForEach(func(k, v []byte) error {
		c, err := s.checkRow(k, v)
		if err != nil {
			return err
		}
		switch c.State {
		case Prepared:
			return pending.Put(k, nil)
		case Committed:
			committed = max(committed, binary.BigEndian.Uint64(k))
		}
		return nil
	}); err != nil {
		return err
	}
	meta := tx.Bucket(bucketMeta)
	if committed > 0 {
		if err := meta.Put(keyLastCommitted, u64(committed)); err != nil {
			return err
		}
	}
	return meta.Put(keyVersion, u64(2))
}

// migrate2 turns a version 2 store into version 3, in the open
// transaction, once: the idempotency keys, JSON rows by (stream, key)
// with an index by age (idem_keys, idem_order), become the binary rows of
// the one idem bucket (keys.go). Their id is the empty scope's: keys were
// not scoped by token before version 3, so a key recorded before the
// upgrade is matched by writes without tokens only. Their body hash is
// the first 16 bytes of the SHA-256 recorded. Every row is checked, as a
// start of version 2 read them; the old buckets are deleted.
func (s *Store) migrate2(tx *bolt.Tx) error {
	kb, ob := tx.Bucket(bucketKeysV2), tx.Bucket(bucketKeyOrderV2)
	if kb != nil && ob != nil {
		nb, err := tx.CreateBucketIfNotExists(bucketKeyLog)
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketKeyLog, err)
		}
		nb.FillPercent = 1
		n := uint64(0)
		c := ob.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				return s.corrupt("idempotency key order entry %x", k)
			}
			v := kb.Get(k[8:])
			if v == nil {
				return s.corrupt("idempotency key %q: ordered but missing", k[8:])
			}
			r, err := decodeKeyV2(v)
			if err != nil || r.Stream+"\x00"+r.Key != string(k[8:]) {
				return s.corrupt("idempotency key %q: undecodable record", k[8:])
			}
			key := Key{ID: KeyID("", r.Stream, r.Key), Checkpoint: r.Checkpoint, At: r.At}
			copy(key.Hash[:], r.Hash[:])
			rk, rv := keyRow(&key)
			if nb.Get(rk) == nil {
				n++
			}
			if err := nb.Put(rk, rv); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketMeta).Put(keyKeyCount, u64(n)); err != nil {
			return err
		}
	}
	for _, name := range [][]byte{bucketKeysV2, bucketKeyOrderV2} {
		if tx.Bucket(name) != nil {
			if err := tx.DeleteBucket(name); err != nil {
				return fmt.Errorf("delete bucket %s: %w", name, err)
			}
		}
	}
	return tx.Bucket(bucketMeta).Put(keyVersion, u64(storeVersion))
}
