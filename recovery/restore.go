package recovery

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RestoreProducers raises producers' sequence state to committed (per
// producer and stream), of whatever incarnation the store holds: Restore
// without what a rebuild knows of incarnations and epochs.
func (s *Store) RestoreProducers(committed map[string]map[string]StreamSeq) error {
	rb := &Rebuilt{Producers: make(map[string]*RebuiltProducer, len(committed))}
	for id, streams := range committed {
		rb.Producers[id] = &RebuiltProducer{Incarnation: -1, Streams: streams}
	}
	return s.Restore(rb)
}

// Restore brings producers up to what the destination shows committed
// (Rebuild), in one transaction:
//
//   - a producer the store lacks is created at the highest epoch the
//     manifests record for it, so a client fenced before the loss stays
//     fenced (I6); a client whose epoch is newer gets invalid_epoch and
//     inits again, which returns next_seq after everything committed;
//   - a producer the store holds as an older incarnation than the
//     manifests' newest (the store is an older copy, from before it was
//     forgotten and created again) takes the newer incarnation's state;
//   - of the same incarnation, sequence numbers are raised and the epoch
//     is at least the manifests'; a newer incarnation in the store (created
//     after the last manifest) is kept as it is.
//
// The epoch floor (where producers the store does not know start) is
// raised above every epoch the manifests record. State the store has
// beyond the destination's is kept.
func (s *Store) Restore(rb *Rebuilt) error {
	now := time.Now()
	forgets := forgottenIndex(rb.Forgotten)
	err := s.update("restore producers", func(tx *bolt.Tx) error {
		if err := putParked(tx, rb.Parked); err != nil {
			return err
		}
		for id, rp := range rb.Producers {
			h, err := getHead(tx, id)
			if err != nil {
				return err
			}
			changed := true
			switch {
			case h == nil:
				// Created as below, then forgotten by ApplyForgotten
				// with rb.Forgotten: never created (the floor is raised
				// by ApplyForgotten as for a forget).
				born := &producerRecord{ID: id, Epoch: rp.Epoch, Born: max(rp.Incarnation, 0)}
				if forgets.forgets(born, restoredSeqs(rp.Streams)) {
					continue
				}
				if h, err = newHead(tx, id, rp.Epoch); err != nil {
					return err
				}
				h.Born = max(rp.Incarnation, 0)
			case rp.Incarnation < 0 || rp.Incarnation == h.Born:
				changed = rp.Epoch > h.Epoch
				h.Epoch = max(h.Epoch, rp.Epoch)
			case rp.Incarnation > h.Born:
				// The store's incarnation was forgotten after this copy
				// of the store was taken: its sequence numbers are not the
				// producer's any more.
				if err := deleteSeqs(tx, id); err != nil {
					return err
				}
				h.Born, h.Epoch = rp.Incarnation, max(h.Epoch, rp.Epoch)
			default:
				continue // the store's is newer than anything committed
			}
			if changed {
				// Active from now, so expiry counts its idle time from the rebuild.
				if err := putHead(tx, h, now); err != nil {
					return err
				}
			}
			for stream, c := range rp.Streams {
				cur, ok, err := getSeq(tx, id, stream)
				if err != nil {
					return err
				}
				if !ok {
					cur = NewStreamSeq()
				}
				raised := cur.Restored(c)
				if ok && raised == cur {
					continue
				}
				if err := putSeq(tx, id, stream, raised); err != nil {
					return err
				}
			}
		}
		if len(rb.Producers) > 0 && rb.MaxEpoch >= epochFloor(tx) {
			return tx.Bucket(bucketMeta).Put(keyEpochFloor, u64(uint64(rb.MaxEpoch)+1))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore producers: %w", err)
	}
	return nil
}

// deleteSeqs removes every stream entry of producer pid.
func deleteSeqs(tx *bolt.Tx, pid string) error {
	pre := seqPrefix(pid)
	var keys [][]byte
	c := tx.Bucket(bucketSeqs).Cursor()
	for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := tx.Bucket(bucketSeqs).Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// restoredSeqs returns the stream state Restore gives a producer the
// store lacks.
func restoredSeqs(committed map[string]StreamSeq) map[string]StreamSeq {
	out := make(map[string]StreamSeq, len(committed))
	for stream, c := range committed {
		out[stream] = NewStreamSeq().Restored(c)
	}
	return out
}
