package recovery

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	bolt "go.etcd.io/bbolt"
)

// Producers are stored in three buckets (see doc.go): a small head per
// producer (epoch, last activity), one entry per (producer, stream) with
// its sequence numbers, and an index by last activity for expiry. A
// checkpoint rewrites only the entries it changed, so a producer that wrote
// to many streams costs no more per checkpoint than its changes.

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

func getHead(tx *bolt.Tx, id string) (*producerRecord, error) {
	v := tx.Bucket(bucketProducers).Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	var h producerRecord
	if err := json.Unmarshal(v, &h); err != nil || h.ID != id {
		return nil, fmt.Errorf("decode producer %s: %w: %w: undecodable record", id, ErrCorrupt, ErrProducerDamaged)
	}
	return &h, nil
}

// addProducers adds n (negative: removes) to the producer count.
func addProducers(tx *bolt.Tx, n int64) error {
	meta := tx.Bucket(bucketMeta)
	cur := int64(0)
	if v := meta.Get(keyProducerCount); len(v) == 8 {
		cur = int64(binary.BigEndian.Uint64(v))
	}
	return meta.Put(keyProducerCount, u64(uint64(max(cur+n, 0))))
}

// newHead returns the head of a producer the store does not know, at
// epoch and born there (a new incarnation), counted.
func newHead(tx *bolt.Tx, id string, epoch int64) (*producerRecord, error) {
	if err := addProducers(tx, 1); err != nil {
		return nil, err
	}
	return &producerRecord{ID: id, Epoch: epoch, Born: epoch}, nil
}

// stampEpochs records in each file its producers' epochs and
// incarnations as the store holds them now (the "prepared" record's), for
// the manifest; a producer already stamped or without a head is left.
func stampEpochs(tx *bolt.Tx, files []committer.File) error {
	for i := range files {
		f := &files[i]
		for pid := range f.Producers {
			if _, ok := f.Epochs[pid]; ok {
				continue
			}
			h, err := getHead(tx, pid)
			if err != nil {
				return err
			}
			if h == nil {
				continue
			}
			if f.Epochs == nil {
				f.Epochs = make(map[string]committer.ProducerEpoch, len(f.Producers))
			}
			f.Epochs[pid] = committer.ProducerEpoch{Epoch: h.Epoch, Incarnation: h.Born}
		}
	}
	return nil
}

// putHead writes h with its last activity at, moving its index entry.
func putHead(tx *bolt.Tx, h *producerRecord, at time.Time) error {
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
	ss, err := decodeSeq(v)
	if err != nil {
		return ss, false, fmt.Errorf("decode producer %s stream %s: %w: %w: undecodable record", pid, stream, ErrCorrupt, ErrProducerDamaged)
	}
	return ss, true, nil
}

func putSeq(tx *bolt.Tx, pid, stream string, ss StreamSeq) error {
	v, err := encodeSeq(ss)
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
		ss, err := decodeSeq(v)
		if err != nil {
			return nil, fmt.Errorf("decode producer %s stream %s: %w: %w: undecodable record", pid, k[len(pre):], ErrCorrupt, ErrProducerDamaged)
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
			if h, err = newHead(tx, id, epochFloor(tx)); err != nil {
				return err
			}
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
		return deleteHead(tx, h)
	})
	if err != nil {
		return fmt.Errorf("delete producer %s: %w", id, err)
	}
	return nil
}

// deleteHead forgets producer h: its index entry, row, count and
// sequence numbers; the epoch floor rises above its epoch, so an
// incarnation created later is told apart from it.
func deleteHead(tx *bolt.Tx, h *producerRecord) error {
	if err := tx.Bucket(bucketActive).Delete(activeKey(h.Active, h.ID)); err != nil {
		return err
	}
	if err := raiseEpochFloor(tx, h.Epoch); err != nil {
		return err
	}
	if err := tx.Bucket(bucketProducers).Delete([]byte(h.ID)); err != nil {
		return err
	}
	if err := addProducers(tx, -1); err != nil {
		return err
	}
	return deleteSeqs(tx, h.ID)
}

