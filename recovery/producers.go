package recovery

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Producers are stored in three buckets (see doc.go): a small head per
// producer (epoch, last activity), one entry per (producer, stream) with
// its sequence numbers, and an index by last activity for expiry. A
// checkpoint rewrites only the entries it changed, so a producer that wrote
// to many streams costs no more per checkpoint than its changes.

// producerHead is a producer's row in the producers bucket.
type producerHead struct {
	ID     string    `json:"producer"`
	Epoch  int64     `json:"epoch"`
	Active time.Time `json:"active,omitzero"`
}

// seqKey is the seqs-bucket key of (producer, stream). Neither name can
// hold a NUL, and NUL sorts first, so a producer's entries are contiguous
// and in the producers' order.
func seqKey(pid, stream string) []byte {
	k := make([]byte, 0, len(pid)+1+len(stream))
	k = append(k, pid...)
	k = append(k, 0)
	return append(k, stream...)
}

func seqPrefix(pid string) []byte { return append([]byte(pid), 0) }

// activeKey is the active-bucket key: the last activity in Unix
// nanoseconds (8 bytes big-endian), then the producer id.
func activeKey(at time.Time, pid string) []byte {
	k := make([]byte, 8, 8+len(pid))
	binary.BigEndian.PutUint64(k, uint64(max(at.UnixNano(), 0)))
	return append(k, pid...)
}

func getHead(tx *bolt.Tx, id string) (*producerHead, error) {
	v := tx.Bucket(bucketProducers).Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	var h producerHead
	if err := json.Unmarshal(v, &h); err != nil || h.ID != id {
		return nil, fmt.Errorf("decode producer %s: %w: undecodable record", id, ErrCorrupt)
	}
	return &h, nil
}

// putHead writes h with its last activity at, moving its index entry.
func putHead(tx *bolt.Tx, h *producerHead, at time.Time) error {
	idx := tx.Bucket(bucketActive)
	if !h.Active.IsZero() {
		if err := idx.Delete(activeKey(h.Active, h.ID)); err != nil {
			return err
		}
	}
	h.Active = at.UTC()
	v, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode producer %s: %w", h.ID, err)
	}
	if err := tx.Bucket(bucketProducers).Put([]byte(h.ID), v); err != nil {
		return fmt.Errorf("put producer %s: %w", h.ID, err)
	}
	return idx.Put(activeKey(h.Active, h.ID), nil)
}

func getSeq(tx *bolt.Tx, pid, stream string) (StreamSeq, bool, error) {
	v := tx.Bucket(bucketSeqs).Get(seqKey(pid, stream))
	if v == nil {
		return StreamSeq{}, false, nil
	}
	var ss StreamSeq
	if err := json.Unmarshal(v, &ss); err != nil {
		return ss, false, fmt.Errorf("decode producer %s stream %s: %w: undecodable record", pid, stream, ErrCorrupt)
	}
	return ss, true, nil
}

func putSeq(tx *bolt.Tx, pid, stream string, ss StreamSeq) error {
	v, err := json.Marshal(ss)
	if err != nil {
		return fmt.Errorf("encode producer %s stream %s: %w", pid, stream, err)
	}
	return tx.Bucket(bucketSeqs).Put(seqKey(pid, stream), v)
}

// streamsOf reads every stream entry of producer pid.
func streamsOf(tx *bolt.Tx, pid string) (map[string]StreamSeq, error) {
	out := map[string]StreamSeq{}
	pre := seqPrefix(pid)
	c := tx.Bucket(bucketSeqs).Cursor()
	for k, v := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, v = c.Next() {
		var ss StreamSeq
		if err := json.Unmarshal(v, &ss); err != nil {
			return nil, fmt.Errorf("decode producer %s stream %s: %w: undecodable record", pid, k[len(pre):], ErrCorrupt)
		}
		out[string(k[len(pre):])] = ss
	}
	return out, nil
}

// getProducer returns a producer with every stream, nil when unknown.
func getProducer(tx *bolt.Tx, id string) (*Producer, error) {
	h, err := getHead(tx, id)
	if err != nil || h == nil {
		return nil, err
	}
	streams, err := streamsOf(tx, id)
	if err != nil {
		return nil, err
	}
	return &Producer{ID: h.ID, Epoch: h.Epoch, Active: h.Active, Streams: streams}, nil
}

// InitProducer durably bumps the producer's epoch (creating it at epoch 0)
// and returns its state; its last activity is now.
func (s *Store) InitProducer(id string) (*Producer, error) { return s.InitProducerAt(id, time.Now()) }

