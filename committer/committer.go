// Package committer makes pre-committed staging files final, one file at a
// time: Prepare (after the file is synced and closed, before the checkpoint's
// "prepared" record), Commit (after it) and Abort (instead of it).
//
// Final names are relative to the destination and slash-separated:
//
//	<stream>/<partition>/part-<node>-<checkpoint:020d>-<index:04d>.<ext>
//	_manifests/<node>/<checkpoint:020d>.json
//
// Every method is idempotent and safe to replay after a crash, and safe for
// concurrent use on different files. Commit never replaces a final file that
// holds other content (I7): it reports ErrConflict instead.
package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Errors shared by all committers. Implementations wrap them.
var (
	// ErrConflict means the final name holds content other than the file's.
	ErrConflict = errors.New("final file exists with other content")
	// ErrLost means neither the staging data nor the final file exists.
	ErrLost = errors.New("file lost: neither staged nor final")
	// ErrNotFound means a destination path does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists means a create-only write found the name taken.
	ErrExists = errors.New("already exists")
	// ErrTransient marks an error worth retrying (network, 5xx, timeouts).
	ErrTransient = errors.New("transient error")
	// ErrPrecondition means a compare-and-swap write found the document
	// changed since the version it was given: someone else wrote it.
	ErrPrecondition = errors.New("precondition failed: changed since read")
	// ErrUnsupported means the destination cannot do what is asked with the
	// guarantee it needs (a server that ignores a conditional write).
	ErrUnsupported = errors.New("not supported by the destination")
)

// Part is one uploaded part of an S3 multipart upload.
type Part struct {
	Number int    `json:"n"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
}

// File is everything needed to commit or abort one file, as recorded in the
// state store with the "prepared" record.
type File struct {
	Stream    string               `json:"stream"`
	Temp      string               `json:"temp"`  // staging path (local filesystem)
	Final     string               `json:"final"` // relative to the destination
	Bytes     int64                `json:"bytes"`
	Records   int64                `json:"records"`
	CRC32C    string               `json:"crc32c"`
	Producers map[string]SeqRanges `json:"producers,omitempty"`
	// Epochs holds, for each producer of Producers, its epoch and
	// incarnation as of the "prepared" record, so that a rebuild from the
	// destination tells a producer's incarnations apart and restores its
	// epoch (recovery.Rebuild). Nil in records written before it was kept.
	Epochs map[string]ProducerEpoch `json:"epochs,omitempty"`
	// The file's encoding (DESIGN.md "Streams"): format ndjson, text or
	// parquet; compression none, gzip or zstd (Parquet: its page codec);
	// the version of the stream configuration it was written with (0: the
	// defaults). Empty in records written before they were kept.
	Format        string `json:"format,omitempty"`
	Compression   string `json:"compression,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
	// Table is "iceberg" for a file of a table stream: the commit appends
	// it to the stream's table (docs/design.md "Tables"). Empty otherwise.
	Table string `json:"table,omitempty"`
	// DisplacedFrom is the final name the file was prepared with when the
	// commit displaced it (recovery.Finisher's Displace): a displaced name
	// has no partition path, and a table commit reads the file's partition
	// from this one. Kept in the checkpoint's manifest and committed
	// record (a table commit finished from the manifest after a lost state
	// store needs it), not in answers (json "-").
	DisplacedFrom string `json:"-"`

	// Set by committers that upload at Prepare (S3).
	UploadID   string `json:"upload_id,omitempty"`
	Parts      []Part `json:"parts,omitempty"`
	StagingKey string `json:"staging_key,omitempty"`
	ETag       string `json:"etag,omitempty"`
}

// ProducerEpoch is a producer's epoch and incarnation when a file's
// checkpoint was prepared. The incarnation is the epoch the producer was
// created at: a producer forgotten (DELETE, expiry) and created again
// starts above every epoch it had (the store's epoch floor), so each
// incarnation of one producer id has its own.
type ProducerEpoch struct {
	Epoch       int64 `json:"epoch"`
	Incarnation int64 `json:"incarnation"`
}

// SeqRanges are one producer's exact sequence numbers in one file: ascending,
// disjoint, inclusive [first, last] ranges, so that which file holds a
// sequence number has exactly one answer. It decodes the older form, a
// single [first, last] pair, as one range.
type SeqRanges [][2]int64

