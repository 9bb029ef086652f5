package recovery

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// RestoreProducers raises producers' sequence state to what the
// destination shows committed (Rebuild), in one transaction. A producer the
// store lacks is created at epoch 0: its epoch is not in the destination,
// so its client gets invalid_epoch and must init again, which returns
// next_seq after everything committed — a resend of a committed batch is
// then a duplicate. State the store has beyond the destination's is kept.
func (s *Store) RestoreProducers(committed map[string]map[string]StreamSeq) error {
	err := s.update("restore producers", func(tx *bolt.Tx) error {
		for id, streams := range committed {
			p, err := getProducer(tx, id)
			if err != nil {
				return err
			}
			if p == nil {
				p = &Producer{ID: id, Streams: map[string]StreamSeq{}}
			}
			changed := false
			for stream, c := range streams {
				cur, ok := p.Streams[stream]
				if ok && cur.CommittedSeq >= c.CommittedSeq {
					continue
				}
				if !ok {
					cur.NextSeq = 0
				}
				cur.CommittedSeq, cur.CommittedIn = c.CommittedSeq, c.CommittedIn
				cur.NextSeq = max(cur.NextSeq, c.CommittedSeq+1)
				p.Streams[stream] = cur
				changed = true
			}
			if changed {
				if err := putProducer(tx, p); err != nil {
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