// InitProducerAt is InitProducer with the time of its activity.
func (s *Store) InitProducerAt(id string, at time.Time) (*Producer, error) {
	var out *Producer
	err := s.update("init producer", func(tx *bolt.Tx) error {
		h, err := getHead(tx, id)
		if err != nil {
			return err
		}
		if h == nil {
			h = &producerHead{ID: id, Epoch: epochFloor(tx)}
		} else {
			h.Epoch++
		}
		if err := putHead(tx, h, at); err != nil {
			return err
		}
		streams, err := streamsOf(tx, id)
		if err != nil {
			return err
		}
		out = &Producer{ID: id, Epoch: h.Epoch, Active: h.Active, Streams: streams}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("init producer %s: %w", id, err)
	}
	return out, nil
}

// DeleteProducer forgets a producer: its epoch, every stream's sequence
// numbers and its index entry. Unknown is ErrNotFound. The caller makes
// sure nothing of it is uncommitted.
func (s *Store) DeleteProducer(id string) error { return s.DeleteProducerIdle(id, time.Time{}) }

// DeleteProducerIdle is DeleteProducer, refused with ErrNotIdle when
// idleBefore is not zero and the producer's last activity is not before it.
func (s *Store) DeleteProducerIdle(id string, idleBefore time.Time) error {
	err := s.update("delete producer", func(tx *bolt.Tx) error {
		h, err := getHead(tx, id)
		if err != nil {
			return err
		}
		if h == nil {
			return fmt.Errorf("producer %s: %w", id, ErrNotFound)
		}
		if !idleBefore.IsZero() && !h.Active.Before(idleBefore) {
			return fmt.Errorf("producer %s active at %s: %w", id, h.Active.Format(time.RFC3339), ErrNotIdle)
		}
		if err := tx.Bucket(bucketActive).Delete(activeKey(h.Active, id)); err != nil {
			return err
		}
		if h.Epoch >= epochFloor(tx) {
			if err := tx.Bucket(bucketMeta).Put(keyEpochFloor, u64(uint64(h.Epoch)+1)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketProducers).Delete([]byte(id)); err != nil {
			return err
		}
		pre := seqPrefix(id)
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
	})
	if err != nil {
		return fmt.Errorf("delete producer %s: %w", id, err)
	}
	return nil
}

// IdleProducers returns up to limit producers whose last activity is
// before before, oldest first, starting after the cursor after (nil: from
// the start); next is the cursor for the following call, nil at the end.
// It reads the activity index only: its cost is the batch, not the table.
func (s *Store) IdleProducers(before time.Time, after []byte, limit int) (ids []string, next []byte, err error) {
	end := activeKey(before, "")
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketActive).Cursor()
		k, _ := c.First()
		if after != nil {
			if k, _ = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, _ = c.Next()
			}
		}
		for ; k != nil && bytes.Compare(k, end) < 0; k, _ = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("read state store %s: %w: activity key %x", s.path, ErrCorrupt, k)
			}
			if len(ids) == limit {
				return nil
			}
			ids = append(ids, string(k[8:]))
			next = bytes.Clone(k)
		}
		next = nil
		return nil
	})
	return ids, next, err
}

// ProducersPage returns up to limit producers with ids after after, in
// id order, and the cursor of the next page ("" at the end). It reads one
// page, not the table.
func (s *Store) ProducersPage(after string, limit int) ([]Producer, string, error) {
	var out []Producer
	next := ""
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketProducers).Cursor()
		var k, v []byte
		if after == "" {
			k, v = c.First()
		} else if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			if len(out) == limit {
				next = out[len(out)-1].ID
				return nil
			}
			var h producerHead
			if err := json.Unmarshal(v, &h); err != nil || h.ID != string(k) {
				return fmt.Errorf("read state store %s: %w: producer %q: undecodable record", s.path, ErrCorrupt, k)
			}
			streams, err := streamsOf(tx, h.ID)
			if err != nil {
				return fmt.Errorf("read state store %s: %w", s.path, err)
			}
			out = append(out, Producer{ID: h.ID, Epoch: h.Epoch, Active: h.Active, Streams: streams})
		}
		return nil
	})
	return out, next, err
}

// Producers returns every producer's durable state, sorted by id. Recovery
// reads it once at start; an undecodable row is an error wrapping
// ErrCorrupt that names the file.
func (s *Store) Producers() ([]Producer, error) {
	var out []Producer
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketProducers).ForEach(func(k, v []byte) error {
			var h producerHead
			if err := json.Unmarshal(v, &h); err != nil || h.ID != string(k) {
				return fmt.Errorf("producer %q: undecodable record", k)
			}
			out = append(out, Producer{ID: h.ID, Epoch: h.Epoch, Active: h.Active, Streams: map[string]StreamSeq{}})
			return nil
		}); err != nil {
			return err
		}
		// Heads and stream entries are in the same order: one pass each.
		i := 0
		return tx.Bucket(bucketSeqs).ForEach(func(k, v []byte) error {
			n := bytes.IndexByte(k, 0)
			if n < 0 {
				return fmt.Errorf("stream entry %q: bad key", k)
			}
			pid := string(k[:n])
			for i < len(out) && out[i].ID < pid {
				i++
			}
			if i == len(out) || out[i].ID != pid {
				return fmt.Errorf("stream entry %q: no such producer", k)
			}
			var ss StreamSeq
			if err := json.Unmarshal(v, &ss); err != nil {
				return fmt.Errorf("producer %s stream %s: undecodable record", pid, k[n+1:])
			}
			out[i].Streams[string(k[n+1:])] = ss
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read state store %s: %w: %w", s.path, ErrCorrupt, err)
	}
	return out, nil
}

// epochFloor is the epoch a producer the store does not know starts at:
// above every forgotten producer's, 0 in a store that never forgot one.
func epochFloor(tx *bolt.Tx) int64 {
	if v := tx.Bucket(bucketMeta).Get(keyEpochFloor); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}
