package api

import (
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/server"
)

// ErrorResponse is the body of every error: {"error": code, "message": ...}
// plus the fields some codes carry.
type ErrorResponse struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	// Line is the 1-based line of an invalid_json or too_large body.
	Line int `json:"line,omitempty"`
	// ExpectedSeq is the sequence number to resend from
	// (out_of_order_sequence, aborted).
	ExpectedSeq *int64 `json:"expected_seq,omitempty"`
	// Checkpoint is the checkpoint that aborted (aborted).
	Checkpoint uint64 `json:"checkpoint,omitempty"`
	// Field names the offending field: of a stream configuration
	// (invalid_body of PUT /v1/streams/{stream}, e.g.
	// "schema.fields[2].type"), or of a record (invalid_partition,
	// schema_mismatch).
	Field string `json:"field,omitempty"`
}

// WriteResponse answers POST /v1/streams/{stream}/records.
type WriteResponse struct {
	Stream     string `json:"stream"`
	Checkpoint uint64 `json:"checkpoint"`
	Records    int    `json:"records"`
	Bytes      int    `json:"bytes"`
	Duplicate  bool   `json:"duplicate"`
	Committed  bool   `json:"committed"`
	NextSeq    int64  `json:"next_seq"` // 0 without a producer
}

// StreamSeq is a producer's sequence state on one stream.
type StreamSeq struct {
	NextSeq      int64 `json:"next_seq"`
	CommittedSeq int64 `json:"committed_seq"` // -1 when none
}

// Producer is a producer's state.
type Producer struct {
	Producer string               `json:"producer"`
	Epoch    int64                `json:"epoch"`
	Streams  map[string]StreamSeq `json:"streams"`
	Fenced   int64                `json:"fenced"` // writes refused for an old epoch since start
}

// ProducerList answers GET /v1/producers.
type ProducerList struct {
	Producers []Producer `json:"producers"`
	// Next is the cursor of the following page (after=), "" after the last.
	Next string `json:"next"`
}

// CheckpointFile is one file of a checkpoint.
type CheckpointFile struct {
	Path    string `json:"path"` // relative to the destination
	Stream  string `json:"stream"`
	Bytes   int64  `json:"bytes"`
	Records int64  `json:"records"`
	CRC32C  string `json:"crc32c,omitempty"`
}

// Checkpoint states beyond recovery's: the open checkpoint taking writes,
// and one between its barrier and its "prepared" record.
const (
	StateOpen    = catalog.Open
	StateRunning = catalog.Running
)

// Checkpoint is one checkpoint. Files is absent in lists and holds [] when
// the store has pruned the file list (FileCount still counts them).
type Checkpoint struct {
	ID          uint64           `json:"id"`
	State       string           `json:"state"` // open, running, prepared, committed, aborted
	Files       []CheckpointFile `json:"files,omitzero"`
	FileCount   int              `json:"file_count"`
	Records     int64            `json:"records"`
	Bytes       int64            `json:"bytes"`
	DurationMS  int64            `json:"duration_ms"`
	StartedAt   time.Time        `json:"started_at,omitzero"`
	PreparedAt  time.Time        `json:"prepared_at,omitzero"`
	CommittedAt time.Time        `json:"committed_at,omitzero"`
	Error       string           `json:"error,omitempty"`
}

// CheckpointList answers GET /v1/checkpoints.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
	Next        string       `json:"next"` // ?after= of the next page; empty on the last
}

// File is one committed file of the destination.
type File struct {
	Path       string    `json:"path"`
	Bytes      int64     `json:"bytes"`
	Records    *int64    `json:"records,omitempty"`    // absent if its manifest is not readable
	Checkpoint *uint64   `json:"checkpoint,omitempty"` // absent if the name holds none
	Node       string    `json:"node,omitempty"`       // the node that wrote it, from its name; absent if none
	Modified   time.Time `json:"modified"`
}

// FileList answers GET /v1/files.
type FileList struct {
	Files []File `json:"files"`
	Next  string `json:"next"` // ?after= of the next page; empty on the last
}