// raiseEpochFloor makes new producers start above epoch.
func raiseEpochFloor(tx *bolt.Tx, epoch int64) error {
	if epoch < epochFloor(tx) {
		return nil
	}
	return tx.Bucket(bucketMeta).Put(keyEpochFloor, u64(uint64(epoch)+1))
}

// ApplyForgotten forgets again, in one transaction, the producers that the
// documents say were forgotten (layout.Forgotten) and that the store holds
// as the forgotten incarnation: born at or below the epoch it had then,
// not initialised since (its epoch at most that one), with nothing
// committed after the document's checkpoint (a producer that committed or
// inited later was not forgotten: the expiry left it, or the forget failed
// after the document was published). Every document raises the epoch floor above its epochs.
// The store can be older than a forget (a copy restored, or a store
// rebuilt from manifests, which do not show forgets). It returns how many
// producers it forgot.
func (s *Store) ApplyForgotten(docs []*layout.Forgotten) (int, error) {
	n := 0
	err := s.update("apply forgotten producers", func(tx *bolt.Tx) error {
		n = 0
		for _, d := range docs {
			for id, epoch := range d.Producers {
				if err := raiseEpochFloor(tx, epoch); err != nil {
					return err
				}
				h, err := getHead(tx, id)
				if errors.Is(err, ErrProducerDamaged) {
					continue // a damaged row stays damaged: its producer answers so
				}
				if err != nil {
					return err
				}
				if h == nil || !forgottenAs(h, nil, d.After, epoch) {
					continue // forgotten already, or not the incarnation forgotten
				}
				streams, err := streamsOf(tx, id)
				if errors.Is(err, ErrProducerDamaged) {
					continue
				}
				if err != nil {
					return err
				}
				if !forgottenAs(h, streams, d.After, epoch) {
					continue
				}
				if err := deleteHead(tx, h); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("apply forgotten producers: %w", err)
	}
	return n, nil
}

// forgottenAs reports whether a document of checkpoint after naming a
// producer at epoch forgets it as the store holds it (h, its streams):
// born at or below that epoch, not initialised since (its epoch at most
// that one), nothing committed after the checkpoint. Otherwise it was
// created again since, inited since (a forget holds inits out until it
// is done), or wrote on: then it was not forgotten. The condition only
// widens as after and epoch grow, which the compaction of the documents
// relies on (layout.MergeForgotten).
func forgottenAs(h *producerRecord, streams map[string]StreamSeq, after uint64, epoch int64) bool {
	if h.Born > epoch || h.Epoch > epoch {
		return false
	}
	for _, ss := range streams {
		if ss.CommittedIn > after {
			return false
		}
	}
	return true
}

// forgets indexes documents' entries by producer.
type forgets map[string][]layout.ForgottenEntry

func forgottenIndex(docs []*layout.Forgotten) forgets {
	out := forgets{}
	for _, d := range docs {
		for id, epoch := range d.Producers {
			out[id] = append(out[id], layout.ForgottenEntry{Producer: id, After: d.After, Epoch: epoch})
		}
	}
	return out
}

// forgets reports whether ApplyForgotten with the indexed documents
// forgets the producer held as h with streams.
func (f forgets) forgets(h *producerRecord, streams map[string]StreamSeq) bool {
	for _, e := range f[h.ID] {
		if forgottenAs(h, streams, e.After, e.Epoch) {
			return true
		}
	}
	return false
}

// IdleProducers returns up to limit producers whose last activity is
// before before, oldest first, starting after the cursor after (nil: from
// the start); next is the cursor for the following call, nil at the end.
// It reads the activity index only: its cost is the batch, not the table.
func (s *Store) IdleProducers(before time.Time, after []byte, limit int) (ids []string, next []byte, err error) {
	end := activeKey(before, "")
	err = s.view(func(tx *bolt.Tx) error {
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
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketProducers).Cursor()
		var k, v []byte
		if after == "" {
			k, v = c.First()
		} else if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
			k, v = c.Next()
		}
		// The seqs bucket is in producer order too (seqKey): one cursor
		// walks beside the heads instead of a seek per producer.
		var seqs *bolt.Cursor
		var sk, sv []byte
		if k != nil {
			seqs = tx.Bucket(bucketSeqs).Cursor()
			sk, sv = seqs.Seek(seqPrefix(string(k)))
		}
		for ; k != nil; k, v = c.Next() {
			if len(out) == limit {
				next = out[len(out)-1].ID
				return nil
			}
			// A damaged producer is left out: its own calls say so
			// (ErrProducerDamaged), the list serves the rest.
			var h producerRecord
			damaged := json.Unmarshal(v, &h) != nil || h.ID != string(k)
			pre := seqPrefix(string(k))
			for sk != nil && bytes.Compare(sk, pre) < 0 {
				sk, sv = seqs.Next()
			}
			streams := map[string]StreamSeq{}
			for ; sk != nil && bytes.HasPrefix(sk, pre); sk, sv = seqs.Next() {
				ss, err := decodeSeq(sv)
				damaged = damaged || err != nil
				streams[string(sk[len(pre):])] = ss
			}
			if !damaged {
				out = append(out, Producer{ID: h.ID, Epoch: h.Epoch, Active: h.Active, Streams: streams})
			}
		}
		return nil
	})
	return out, next, err
}

// Producer returns one producer's durable state with every stream, nil
// when the store does not know it.
func (s *Store) Producer(id string) (*Producer, error) {
	out, err := viewValue(s, func(tx *bolt.Tx) (*Producer, error) { return getProducer(tx, id) })
	if err != nil {
		return nil, fmt.Errorf("read state store %s: %w", s.path, err)
	}
	return out, nil
}

// ProducerEpoch returns a producer's epoch; ok is false when the store
// does not know it. It reads one row: the engine loads a producer on its
// first write after a start, not all of them at the start.
func (s *Store) ProducerEpoch(id string) (epoch int64, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		h, err := getHead(tx, id)
		if h != nil {
			epoch, ok = h.Epoch, true
		}
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("read state store %s: %w", s.path, err)
	}
	return epoch, ok, nil
}

