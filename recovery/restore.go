package recovery

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RestoreProducers raises producers' sequence state to what the
// destination shows committed (Rebuild), in one transaction. A producer the
// store lacks is created at epoch 0: its epoch is not in the destination,
// so its client gets invalid_epoch and must init again, which returns
// next_seq after everything committed — a resend of a committed batch is
// then a duplicate. State the store has beyond the destination's is kept.
func (s *Store) RestoreProducers(committed map[string]map[string]StreamSeq) error {
	now := time.Now()
	err := s.update("restore producers", func(tx *bolt.Tx) error {
		for id, streams := range committed {
			h, err := getHead(tx, id)
			if err != nil {
				return err
			}
			if h == nil {
				// Active from now, so expiry counts its idle time from the rebuild.
				if h, err = newHead(tx, id, 0); err != nil {
					return err
				}
				if err := putHead(tx, h, now); err != nil {
					return err
				}
			}
			for stream, c := range streams {
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
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore producers: %w", err)
	}
	return nil
}
