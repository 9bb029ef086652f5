package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/eosink/eosink/committer"
)

// The store's own record types: what state.db holds, as JSON, with the
// names fixed here rather than borrowed from the types the rest of eosink
// uses (committer.File, Checkpoint, StreamSeq, Key). Renaming a field of
// those changes nothing on disk; a new field reaches the file only when it
// is added here and to the conversion below. Field order is the order the
// bytes have always had (encoding/json writes fields in declaration
// order): TestV2Fixture holds them to a store written before these types.

// checkpointRow is a checkpoints-bucket row, its files as F and its seqs
// as S: one declaration for the three forms below, so they cannot drift
// apart.
type checkpointRow[F, S any] struct {
	ID          uint64    `json:"id"`
	State       State     `json:"state"`
	Files       F         `json:"files,omitempty"`
	FileCount   int       `json:"file_count"`
	Records     int64     `json:"records"`
	Bytes       int64     `json:"bytes"`
	StartedAt   time.Time `json:"started_at"`
	PreparedAt  time.Time `json:"prepared_at,omitzero"`
	CommittedAt time.Time `json:"committed_at,omitzero"`
	DurationMS  int64     `json:"duration_ms"`
	Error       string    `json:"error,omitempty"`
	// Seqs: producer -> stream -> next sequence number as of the barrier.
	Seqs S `json:"seqs,omitempty"`
}

// seqsRecord is a row's seqs: producer -> stream -> next sequence number.
type seqsRecord = map[string]map[string]int64

// checkpointRecord is a checkpoints-bucket row.
type checkpointRecord = checkpointRow[[]fileRecord, seqsRecord]

// checkpointRaw is a checkpoints-bucket row with its files left encoded,
// for a change that keeps them (CommitFiles): neither decoded nor encoded
// again, in the same bytes and field order as a checkpointRecord.
type checkpointRaw = checkpointRow[json.RawMessage, seqsRecord]

// checkpointHead is a checkpoints-bucket row read without its files and
// seqs, for lists: encoding/json skips them without building them. It is
// only decoded.
type checkpointHead = checkpointRow[skipped, skipped]

// skipped decodes a value by passing over it: encoding/json hands it the
// value's bytes, which it neither copies nor parses again.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// fileRecord is a file of a checkpoint row, and an intents-bucket value.
type fileRecord struct {
	Stream  string `json:"stream"`
	Temp    string `json:"temp"`
	Final   string `json:"final"`
	Bytes   int64  `json:"bytes"`
	Records int64  `json:"records"`
	CRC32C  string `json:"crc32c"`
	// Producers: [[first, last], ...] per producer; committer.SeqRanges
	// also decodes the older single [first, last] pair.
	Producers map[string]committer.SeqRanges `json:"producers,omitempty"`
	// Epochs: each producer's epoch and incarnation at the prepared
	// record, for the manifest; absent in records written before.
	Epochs     map[string]epochRecord `json:"epochs,omitempty"`
	UploadID   string                 `json:"upload_id,omitempty"`
	Parts      []partRecord           `json:"parts,omitempty"`
	StagingKey string                 `json:"staging_key,omitempty"`
	ETag       string                 `json:"etag,omitempty"`
	// How the file is encoded (stream configuration); empty for plain.
	Format        string `json:"format,omitempty"`
	Compression   string `json:"compression,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
	Table         string `json:"table,omitempty"` // "iceberg": the file joins its stream's table at commit
	// The name a displaced file was prepared with (committed records
	// only): its manifest names it too.
	DisplacedFrom string `json:"displaced_from,omitempty"`
}

// epochRecord is one producer's committer.ProducerEpoch.
type epochRecord struct {
	Epoch       int64 `json:"epoch"`
	Incarnation int64 `json:"incarnation"`
}

// partRecord is one uploaded part of a multipart upload.
type partRecord struct {
	Number int    `json:"n"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
}

// seqRecord is a seqs-bucket value: one producer's state on one stream.
type seqRecord struct {
	NextSeq      int64  `json:"next_seq"`
	CommittedSeq int64  `json:"committed_seq"`
	CommittedIn  uint64 `json:"committed_in,omitempty"`
}

// producerRecord is a producers-bucket value (the producer's head).
type producerRecord struct {
	ID     string    `json:"producer"`
	Epoch  int64     `json:"epoch"`
	Active time.Time `json:"active,omitzero"`
	// Born is the epoch the producer was created at: its incarnation
	// (committer.ProducerEpoch). 0 in records written before it was kept,
	// which were then all of the first incarnation the manifests show.
	Born int64 `json:"born,omitempty"`
}

// producerV1Record is a producers-bucket value of a version 1 store,
// every stream in the one row; only migrate1 reads it.
type producerV1Record struct {
	ID      string               `json:"producer"`
	Epoch   int64                `json:"epoch"`
	Streams map[string]seqRecord `json:"streams"`
}

// keyV2Record is an idem_keys value of a version 2 store; only migrate2
// reads it. Version 3 keeps keys as binary rows (keys.go).
type keyV2Record struct {
	Stream     string    `json:"stream"`
	Key        string    `json:"key"`
	Hash       [32]byte  `json:"hash"`
	Checkpoint uint64    `json:"checkpoint"`
	At         time.Time `json:"at"`
}