// ProducerActive returns a producer's epoch and last recorded activity;
// ok is false when the store does not know it. Like ProducerEpoch, it
// reads one row (not the producer's streams).
func (s *Store) ProducerActive(id string) (epoch int64, active time.Time, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		h, err := getHead(tx, id)
		if h != nil {
			epoch, active, ok = h.Epoch, h.Active, true
		}
		return err
	})
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("read state store %s: %w", s.path, err)
	}
	return epoch, active, ok, nil
}

// StreamSeq returns producer pid's durable state on stream; ok is false
// when it has none there.
func (s *Store) StreamSeq(pid, stream string) (ss StreamSeq, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		ss, ok, err = getSeq(tx, pid, stream)
		return err
	})
	if err != nil {
		return StreamSeq{}, false, fmt.Errorf("read state store %s: %w", s.path, err)
	}
	return ss, ok, nil
}

// ProducerCount returns how many producers the store holds, from a counter:
// it reads no producer.
func (s *Store) ProducerCount() (int, error) { return s.metaCount(keyProducerCount) }

// metaCount reads a counter the meta bucket keeps under key: 0 when there
// is none.
func (s *Store) metaCount(key []byte) (int, error) {
	n, err := s.metaNumber(key)
	return int(n), err
}

// epochFloor is the epoch a producer the store does not know starts at:
// above every forgotten producer's, 0 in a store that never forgot one.
func epochFloor(tx *bolt.Tx) int64 { return int64(metaUint64(tx, keyEpochFloor)) }