// UnmarshalJSON reads [[first, last], ...] or a single [first, last].
func (r *SeqRanges) UnmarshalJSON(data []byte) error {
	var list [][2]int64
	if err := json.Unmarshal(data, &list); err == nil {
		*r = list
		return nil
	}
	var pair [2]int64
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("decode sequence ranges: want [[first, last], ...]: %w", err)
	}
	*r = SeqRanges{pair}
	return nil
}

// Committer moves one file through the two-phase commit.
type Committer interface {
	// Prepare is called once f's staging file is synced and closed, before
	// the "prepared" record. It returns f with whatever Commit will need
	// (an upload id and parts on S3). On error the checkpoint aborts.
	Prepare(ctx context.Context, f File) (File, error)
	// Commit makes f visible under its final name. It is idempotent: a file
	// already committed is success. After Commit, f's staging data is gone.
	Commit(ctx context.Context, f File) error
	// Abort deletes everything Prepare or the staging step made for f.
	// Missing pieces are not an error.
	Abort(ctx context.Context, f File) error
}

// BatchCommitter is implemented by committers whose Commit ends with a
// sync that many files can share (local: the fsync of the final
// directory), so that a checkpoint pays one sync per directory, not one
// per file. The caller commits every file with CommitUnsynced, then calls
// SyncCommits once for each distinct token they returned. A file is
// committed, as Commit would leave it, only once SyncCommits of its token
// has returned nil: nothing may be recorded committed before that.
type BatchCommitter interface {
	Committer
	// CommitUnsynced is Commit without the shared sync. It returns the
	// token of the sync still owed ("" when none is). It is idempotent and
	// fails like Commit, and is safe for concurrent use on different files.
	CommitUnsynced(ctx context.Context, f File) (token string, err error)
	// SyncCommits makes durable every CommitUnsynced that returned token
	// before the call. A failed sync must not be retried (the kernel may
	// have dropped what it was to write): the commit stops and recovery
	// commits the files again. Safe for concurrent use.
	SyncCommits(ctx context.Context, token string) error
}

// RemotePreparer marks committers whose Prepare leaves state outside the
// local staging directory (S3 uploads, staging objects). The engine records
// an intent for every file before Prepare, so recovery can abort what no
// prepared checkpoint names; local committers need none.
type RemotePreparer interface {
	PreparesRemotely()
}

// Leftover kinds.
const (
	LeftoverUpload = "upload" // an incomplete multipart upload
	LeftoverObject = "object" // a staging object
)

// Leftover is something a committer made in the destination that is not a
// committed file: an incomplete multipart upload or a staging object.
type Leftover struct {
	Kind string `json:"kind"` // LeftoverUpload or LeftoverObject
	// Name is the destination-relative name it was made for: a file's
	// final name (File.Final) or a manifest's name.
	Name      string    `json:"name"`
	Key       string    `json:"key"`                 // the object key
	UploadID  string    `json:"upload_id,omitempty"` // uploads only
	Initiated time.Time `json:"initiated,omitzero"`
}

// Sweeper is implemented by committers that leave state outside the local
// staging directory (see RemotePreparer), so that recovery and the orphan
// sweep can find and remove what no prepared checkpoint names (I10) — also
// after a failed abort, a cut-off shutdown or a lost state store.
type Sweeper interface {
	// Leftovers lists this node's incomplete uploads and staging objects,
	// and only this node's: never another node's, never a committed
	// file. The caller decides which are orphans. Safe for concurrent use
	// with the other methods.
	Leftovers(ctx context.Context) ([]Leftover, error)
	// RemoveLeftover aborts the upload or deletes the staging object. One
	// already gone returns an error wrapping ErrNotFound. It never touches
	// a committed file (I7).
	RemoveLeftover(ctx context.Context, l Leftover) error
}

// Publisher writes small objects create-only and atomically: readers see all
// of data or nothing. Publishing the same name again when it exists already
// returns ErrExists. Used for manifests.
type Publisher interface {
	Publish(ctx context.Context, name string, data []byte) error
}

// StagedPublisher is implemented by publishers whose Publish writes and
// syncs a copy where readers never look before it makes the name visible
// (local: a temp file in the staging directory, then a rename and a
// directory fsync). Stage does the first part, so a caller can do it
// while it waits for something else (a checkpoint's manifest while its
// files commit) and keep only the publish itself on its path.
type StagedPublisher interface {
	Publisher
	// Stage writes data for name, durably, where no reader looks. The
	// result publishes it or discards it; a crash leaves at most a temp
	// copy that the publisher's owner removes (the staging directory's
	// sweep at start). Safe for concurrent use on different names.
	Stage(ctx context.Context, name string, data []byte) (Staged, error)
}