func encodeCheckpoint(c *Checkpoint) ([]byte, error) {
	r := checkpointRecord{ID: c.ID, State: c.State, FileCount: c.FileCount, Records: c.Records, Bytes: c.Bytes,
		StartedAt: c.StartedAt, PreparedAt: c.PreparedAt, CommittedAt: c.CommittedAt, DurationMS: c.DurationMS,
		Error: c.Error, Seqs: c.Seqs}
	if c.Files != nil {
		r.Files = make([]fileRecord, len(c.Files))
		for i := range c.Files {
			r.Files[i] = fileToRecord(&c.Files[i])
		}
	}
	return json.Marshal(&r)
}

func decodeCheckpointRaw(v []byte) (*checkpointRaw, error) {
	var r checkpointRaw
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// encodeCheckpointRaw encodes r in the bytes json.Marshal writes, without
// json.Marshal's pass over the files: it would validate and compact them,
// and a row of 10,000 files is megabytes that came out of json.Marshal and
// the store already (a start re-committing such a checkpoint spent tens of
// milliseconds there). The row is encoded without its files and they are
// put back where the field order puts them: right after "state", before
// "file_count", which has no omitempty and so always follows.
func encodeCheckpointRaw(r *checkpointRaw) ([]byte, error) {
	files := r.Files
	if len(files) == 0 {
		return json.Marshal(r)
	}
	head := *r
	head.Files = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	i := bytes.Index(b, []byte(`,"file_count":`))
	if i < 0 {
		return nil, errors.New("encode checkpoint row: no file_count field")
	}
	out := make([]byte, 0, len(b)+len(files)+len(`,"files":`))
	out = append(out, b[:i]...)
	out = append(out, `,"files":`...)
	out = append(out, files...)
	return append(out, b[i:]...), nil
}

func decodeCheckpoint(v []byte) (*Checkpoint, error) {
	var r checkpointRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, err
	}
	c := &Checkpoint{ID: r.ID, State: r.State, FileCount: r.FileCount, Records: r.Records, Bytes: r.Bytes,
		StartedAt: r.StartedAt, PreparedAt: r.PreparedAt, CommittedAt: r.CommittedAt, DurationMS: r.DurationMS,
		Error: r.Error, Seqs: r.Seqs}
	if r.Files != nil {
		c.Files = make([]committer.File, len(r.Files))
		for i := range r.Files {
			c.Files[i] = r.Files[i].file()
		}
	}
	return c, nil
}

func fileToRecord(f *committer.File) fileRecord {
	r := fileRecord{Stream: f.Stream, Temp: f.Temp, Final: f.Final, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C,
		Producers: f.Producers, UploadID: f.UploadID, StagingKey: f.StagingKey, ETag: f.ETag,
		Format: f.Format, Compression: f.Compression, SchemaVersion: f.SchemaVersion, Table: f.Table, DisplacedFrom: f.DisplacedFrom}
	if f.Epochs != nil {
		r.Epochs = make(map[string]epochRecord, len(f.Epochs))
		for p, e := range f.Epochs {
			r.Epochs[p] = epochRecord{Epoch: e.Epoch, Incarnation: e.Incarnation}
		}
	}
	if f.Parts != nil {
		r.Parts = make([]partRecord, len(f.Parts))
		for i, p := range f.Parts {
			r.Parts[i] = partRecord{Number: p.Number, ETag: p.ETag, Size: p.Size}
		}
	}
	return r
}

func (r *fileRecord) file() committer.File {
	f := committer.File{Stream: r.Stream, Temp: r.Temp, Final: r.Final, Bytes: r.Bytes, Records: r.Records, CRC32C: r.CRC32C,
		Producers: r.Producers, UploadID: r.UploadID, StagingKey: r.StagingKey, ETag: r.ETag,
		Format: r.Format, Compression: r.Compression, SchemaVersion: r.SchemaVersion, Table: r.Table, DisplacedFrom: r.DisplacedFrom}
	if r.Epochs != nil {
		f.Epochs = make(map[string]committer.ProducerEpoch, len(r.Epochs))
		for p, e := range r.Epochs {
			f.Epochs[p] = committer.ProducerEpoch{Epoch: e.Epoch, Incarnation: e.Incarnation}
		}
	}
	if r.Parts != nil {
		f.Parts = make([]committer.Part, len(r.Parts))
		for i, p := range r.Parts {
			f.Parts[i] = committer.Part{Number: p.Number, ETag: p.ETag, Size: p.Size}
		}
	}
	return f
}

func encodeFile(f *committer.File) ([]byte, error) {
	r := fileToRecord(f)
	return json.Marshal(&r)
}

func decodeFile(v []byte) (committer.File, error) {
	var r fileRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return committer.File{}, err
	}
	return r.file(), nil
}

func encodeSeq(s StreamSeq) ([]byte, error) {
	return json.Marshal(seqRecord{NextSeq: s.NextSeq, CommittedSeq: s.CommittedSeq, CommittedIn: s.CommittedIn})
}

func decodeSeq(v []byte) (StreamSeq, error) {
	var r seqRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return StreamSeq{}, err
	}
	return StreamSeq{NextSeq: r.NextSeq, CommittedSeq: r.CommittedSeq, CommittedIn: r.CommittedIn}, nil
}

func decodeKeyV2(v []byte) (keyV2Record, error) {
	var r keyV2Record
	err := json.Unmarshal(v, &r)
	return r, err
}
