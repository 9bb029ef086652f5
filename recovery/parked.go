package recovery

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/eosink/eosink/committer"
	bolt "go.etcd.io/bbolt"
)

// Parked tables (docs/tables.md "Parked tables"): a table stream whose
// table commit fails for good (table metadata planted in the destination,
// a schema the stream can't take) does not hold back the node's other
// streams. Its checkpoint is recorded committed (its files and manifest
// are in the destination) and, in the same transaction, its table commit
// is kept here as a row (stream, checkpoint) with the stream's files; the
// stream's later checkpoints are appended behind it, never committed to
// the table ahead of it. The engine retries the rows in checkpoint order
// and deletes each once its table holds it.

var bucketParked = []byte("parked")

// Parked is one stream's table commit of one checkpoint, set aside.
type Parked struct {
	Stream     string
	Checkpoint uint64
	// Files are the checkpoint's files of the stream, as committed (a
	// displaced one under its displaced name): what the table commit takes.
	Files []committer.File
	// Error is why it was parked: the table commit's error, or that an
	// earlier checkpoint of the stream is parked.
	Error string
	At    time.Time
}

type parkedRecord struct {
	Files []fileRecord `json:"files"`
	Error string       `json:"error"`
	At    time.Time    `json:"at"`
}

func parkedKey(stream string, checkpoint uint64) []byte {
	k := make([]byte, 0, len(stream)+9)
	k = append(k, stream...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, checkpoint)
}

// putParked writes rows in tx, creating the bucket on first use (a store
// with no parked table has none: a start writes nothing for it).
func putParked(tx *bolt.Tx, rows []Parked) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketParked)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketParked, err)
	}
	for _, p := range rows {
		r := parkedRecord{Error: p.Error, At: p.At.UTC(), Files: make([]fileRecord, len(p.Files))}
		for i := range p.Files {
			r.Files[i] = fileToRecord(&p.Files[i])
		}
		v, err := json.Marshal(&r)
		if err != nil {
			return fmt.Errorf("encode parked table commit %s/%d: %w", p.Stream, p.Checkpoint, err)
		}
		if err := b.Put(parkedKey(p.Stream, p.Checkpoint), v); err != nil {
			return err
		}
	}
	return nil
}

// Parked returns every parked table commit, by stream and, within a
// stream, in checkpoint order: the order they must land in.
func (s *Store) Parked() ([]Parked, error) {
	return viewValue(s, func(tx *bolt.Tx) ([]Parked, error) {
		b := tx.Bucket(bucketParked)
		if b == nil {
			return nil, nil
		}
		var out []Parked
		err := b.ForEach(func(k, v []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 1 || len(k) != i+9 {
				return fmt.Errorf("%w: parked table commit key %x", ErrCorrupt, k)
			}
			var r parkedRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("%w: parked table commit %s/%d: %v", ErrCorrupt, k[:i], binary.BigEndian.Uint64(k[i+1:]), err)
			}
			p := Parked{Stream: string(k[:i]), Checkpoint: binary.BigEndian.Uint64(k[i+1:]), Error: r.Error, At: r.At,
				Files: make([]committer.File, len(r.Files))}
			for j := range r.Files {
				p.Files[j] = r.Files[j].file()
			}
			out = append(out, p)
			return nil
		})
		return out, err
	})
}

// ParkedStreams returns the streams with a parked table commit (keys
// only: nothing is decoded).
func (s *Store) ParkedStreams() (map[string]bool, error) {
	return viewValue(s, func(tx *bolt.Tx) (map[string]bool, error) {
		b := tx.Bucket(bucketParked)
		if b == nil {
			return nil, nil
		}
		out := map[string]bool{}
		err := b.ForEach(func(k, _ []byte) error {
			if i := bytes.IndexByte(k, 0); i > 0 {
				out[string(k[:i])] = true
			}
			return nil
		})
		return out, err
	})
}

// Unpark deletes the parked table commit of stream's checkpoint: its
// table holds it now.
func (s *Store) Unpark(stream string, checkpoint uint64) error {
	return s.update("unpark", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketParked)
		if b == nil {
			return nil
		}
		return b.Delete(parkedKey(stream, checkpoint))
	})
}

// Park records rows parked on their own, for a rebuild whose store holds
// the checkpoints committed already (Restore takes them with the
// producers instead).
func (s *Store) Park(rows ...Parked) error {
	return s.update("park", func(tx *bolt.Tx) error { return putParked(tx, rows) })
}