// Staged is what StagedPublisher.Stage wrote.
type Staged interface {
	// Publish makes the staged data visible under its name, create-only,
	// with Publisher.Publish's contract (ErrExists when the name exists:
	// its directory entry is made durable first). Call it once.
	Publish(ctx context.Context) error
	// Discard removes the staged copy unless Publish consumed it. Missing
	// is not an error.
	Discard() error
}

// Mover moves a file of the destination to another destination-relative
// name. Recovery uses it to set aside the part files of a checkpoint whose
// "prepared" record was lost with its state store (layout.QuarantineName):
// no manifest names them and their clients resend their batches.
//
// Move is idempotent: from gone and to present is done (a move an earlier
// try made). It never replaces a file at to: to present with other
// content than from is ErrConflict; neither present is ErrNotFound. The
// move is durable when Move returns nil. Safe for concurrent use on
// different names.
type Mover interface {
	Move(ctx context.Context, from, to string) error
}

// Remover removes documents eosink keeps for itself under
// _forgotten/ (layout.ForgottenDir): the forgotten-producers documents a
// compaction has merged into one written before (server/forgotten.go).
// Any other name is refused with an error and left as it is: committed
// files and manifests are never removed (I7).
//
// Remove is idempotent: a missing name is done. It need not be durable
// when it returns (a removal a power cut undoes leaves a document whose
// content is held elsewhere too). Safe for concurrent use on different
// names.
type Remover interface {
	Remove(ctx context.Context, name string) error
}

// Leaser reads and writes small documents with compare-and-swap: node
// leases (_nodes/<node>.json). Versions are opaque tokens (an S3 ETag, a
// content digest locally); they change with every write.
//
// Both methods are safe for concurrent use; a write is atomic (readers see
// the old document or the new one, never part of one).
type Leaser interface {
	// ReadLease returns name's content and its version. A missing name
	// returns an error wrapping ErrNotFound.
	ReadLease(ctx context.Context, name string) (data []byte, version string, err error)
	// WriteLease writes data to name if its version is still version, and
	// returns the new version. version "" means create-only: a name that
	// exists returns ErrExists. A changed (or deleted) document returns
	// ErrPrecondition. A destination that cannot make the condition hold
	// returns ErrUnsupported.
	WriteLease(ctx context.Context, name string, data []byte, version string) (string, error)
}

// LockOwner is implemented by leasers whose compare-and-swap holds a lock
// that a writer killed mid-write leaves behind (local: <name>.lock). The
// caller names itself and the former writers it knows are dead (a node's
// earlier processes on the data dir whose file lock it now holds). A lock
// naming one of those, or naming the owner itself while it is not
// writing, is broken at once instead of after the lock's stale age; a
// lock naming anyone else is not. Safe for concurrent use with WriteLease.
type LockOwner interface {
	SetLockOwner(owner string, dead []string)
}

// Entry describes one file in the destination.
type Entry struct {
	Path     string    `json:"path"`
	Bytes    int64     `json:"bytes"`
	Modified time.Time `json:"modified"`
}

// Reader lists and reads the destination.
type Reader interface {
	// List returns every file whose path starts with prefix, sorted by path.
	// Directory entries are not returned.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Open opens a file for reading. A missing file returns ErrNotFound.
	Open(ctx context.Context, name string) (io.ReadSeekCloser, Entry, error)
}

// Pager is implemented by Readers that list a page at a time, so that the
// cost of a page depends on its size, not on the destination's.
type Pager interface {
	// ListPage returns, sorted by path, up to limit files whose path
	// starts with prefix and sorts after after (byte-wise; "" starts at the
	// beginning). Directory entries are not returned. Safe for concurrent
	// use; pages taken while files are committed see each file at most
	// once and every file present throughout.
	ListPage(ctx context.Context, prefix, after string, limit int) ([]Entry, error)
}

// Limits bound the names a destination can hold. Zero means no bound.
type Limits struct {
	// MaxName is the longest destination-relative name (File.Final) in
	// bytes, after the committer's own prefix or directory and anything
	// else it builds from the name (an S3 staging key) is counted.
	MaxName int
	// MaxElem is the longest slash-separated element of a name, in bytes.
	MaxElem int
}

// Limiter is implemented by committers whose destination bounds names
// (S3 keys, file system paths), so that the engine refuses at write time
// a record whose file could never be committed. Safe for concurrent use.
type Limiter interface {
	Limits() Limits
}
