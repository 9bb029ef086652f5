package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// Producer identifies a batch sent with idempotence headers.
type Producer struct {
	ID    string
	Epoch int64
	Seq   int64
}

// Write is one batch to append.
type Write struct {
	Stream   string
	Ext      string // "ndjson" or "txt"
	Data     []byte // records, each terminated by '\n'
	Records  int
	Producer *Producer // nil without idempotence headers
	// Key is the batch's idempotency key, nil without; never with Producer.
	Key *IdempotencyKey
	// Scope is what keys are scoped by (idempotency.go): an identity of
	// the client's token when tokens are on, "" without.
	Scope string
	// Body is the decoded request body, for a stream configured with
	// "dedup": "body" (streams.go): a write with neither Producer nor Key
	// is keyed by its SHA-256. The engine does not keep it.
	Body []byte
	// Hold, when set, is asked for the bytes a batch spanning partitions
	// needs beyond Data while Write runs (streams.go place); its error
	// refuses the batch, wrapped. The API holds them against its
	// in-flight body budget.
	Hold func(n int64) error
}

// WriteResult answers a Write.
type WriteResult struct {
	Checkpoint uint64 // checkpoint holding the batch
	Records    int
	Bytes      int
	Duplicate  bool  // the sequence number was accepted before; nothing written
	Committed  bool  // the batch is already committed (duplicates only); see Write for Checkpoint
	NextSeq    int64 // next sequence number expected (producers only)
}

// CheckpointResult is the end of one checkpoint.
type CheckpointResult struct {
	ID         uint64
	State      recovery.State
	Files      []committer.File
	Records    int64
	Bytes      int64
	DurationMS int64
	Error      string
	// Seconds is the duration, unrounded, for metrics.
	Seconds float64
}

type openTxn struct {
	key   staging.Key
	txn   *staging.Txn
	final string
	// Stream configuration hooks (streams.go): the configuration the
	// file is written with (and encoded in, as its batches arrive).
	conf *streamConf
}

type outcome struct {
	done  chan struct{}
	state recovery.State
	err   error
}

// Engine accepts batches and runs checkpoints. It is safe for concurrent use.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	store  *recovery.Store
	fin    recovery.Finisher
	pol    policy
	lease  *lease // nil without Config.Leaser
	health health // stuck, recovering, disk full, failure, the status snapshot (status.go)

	ing  ingest    // the ingest lock and what a write sees (engine.go)
	pipe pipeline  // one checkpoint at a time (checkpoint.go)
	life lifecycle // start and the background loops (open.go, run.go)
}

// ingest is the ingest lock and what a write must see atomically: the
// open checkpoint, its transactions, the producer table, the idempotency
// keys and the stream configurations in force. Write's logic lives here.
// The health fields (status.go) and the group commit's (groupcommit.go)
// are guarded by the same lock, so that a snapshot sees them with the open
// checkpoint.
type ingest struct {
	e *Engine

	initMu sync.Mutex // serialises producer inits

	// doomed is the newest staging file that can't be finished, by
	// checkpoint: set without the lock (doomed.go).
	doomed atomic.Pointer[doom]

	mu          sync.Mutex // the ingest lock; guards everything below
	isReady     bool
	closed      bool
	draining    bool
	openID      uint64
	openTxns    []*openTxn
	cur         map[staging.Key]*openTxn
	nextIndex   int
	openBytes   int64
	openRecords int64
	held        int64          // uncommitted bytes: open and in-flight checkpoints
	prods       *producerTable // producers.go
	outcomes    map[uint64]*outcome
	lastDone    uint64 // newest committed checkpoint
	firstID     uint64 // the first id this start opened
	early       bool   // the open checkpoint must end now: too many open files
	inflight    uint64 // the checkpoint past its barrier, 0 when none

	// abortedThrough is the newest checkpoint aborted: a doom of it or
	// an older one is over (doomed.go).
	abortedThrough uint64

	// lastPrepared is the newest checkpoint recorded prepared (a
	// stream's PUT waits for it: streams.go).
	lastPrepared uint64

	// parked holds the table streams whose table commit is parked:
	// their writes are refused (parked.go).
	parked map[string]bool

	keys    keyTable    // idempotency keys (idempotency.go)
	streams streamTable // stream configurations (streams.go)
}

// pipeline runs one checkpoint at a time: reserve ids, barrier (ingest
// hands it the open checkpoint as a cut), pre-commit, prepared,
// commit/abort. Only the coordinator loop drives it; the doom loop
// calls abortDoomedOpen (doomed.go), which aborts the open checkpoint,
// not the one in flight, and only reads reserved. It owns none of
// ingest's fields: what changes under the ingest lock it asks ingest to
// change (cut, prepared, committed, finished, abortOpen,
// abortOpenLocked).
type pipeline struct {
	e *Engine

	// reserved is the highest checkpoint id durably reserved: ids up to
	// it may be handed out. The coordinator raises it; a doomed open
	// checkpoint's abort on its own (doomed.go) reads it.
	reserved atomic.Uint64
}

