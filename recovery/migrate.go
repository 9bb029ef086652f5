package recovery

import (
	"encoding/binary"
	"encoding/json"
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
	return meta.Put(keyVersion, u64(storeVersion))
}