// Stream is one stream with counts over its committed files.
type Stream struct {
	Name    string `json:"name"`
	Files   int    `json:"files"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
}

// StreamList answers GET /v1/streams.
type StreamList struct {
	Streams []Stream `json:"streams"`
	Next    string   `json:"next"` // ?after= of the next page; empty on the last
}

// Status answers /healthz and /readyz when all is well.
type Status struct {
	Status string `json:"status"`
}

func producerFrom(p server.ProducerState) Producer {
	out := Producer{Producer: p.ID, Epoch: p.Epoch, Fenced: p.Fenced, Streams: make(map[string]StreamSeq, len(p.Streams))}
	for s, ss := range p.Streams {
		out.Streams[s] = StreamSeq{NextSeq: ss.NextSeq, CommittedSeq: ss.CommittedSeq}
	}
	return out
}

func filesFrom(fs []committer.File) []CheckpointFile {
	out := make([]CheckpointFile, 0, len(fs))
	for _, f := range fs {
		out = append(out, CheckpointFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C})
	}
	return out
}

func checkpointFromResult(r server.CheckpointResult) Checkpoint {
	files := filesFrom(r.Files)
	return Checkpoint{ID: r.ID, State: string(r.State), Files: files, FileCount: len(files), Records: r.Records,
		Bytes: r.Bytes, DurationMS: r.DurationMS, Error: r.Error}
}

// liveOf is what the catalog needs of the engine's status to tell open and
// running checkpoints.
func liveOf(st server.Status) catalog.Live {
	return catalog.Live{Ready: st.Ready, OpenID: st.OpenID, OpenFiles: st.OpenFiles, OpenRecords: st.OpenRecords,
		OpenBytes: st.OpenBytes, LastDone: st.LastDone, FirstID: st.FirstID}
}

// checkpointFrom is the wire form of a checkpoint of the catalog: a stored
// one, the open one (its counts so far) or a running one.
func checkpointFrom(c *catalog.Checkpoint, withFiles bool) Checkpoint {
	out := Checkpoint{ID: c.ID, State: c.State, FileCount: c.FileCount, Records: c.Records,
		Bytes: c.Bytes, DurationMS: c.DurationMS, StartedAt: c.StartedAt, PreparedAt: c.PreparedAt,
		CommittedAt: c.CommittedAt, Error: c.Error}
	if withFiles {
		out.Files = filesFrom(c.Files)
	}
	return out
}

// CommitFile is one file of a commit of the feed.
type CommitFile struct {
	Path    string `json:"path"`
	Stream  string `json:"stream"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
}

// Commit is one committed checkpoint of one node, as the feed gives it.
type Commit struct {
	Node        string       `json:"node"`
	Checkpoint  uint64       `json:"checkpoint"`
	CommittedAt *time.Time   `json:"committed_at,omitempty"` // absent when its manifest is too large to read
	Manifest    string       `json:"manifest"`               // its manifest's path, under /v1/files/
	Files       []CommitFile `json:"files"`
	// FileCount is how many files it has (of ?stream=); absent when its
	// manifest is too large to read.
	FileCount *int `json:"file_count,omitempty"`
	// FilesTruncated: files holds only its first files by path, as many
	// as fit a page; its manifest names them all.
	FilesTruncated bool `json:"files_truncated,omitempty"`
}

// CommitList answers GET /v1/commits.
type CommitList struct {
	Commits []Commit `json:"commits"`
	// Next is the position after this page, never empty: the after of the
	// next call, now or after any restart.
	Next string `json:"next"`
	// More: the page stopped at a bound and more commits are there now.
	More bool `json:"more"`
}

// SeqLocation is one committed file holding a producer's batch.
type SeqLocation struct {
	Node        string     `json:"node"`
	Checkpoint  uint64     `json:"checkpoint"`
	CommittedAt *time.Time `json:"committed_at,omitempty"`
	Manifest    string     `json:"manifest"`
	Path        string     `json:"path"`
	// First and Last bound the producer's range in the file holding it.
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	// Epoch and Incarnation: the producer's as of the checkpoint; absent
	// in manifests written before they were kept.
	Epoch       *int64 `json:"epoch,omitempty"`
	Incarnation *int64 `json:"incarnation,omitempty"`
}

// SeqLocations answers GET /v1/producers/{producer}/streams/{stream}/seqs/{seq}.
type SeqLocations struct {
	Producer string `json:"producer"`
	Stream   string `json:"stream"`
	Seq      int64  `json:"seq"`
	// Locations: newest incarnation first, then newest commit.
	Locations []SeqLocation `json:"locations"`
	// Complete: every manifest was read (false: only the newest ones).
	Complete bool `json:"complete"`
}