// lifecycle is the engine's start (lease, replay, reserve, ready) and its
// background loops: the coordinator, lease renewal, the orphan sweep and
// the producer expiry.
type lifecycle struct {
	e *Engine

	// No context is kept: Open hands Run its own. Close cancels it
	// (cancel) and waits for Run's end (done); closing is its Done, for
	// the exported calls that must give up when the engine closes.
	cancel  context.CancelFunc
	closing <-chan struct{}
	done    chan struct{}
	reqs    chan chan ckptReply
	kick    chan struct{} // an early checkpoint: the open one grew large
	// doomKick: a doom was noted, for doomLoop (doomed.go)
	doomKick chan struct{}
	soon     chan struct{} // a Wait on the open checkpoint (group commit)
	ready    chan struct{}

	sweepMu sync.Mutex // serialises orphan sweeps

	parkKick chan struct{} // a table commit was parked (parked.go)
	parking  parking

	// tableBound is the table commit's Bound (table.Iceberg): during the
	// replay, manifestLimit (the highest id this node may have used), since
	// a store restored from an older copy replays a checkpoint its table
	// may hold behind later ones; 0 once recovery is done, when commits
	// are serial and a later checkpoint in a table was planted.
	tableBound atomic.Uint64

	// forgot serialises the publishing of forgotten-producers documents
	// and remembers the last name used (forgotten.go), so a forget tries
	// the next free name, not every one before it.
	forgot struct {
		sync.Mutex
		after uint64
		next  int
	}
	compactMu sync.Mutex // serialises compactions of those documents
	// seal signs the documents this node publishes and checks the ones
	// it reads (layout.ForgottenSeal); set before ready.
	seal layout.ForgottenSeal

	// Under the ingest lock (groupcommit.go):
	commitWant  uint64 // the highest checkpoint a Wait asked to start
	commitWaits int    // the Waits that asked for it
}

// diskFullHold is how long Status reports a full disk after the last write
// refused for space, when no write succeeded since: long enough to span a
// client's retries, short enough that a node nobody writes to (a load
// balancer took it out on /readyz) comes back by itself.
const diskFullHold = 10 * time.Second

type ckptReply struct {
	res CheckpointResult
	err error
}

// Partition returns the partition path for an ingest time.
func Partition(t time.Time) string { return t.UTC().Format("dt=2006-01-02/hour=15") }

// Write appends one batch to the open checkpoint's transaction for its
// stream, partition and extension, after the producer checks.
//
// A duplicate writes nothing. Its Checkpoint is the one it rides in while
// not committed; once committed, the checkpoint that committed the
// producer's newest batch on the stream — the one holding it when it is
// among those (a retry of the latest batches), else a later committed
// one; never an open, aborted or reserved id.
func (e *Engine) Write(w Write) (WriteResult, error) { return e.ing.write(w) }

