package server

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/spf13/afero"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// Config configures an Engine.
//
// Zero has one meaning across the durations: a periodic part that can be
// off (CheckpointInterval, CommitLinger, CommitMinGap, SweepInterval,
// ProducerExpiry) is off at zero; a timeout, window or backoff, which
// can't be off, takes its default at zero. The Default consts are also
// the command line's defaults (cmd/eosink states none of its own).
type Config struct {
	Node       string              // node id in file names
	FS         afero.Fs            // filesystem of the staging directory
	StagingDir string              // where temp files live
	StorePath  string              // bbolt state file, on the OS filesystem
	Committer  committer.Committer // makes files final
	Publisher  committer.Publisher // publishes manifests
	// TableLocation is the destination's absolute URI (file:///abs or
	// s3://bucket/prefix) as table metadata names files. Set with a
	// Publisher that is also a table.Dest, it turns on Iceberg table
	// streams; empty: a stream configured as a table is refused.
	TableLocation string
	Logger        *slog.Logger     // nil discards
	Now           func() time.Time // nil means time.Now

	CheckpointInterval  time.Duration // 0: only on request
	RollBytes           int64         // start a new file beyond this size; 0: DefaultRollBytes
	MaxUncommittedBytes int64         // backpressure threshold; 0: DefaultMaxUncommittedBytes
	BufferSize          int           // staging buffer per file; default 256 KiB
	Retain              int           // committed checkpoints that keep details; default 1000
	Parallel            int           // concurrent pre-commits and commits; default recovery.DefaultParallel
	RetryMin, RetryMax  time.Duration // commit retry backoff; default 50ms..5s
	MaxOpenFiles        int           // transactions (open staging files) per checkpoint; 0: no limit
	ProducerExpiry      time.Duration // forget producers idle this long with nothing uncommitted; 0: never
	Hooks               Hooks         // optional observer
	// StoreOptions are passed to recovery.OpenWith; tests inject state
	// store faults through them.
	StoreOptions recovery.Options
	// Encoders encode compressed and Parquet files as their batches
	// arrive (staging.CreateEncoded); nil means staging.NewEncoders with
	// one step at a time per CPU. Fault sweeps use inline ones.
	Encoders *staging.Encoders

	// SweepInterval is how often the orphan sweep runs (recovery runs one
	// at every start) when the committer prepares remotely: it retries
	// failed aborts and removes this node's uploads and staging objects
	// that nothing claims (I10). 0 turns the periodic sweep off.
	SweepInterval time.Duration

	// ForgottenCompactInterval is how often the forgotten-producers
	// documents are compacted (forgotten.go), once enough of them wait;
	// 0 turns it off. The command line sets DefaultForgottenCompactInterval.
	ForgottenCompactInterval time.Duration

	// IdempotencyWindow is how long an idempotency key is kept after its
	// batch was prepared; 0 means DefaultIdempotencyWindow. MaxKeys caps
	// the keys held (memory and store); 0 means DefaultMaxKeys.
	// MaxOpenKeys caps the keys one checkpoint accepts; 0 means a
	// quarter of MaxKeys (all of a cap up to 1024).
	// See idempotency.go for what happens past them.
	IdempotencyWindow time.Duration
	MaxKeys           int
	MaxOpenKeys       int
	// CommitLinger: a Wait on the open checkpoint starts a checkpoint
	// within this delay (group commit); 0 leaves waits to the interval and
	// explicit checkpoints. CommitMinGap is the least time between two
	// checkpoints started that way. See groupcommit.go.
	CommitLinger time.Duration
	CommitMinGap time.Duration
	// Leaser, when set, holds the node lease _nodes/<node>.json in the
	// destination (server/lease.go): taken before recovery, renewed every
	// LeaseTimeout/3, checked before every commit step that writes to the
	// destination. Nil runs without a lease (one node per id is then the
	// operator's promise).
	Leaser       committer.Leaser
	LeaseTimeout time.Duration // 0 means DefaultLeaseTimeout
	Listen       string        // written into the lease, to name the holder

	idBlock uint64 // checkpoint ids reserved at once; tests shrink it
}

// Hooks observe the engine; every method must be fast and safe for
// concurrent use. Nil fields are skipped.
type Hooks struct {
	Accepted    func(stream string, records, bytes int)
	Duplicate   func(stream string)
	Rejected    func(reason string)
	Checkpoint  func(r CheckpointResult)
	CommitStuck func(id uint64, err error)
	// OrphansRemoved counts what recovery or the orphan sweep removed, by
	// kind: "intent" (an upload whose abort had failed), "upload",
	// "object".
	OrphansRemoved func(kind string, n int)
	// ProducersExpired counts producers forgotten by the expiry.
	ProducersExpired func(n int)
}

// Defaults: of Config fields left zero, and of the periodic parts that
// zero turns off (those are the command line's defaults).
const (
	DefaultCheckpointInterval       = 10 * time.Second      // --checkpoint-interval
	DefaultCommitLinger             = 10 * time.Millisecond // --commit-linger
	DefaultSweepInterval            = 10 * time.Minute      // --orphan-sweep-interval
	DefaultForgottenCompactInterval = forgottenCompactEvery // no flag
	DefaultRollBytes                = 1 << 30               // Config.RollBytes, --roll-size
	DefaultMaxUncommittedBytes      = 1 << 30               // Config.MaxUncommittedBytes, --max-uncommitted
)

func (c *Config) defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RollBytes <= 0 {
		c.RollBytes = DefaultRollBytes
	}
	if c.MaxUncommittedBytes <= 0 {
		c.MaxUncommittedBytes = DefaultMaxUncommittedBytes
	}
	if c.Retain <= 0 {
		c.Retain = recovery.DefaultRetain
	}
	if c.Parallel <= 0 {
		c.Parallel = recovery.DefaultParallel
	}
	if c.Encoders == nil {
		c.Encoders = staging.NewEncoders(runtime.GOMAXPROCS(0), 0)
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 50 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.idBlock == 0 {
		c.idBlock = 1024
	}
	if c.IdempotencyWindow <= 0 {
		c.IdempotencyWindow = DefaultIdempotencyWindow
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
}