// write is Write's logic: the batch is placed outside the ingest lock,
// checked and appended under it.
func (in *ingest) write(w Write) (WriteResult, error) {
	now := in.e.cfg.Now()
	// Stream configuration hook (streams.go): place the batch by the
	// configuration in force, outside the ingest lock.
	key := w.Key
	pl := in.place(in.confFor(w.Stream), now, &w)
	w.Key = pl.conf.dedupKey(&w, key)
	in.mu.Lock()
	defer func() {
		in.e.health.publishLocked()
		in.mu.Unlock()
	}()
	if err := in.writableLocked(); err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Checkpoint: in.openID, Records: w.Records, Bytes: len(w.Data)}
	if sc := in.confFor(w.Stream); sc != pl.conf {
		pl = in.place(sc, now, &w) // a barrier changed the configuration meanwhile
		w.Key = sc.dedupKey(&w, key)
	}
	if w.Key != nil {
		if dup, ok, err := in.keyLookupLocked(&w); ok || err != nil {
			return dup, err
		}
	}
	var ss *seqState
	if w.Producer != nil {
		var err error
		if ss, err = in.sequenceLocked(w, &res); err != nil || ss == nil {
			return res, err // refused, or a duplicate
		}
	}
	if pl.err != nil {
		in.reject("invalid_records")
		return res, pl.err
	}
	if d := in.doomedLocked(); d != nil && (w.Records > 0 || ss != nil) { // doomed.go
		return res, in.refuseDoomedLocked(d)
	}
	if w.Records == 0 {
		// An empty batch still takes its sequence number, but opens no file.
		if ss != nil {
			in.acceptLocked(w, ss, &res)
		}
		return res, nil
	}
	if err := in.switchLocked(w.Stream); err != nil { // streams.go: a PUT's barrier
		in.reject("backpressure")
		return res, err
	}
	if err := in.parkedLocked(w.Stream); err != nil { // parked.go
		in.reject("backpressure")
		return res, err
	}
	if in.held > 0 && in.held+int64(len(w.Data)) > in.e.cfg.MaxUncommittedBytes {
		in.reject("backpressure")
		return res, ErrBackpressure
	}
	pid, seq := "", int64(0)
	if w.Producer != nil {
		pid, seq = w.Producer.ID, w.Producer.Seq
	}
	if err := in.appendPlacedLocked(&w, pl, pid, seq); err != nil { // streams.go
		if errors.Is(err, ErrBackpressure) {
			in.reject("backpressure")
			return res, err
		}
		in.reject("storage")
		in.e.health.noteDiskFullLocked(err)
		return res, err
	}
	if d := in.doomedLocked(); d != nil {
		// The append ran an encoding step that failed (inline encoders),
		// or a step failed meanwhile: the batch is in a doomed file.
		return res, in.refuseDoomedLocked(d)
	}
	in.openBytes += int64(len(w.Data))
	in.openRecords += int64(w.Records)
	in.held += int64(len(w.Data))
	if in.e.cfg.CheckpointInterval > 0 && in.openBytes > in.e.cfg.MaxUncommittedBytes/4 {
		// With periodic checkpoints, checkpoint early rather than let the
		// open checkpoint run into backpressure, which idles every
		// producer for a Retry-After. (Interval 0 means only on request.)
		in.kickLocked()
	}
	if ss != nil {
		in.acceptLocked(w, ss, &res)
	}
	if w.Key != nil {
		in.keyAcceptLocked(&w)
	}
	if h := in.e.cfg.Hooks.Accepted; h != nil {
		h(w.Stream, w.Records, len(w.Data))
	}
	return res, nil
}

func (in *ingest) kickLocked() {
	select {
	case in.e.life.kick <- struct{}{}:
	default:
	}
}

// earlyLocked asks for the open checkpoint to end now, whatever the
// interval: it holds too many open files.
func (in *ingest) earlyLocked() {
	in.early = true
	in.kickLocked()
}

func (in *ingest) reject(reason string) {
	if h := in.e.cfg.Hooks.Rejected; h != nil {
		h(reason)
	}
}

func (in *ingest) writableLocked() error {
	switch {
	case in.e.health.failErr != nil:
		return in.e.health.failErr
	case in.closed || in.draining:
		return ErrClosed
	case !in.isReady:
		return ErrNotReady
	}
	return nil
}

// txnLocked returns the open transaction for key, opening or rolling it.
func (in *ingest) txnLocked(key staging.Key) (*openTxn, error) {
	if ot := in.cur[key]; ot != nil && ot.txn.Err() == nil && ot.txn.Size() < in.rollBytes(key.Stream) {
		return ot, nil
	} else if ot != nil && ot.txn.Err() != nil {
		in.doomFile(in.openID, key.Stream, ot.txn.Err()) // doomed.go
		return nil, fmt.Errorf("stream %s: %w", key.Stream, ot.txn.Err())
	}
	if n := len(in.openTxns); in.e.cfg.MaxOpenFiles > 0 && n >= in.e.cfg.MaxOpenFiles {
		// Each transaction holds a file descriptor until its pre-commit:
		// end this checkpoint early rather than run out of them.
		in.earlyLocked()
		return nil, fmt.Errorf("stream %s: %d staging files open, the most per checkpoint (--max-open-files): %w", key.Stream, n, ErrBackpressure)
	}
	base := layout.PartName(in.e.cfg.Node, in.openID, in.nextIndex, key.Ext)
	conf := in.confFor(key.Stream)
	t, err := staging.CreateEncoded(in.e.cfg.FS, staging.TempName(in.e.cfg.StagingDir, base), in.e.cfg.BufferSize, conf.enc, in.e.cfg.Encoders)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		// Out of file descriptors (the process's or the system's): a
		// checkpoint closes ours; the client retries after it.
		in.earlyLocked()
		return nil, fmt.Errorf("%w: %w", ErrBackpressure, err)
	}
	if err != nil {
		return nil, err
	}
	in.nextIndex++
	id := in.openID
	t.OnEncodeFail(func(err error) { in.doomFile(id, key.Stream, err) }) // doomed.go
	ot := &openTxn{key: key, txn: t, final: path.Join(key.Stream, key.Partition, base), conf: conf}
	in.cur[key] = ot
	in.openTxns = append(in.openTxns, ot)
	return ot, nil
}
