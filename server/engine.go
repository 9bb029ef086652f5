package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// Config configures an Engine.
type Config struct {
	Node       string              // node id in file names
	FS         afero.Fs            // filesystem of the staging directory
	StagingDir string              // where temp files live
	StorePath  string              // bbolt state file, on the OS filesystem
	Committer  committer.Committer // makes files final
	Publisher  committer.Publisher // publishes manifests
	Logger     *slog.Logger        // nil discards
	Now        func() time.Time    // nil means time.Now

	CheckpointInterval  time.Duration // 0: only on request
	RollBytes           int64         // start a new file beyond this size; default 1 GiB
	MaxUncommittedBytes int64         // backpressure threshold; default 1 GiB
	BufferSize          int           // staging buffer per file; default 256 KiB
	Retain              int           // committed checkpoints that keep details; default 1000
	Parallel            int           // concurrent pre-commits and commits; default 8
	RetryMin, RetryMax  time.Duration // commit retry backoff; default 50ms..5s
	MaxOpenFiles        int           // transactions (open staging files) per checkpoint; 0: no limit
	ProducerExpiry      time.Duration // forget producers idle this long with nothing uncommitted; 0: DefaultProducerExpiry, negative: never
	Hooks               Hooks         // optional observer
	// StoreOptions are passed to recovery.OpenWith; tests inject state
	// store faults through them.
	StoreOptions recovery.Options

	// SweepInterval is how often the orphan sweep runs (recovery runs one
	// at every start) when the committer prepares remotely: it retries
	// failed aborts and removes this node's uploads and staging objects
	// that nothing claims (I10). 0 means DefaultSweepInterval; negative
	// turns the periodic sweep off.
	SweepInterval time.Duration

	// IdempotencyWindow is how long an idempotency key is kept after its
	// batch was prepared; 0 means DefaultIdempotencyWindow. MaxKeys caps
	// the keys held (memory and store); 0 means DefaultMaxKeys. See
	// idempotency.go for what happens past the cap.
	IdempotencyWindow time.Duration
	MaxKeys           int
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

// DefaultSweepInterval is the orphan sweep's period when
// Config.SweepInterval is 0.
const DefaultSweepInterval = 10 * time.Minute

func (c *Config) defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RollBytes <= 0 {
		c.RollBytes = 1 << 30
	}
	if c.MaxUncommittedBytes <= 0 {
		c.MaxUncommittedBytes = 1 << 30
	}
	if c.Retain <= 0 {
		c.Retain = recovery.DefaultRetain
	}
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 50 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.ProducerExpiry == 0 {
		c.ProducerExpiry = DefaultProducerExpiry
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
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
	// Body is the decoded request body, for a stream configured with
	// "dedup": "body" (streams.go): a write with neither Producer nor Key
	// is keyed by its SHA-256. The engine does not keep it.
	Body []byte
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
	ID         uint64           `json:"id"`
	State      recovery.State   `json:"state"`
	Files      []committer.File `json:"files"`
	Records    int64            `json:"records"`
	Bytes      int64            `json:"bytes"`
	DurationMS int64            `json:"duration_ms"`
	Error      string           `json:"error,omitempty"`
	// Seconds is the duration, unrounded, for metrics.
	Seconds float64 `json:"-"`
}

type openTxn struct {
	key   staging.Key
	txn   *staging.Txn
	final string
	// Stream configuration hooks (streams.go): the configuration the
	// file is written with, and its encoded temp file once pre-commit
	// encoded it.
	conf    *streamConf
	encoded string
}

type outcome struct {
	done  chan struct{}
	state recovery.State
	err   error
}

// Engine accepts batches and runs checkpoints. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	store *recovery.Store
	fin   recovery.Finisher
	lease *lease // nil without Config.Leaser

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reqs   chan chan ckptReply
	kick   chan struct{} // an early checkpoint: the open one grew large
	soon   chan struct{} // a Wait on the open checkpoint (group commit)
	ready  chan struct{}
	failed chan struct{}

	initMu sync.Mutex // serialises producer inits

	sweepMu sync.Mutex // serialises orphan sweeps

	mu          sync.Mutex // the ingest lock; guards everything below
	isReady     bool
	closed      bool
	draining    bool
	failErr     error
	openID      uint64
	openTxns    []*openTxn
	cur         map[staging.Key]*openTxn
	nextIndex   int
	openBytes   int64
	openRecords int64
	held        int64 // uncommitted bytes: open and in-flight checkpoints
	producers   map[string]*producer
	durable     map[string]recovery.Producer // as of the last prepared checkpoint
	dirty       map[string]map[string]bool
	outcomes    map[uint64]*outcome
	lastDone    uint64 // newest committed checkpoint
	reserved    uint64 // highest checkpoint id durably reserved: ids up to it may be handed out
	firstID     uint64 // the first id this start opened
	stuck       error  // the error holding a prepared checkpoint back, if any
	inflight    uint64 // the checkpoint past its barrier, 0 when none
	recovering  string
	early       bool      // the open checkpoint must end now: too many open files
	diskFull    error     // the last write refused for space, until a write succeeds
	diskFullAt  time.Time // when

	status        atomic.Pointer[Status] // published under mu, read by Status without it
	producerCount atomic.Int64           // len(producers), read without mu
	keys          keyTable               // idempotency keys (idempotency.go)
	streams       streamTable            // stream configurations (streams.go)
	commitWant    uint64                 // the highest checkpoint a Wait asked to start (groupcommit.go)
	commitWaits   int                    // the Waits that asked for it
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

// Open opens the state store and starts recovery in the background. A
// corrupt store is an error here, naming the file: eosink refuses to start.
// Writes are refused with ErrNotReady until Ready is closed.
func Open(cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Node == "" || cfg.FS == nil || cfg.StagingDir == "" || cfg.StorePath == "" || cfg.Committer == nil || cfg.Publisher == nil {
		return nil, errors.New("open engine: node, fs, staging dir, store path, committer and publisher are required")
	}
	if err := durable.MkdirAll(cfg.FS, cfg.StagingDir); err != nil {
		return nil, fmt.Errorf("open engine: %w", err)
	}
	st, err := recovery.OpenWith(cfg.StorePath, cfg.StoreOptions)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg: cfg, log: cfg.Logger, store: st,
		fin: recovery.Finisher{Store: st, Committer: cfg.Committer, Publisher: cfg.Publisher, Node: cfg.Node, Retain: cfg.Retain, Parallel: cfg.Parallel},
		ctx: ctx, cancel: cancel,
		reqs: make(chan chan ckptReply), kick: make(chan struct{}, 1), soon: make(chan struct{}, 1), ready: make(chan struct{}), failed: make(chan struct{}),
		cur: map[staging.Key]*openTxn{}, producers: map[string]*producer{}, durable: map[string]recovery.Producer{},
		dirty: map[string]map[string]bool{}, outcomes: map[uint64]*outcome{},
		recovering: "starting",
	}
	if err := e.loadStreams(); err != nil { // streams.go
		cancel()
		_ = st.Close() // refusing to start; the load error is the one to report
		return nil, err
	}
	e.publishLocked()
	if e.lease = newLease(&cfg); e.lease != nil {
		e.fin.Fence = e.leaseCheck
	}
	e.wg.Add(1)
	go e.start()
	return e, nil
}

// Ready is closed once recovery has finished and writes are accepted.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Failed is closed when the engine stopped after an error it must not
// paper over (a failed fsync after "prepared", an unwritable state store).
// The owner should Close it and open a new one, which recovers.
func (e *Engine) Failed() <-chan struct{} { return e.failed }

// Err returns the error that stopped the engine, if any.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failErr
}

// WaitReady waits for recovery to finish.
func (e *Engine) WaitReady(ctx context.Context) error {
	select {
	case <-e.ready:
		return nil
	case <-e.failed:
		return e.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Store returns the state store, for read-only queries.
func (e *Engine) Store() *recovery.Store { return e.store }

func (e *Engine) start() {
	defer e.wg.Done()
	if !e.takeLease() || !e.recover() {
		return
	}
	_, remote := e.cfg.Committer.(committer.RemotePreparer)
	_, sweeper := e.cfg.Committer.(committer.Sweeper)
	if (remote || sweeper) && e.cfg.SweepInterval > 0 {
		e.wg.Add(1)
		go e.sweepLoop()
	}
	if e.cfg.ProducerExpiry > 0 {
		e.wg.Add(1)
		go e.expireLoop()
	}
	e.run()
}

// recover replays the store until it succeeds or the engine closes.
func (e *Engine) recover() bool {
	rp := recovery.Replay{Finisher: e.fin, FS: e.cfg.FS, StagingDir: e.cfg.StagingDir, Logger: e.log}
	begin := time.Now()
	var res *recovery.Result
	var inDest uint64
	for attempt := 0; ; attempt++ {
		var err error
		res, err = rp.Run(e.ctx)
		if err == nil {
			inDest, err = e.highestManifestID(e.ctx)
		}
		if err == nil && inDest > 0 && inDest+2 > res.LastID {
			err = e.rebuildProducers(res) // recovery step 5; see below
		}
		if err == nil {
			break
		}
		if e.ctx.Err() != nil {
			return false
		}
		if e.storeFailed(err) {
			return false
		}
		if errors.Is(err, recovery.ErrCorrupt) {
			// A damaged row read by the replay: refuse to go on, naming
			// the file (the error does), as Open does.
			e.fail(err)
			return false
		}
		e.noteDiskFull(err)
		e.mu.Lock()
		e.recovering = err.Error()
		e.publishLocked()
		e.mu.Unlock()
		e.log.Error("recovery failed, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return false
		}
	}
	// Ids are handed out (in answers) before anything records them, but
	// only from a block reserved durably beforehand (see reserveIDs), so
	// every id a former run may have named is at most LastID. Start beyond
	// it, with a fresh block.
	// The lease names the highest id any former incarnation reserved:
	// beyond it, also when the store was lost (I8).
	open := max(res.LastID, e.leaseReserved()) + 1
	if inDest > 0 && inDest+2 > res.LastID {
		// Recovery step 5: the store is behind the destination (lost, or
		// an older copy). A store that kept up has reserved at least two
		// ids beyond every manifest. Never reuse an id the destination
		// shows (I8). Ids of empty or aborted checkpoints after the newest
		// manifest left no trace there: skip a whole block beyond it,
		// which covers every id a run hands out between two reservations
		// unless more than a block of them passed without data.
		open = max(open, inDest+e.cfg.idBlock+2)
		e.log.Error("the state store is behind the destination (lost, or an older copy): continuing beyond the highest manifest id found",
			"store", e.store.Path(), "store_last_checkpoint", res.LastID, "manifest_checkpoint", inDest, "checkpoint", open)
	}
	reserved := open + e.cfg.idBlock - 1
	for attempt := 0; ; attempt++ {
		err := e.store.Reserve(reserved)
		if err == nil {
			break
		}
		if e.storeFailed(err) {
			return false
		}
		e.noteDiskFull(err)
		e.mu.Lock()
		e.recovering = "reserve checkpoint ids: " + err.Error()
		e.publishLocked()
		e.mu.Unlock()
		e.log.Error("reserve checkpoint ids, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return false
		}
	}
	for attempt := 0; ; attempt++ {
		err := e.leaseReserve(reserved)
		if err == nil {
			break
		}
		if errors.Is(err, ErrLeaseLost) || e.ctx.Err() != nil {
			return false
		}
		e.log.Error("record reserved checkpoint ids in the node lease, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return false
		}
	}
	// Stores written before committed_in was kept: name the newest
	// committed checkpoint instead, never a reserved or aborted id.
	var newest uint64
	for attempt := 0; ; attempt++ {
		var err error
		if newest, err = e.store.NewestCommitted(); err == nil {
			break
		}
		e.log.Error("read newest committed checkpoint, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return false
		}
	}
	var keys []recovery.Key
	for attempt := 0; ; attempt++ {
		var err error
		if keys, err = e.store.Keys(e.cfg.Now().Add(-e.cfg.IdempotencyWindow)); err == nil {
			break
		}
		if errors.Is(err, recovery.ErrCorrupt) {
			e.fail(err)
			return false
		}
		e.log.Error("read idempotency keys, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return false
		}
	}
	e.mu.Lock()
	e.reserved = reserved
	e.keyLoadLocked(keys)
	for _, p := range res.Producers {
		e.durable[p.ID] = p
		e.producers[p.ID] = producerFrom(p, newest)
	}
	e.producerCount.Store(int64(len(e.producers)))
	e.openID = open
	e.lastDone = newest // ids between it and firstID the store lacks were never used
	e.firstID = open
	e.outcomes[e.openID] = newOutcome()
	e.isReady = true
	e.recovering, e.diskFull = "", nil
	e.publishLocked()
	e.mu.Unlock()
	e.countOrphans(recovery.SweepResult{Intents: res.Aborted, Removed: res.Orphans})
	e.log.Info("recovery done", "recommitted", len(res.Recommitted), "removed", len(res.Removed),
		"aborted_uploads", len(res.Aborted), "orphans", len(res.Orphans), "producers", len(res.Producers),
		"checkpoint", e.openID, "duration_ms", time.Since(begin).Milliseconds())
	close(e.ready)
	return true
}

// highestManifestID returns the highest checkpoint id among this node's
// manifests in the destination, 0 when there are none or the destination
// cannot be listed (neither the publisher nor the committer is a
// committer.Reader).
func (e *Engine) highestManifestID(ctx context.Context) (uint64, error) {
	r, ok := e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = e.cfg.Committer.(committer.Reader); !ok {
			return 0, nil
		}
	}
	dir := path.Dir(recovery.ManifestPath(e.cfg.Node, 0)) + "/"
	entries, err := r.List(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("list manifests: %w", err)
	}
	var top uint64
	for _, en := range entries {
		if node, id, ok := layout.ParseManifestName(en.Path); ok && node == e.cfg.Node {
			top = max(top, id)
		}
	}
	return top, nil
}

func newOutcome() *outcome { return &outcome{done: make(chan struct{})} }

func (e *Engine) backoff(attempt int) time.Duration {
	d := e.cfg.RetryMin << min(attempt, 16)
	if d > e.cfg.RetryMax || d <= 0 {
		d = e.cfg.RetryMax
	}
	return d/2 + rand.N(d/2+1)
}

func (e *Engine) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// fail stops the engine after err. Held under no lock.
func (e *Engine) fail(err error) {
	e.mu.Lock()
	if e.failErr != nil {
		e.mu.Unlock()
		return
	}
	e.failErr = fmt.Errorf("%w: %w", ErrFailed, err)
	e.publishLocked()
	e.mu.Unlock()
	e.log.Error("engine stopped; recovery on restart decides", "err", err)
	close(e.failed)
}

// storeFailed stops the engine if err says the state store may be in an
// unknown state (recovery.ErrWriteFailed): it must be reopened. It reports
// whether it did.
func (e *Engine) storeFailed(err error) bool {
	if !errors.Is(err, recovery.ErrWriteFailed) {
		return false
	}
	e.fail(err)
	return true
}

// noteDiskFull remembers err if it is a write refused for space, for
// Status and /readyz.
func (e *Engine) noteDiskFull(err error) {
	if !errors.Is(err, durable.ErrDiskFull) {
		return
	}
	e.mu.Lock()
	e.diskFull, e.diskFullAt = err, time.Now()
	e.publishLocked()
	e.mu.Unlock()
}

func (e *Engine) noteDiskFullLocked(err error) {
	if errors.Is(err, durable.ErrDiskFull) {
		e.diskFull, e.diskFullAt = err, time.Now()
	}
}

// diskOK forgets a full disk: a durable write just succeeded.
func (e *Engine) diskOK() {
	e.mu.Lock()
	e.diskFull = nil
	e.publishLocked()
	e.mu.Unlock()
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
func (e *Engine) Write(w Write) (WriteResult, error) {
	now := e.cfg.Now()
	// Stream configuration hook (streams.go): place the batch by the
	// configuration in force, outside the ingest lock.
	key := w.Key
	pl := e.confFor(w.Stream).place(now, &w)
	w.Key = pl.conf.dedupKey(&w, key)
	e.mu.Lock()
	defer func() {
		e.publishLocked()
		e.mu.Unlock()
	}()
	if err := e.writableLocked(); err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Checkpoint: e.openID, Records: w.Records, Bytes: len(w.Data)}
	if sc := e.confFor(w.Stream); sc != pl.conf {
		pl = sc.place(now, &w) // a barrier changed the configuration meanwhile
		w.Key = sc.dedupKey(&w, key)
	}
	if w.Key != nil {
		if dup, ok, err := e.keyLookupLocked(w.Stream, w.Key); ok || err != nil {
			return dup, err
		}
	}
	var ss *seqState
	if w.Producer != nil {
		p := e.producers[w.Producer.ID]
		if p == nil {
			e.reject("unknown_producer")
			return res, fmt.Errorf("producer %s: %w", w.Producer.ID, ErrUnknownProducer)
		}
		switch {
		case w.Producer.Epoch < p.epoch:
			p.fenced++
			e.reject("producer_fenced")
			return res, fmt.Errorf("producer %s epoch %d < %d: %w", p.id, w.Producer.Epoch, p.epoch, ErrFenced)
		case w.Producer.Epoch > p.epoch:
			e.reject("invalid_epoch")
			return res, fmt.Errorf("producer %s epoch %d > %d: %w", p.id, w.Producer.Epoch, p.epoch, ErrInvalidEpoch)
		}
		ss = p.streams[w.Stream]
		if ss == nil {
			ss = &seqState{committed: -1}
			p.streams[w.Stream] = ss
		}
		seq := w.Producer.Seq
		switch {
		case seq < ss.next:
			res.Duplicate, res.NextSeq, res.Records, res.Bytes = true, ss.next, 0, 0
			res.Committed = seq <= ss.committed
			if res.Committed {
				// The committed checkpoint that committed this producer's
				// newest batch on the stream: the one holding seq for a
				// retry of the latest batches, else a later one. Never an
				// open, aborted or merely reserved id.
				res.Checkpoint = ss.committedIn
			} else {
				for _, r := range ss.pending {
					if seq <= r.last {
						res.Checkpoint = r.ckpt
						break
					}
				}
			}
			if h := e.cfg.Hooks.Duplicate; h != nil {
				h(w.Stream)
			}
			return res, nil
		case seq > ss.next:
			e.reject("out_of_order_sequence")
			return res, &SeqError{Producer: p.id, Stream: w.Stream, Got: seq, Expected: ss.next}
		}
	}
	if pl.err != nil {
		e.reject("invalid_records")
		return res, pl.err
	}
	if w.Records == 0 {
		// An empty batch still takes its sequence number, but opens no file.
		if ss != nil {
			e.advanceLocked(ss, w.Producer.ID, w.Stream, w.Producer.Seq)
			res.NextSeq = ss.next
		}
		return res, nil
	}
	if e.held > 0 && e.held+int64(len(w.Data)) > e.cfg.MaxUncommittedBytes {
		e.reject("backpressure")
		return res, ErrBackpressure
	}
	pid, seq := "", int64(0)
	if w.Producer != nil {
		pid, seq = w.Producer.ID, w.Producer.Seq
	}
	if err := e.appendPlacedLocked(&w, pl, pid, seq); err != nil { // streams.go
		if errors.Is(err, ErrBackpressure) {
			e.reject("backpressure")
			return res, err
		}
		e.reject("storage")
		e.noteDiskFullLocked(err)
		return res, err
	}
	e.openBytes += int64(len(w.Data))
	e.openRecords += int64(w.Records)
	e.held += int64(len(w.Data))
	if e.cfg.CheckpointInterval > 0 && e.openBytes > e.cfg.MaxUncommittedBytes/4 {
		// With periodic checkpoints, checkpoint early rather than let the
		// open checkpoint run into backpressure, which idles every
		// producer for a Retry-After. (Interval 0 means only on request.)
		e.kickLocked()
	}
	if ss != nil {
		e.advanceLocked(ss, pid, w.Stream, seq)
		res.NextSeq = ss.next
	}
	if w.Key != nil {
		e.keyAcceptLocked(w.Stream, w.Key)
	}
	if h := e.cfg.Hooks.Accepted; h != nil {
		h(w.Stream, w.Records, len(w.Data))
	}
	return res, nil
}

func (e *Engine) kickLocked() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// earlyLocked asks for the open checkpoint to end now, whatever the
// interval: it holds too many open files.
func (e *Engine) earlyLocked() {
	e.early = true
	e.kickLocked()
}

// advanceLocked accepts seq for (producer, stream) into the open checkpoint.
func (e *Engine) advanceLocked(ss *seqState, pid, stream string, seq int64) {
	ss.next++
	if n := len(ss.pending); n > 0 && ss.pending[n-1].ckpt == e.openID {
		ss.pending[n-1].last = seq
	} else {
		ss.pending = append(ss.pending, pendingRange{ckpt: e.openID, last: seq})
	}
	d := e.dirty[pid]
	if d == nil {
		d = map[string]bool{}
		e.dirty[pid] = d
	}
	d[stream] = true
}

func (e *Engine) reject(reason string) {
	if h := e.cfg.Hooks.Rejected; h != nil {
		h(reason)
	}
}

func (e *Engine) writableLocked() error {
	switch {
	case e.failErr != nil:
		return e.failErr
	case e.closed || e.draining:
		return ErrClosed
	case !e.isReady:
		return ErrNotReady
	}
	return nil
}

// txnLocked returns the open transaction for key, opening or rolling it.
func (e *Engine) txnLocked(key staging.Key) (*openTxn, error) {
	if ot := e.cur[key]; ot != nil && ot.txn.Err() == nil && ot.txn.Size() < e.rollBytes(key.Stream) {
		return ot, nil
	} else if ot != nil && ot.txn.Err() != nil {
		return nil, fmt.Errorf("stream %s: %w", key.Stream, ot.txn.Err())
	}
	if n := len(e.openTxns); e.cfg.MaxOpenFiles > 0 && n >= e.cfg.MaxOpenFiles {
		// Each transaction holds a file descriptor until its pre-commit:
		// end this checkpoint early rather than run out of them.
		e.earlyLocked()
		return nil, fmt.Errorf("stream %s: %d staging files open, the most per checkpoint (--max-open-files): %w", key.Stream, n, ErrBackpressure)
	}
	base := layout.PartName(e.cfg.Node, e.openID, e.nextIndex, key.Ext)
	t, err := staging.Create(e.cfg.FS, staging.TempName(e.cfg.StagingDir, base), e.cfg.BufferSize)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		// Out of file descriptors (the process's or the system's): a
		// checkpoint closes ours; the client retries after it.
		e.earlyLocked()
		return nil, fmt.Errorf("%w: %w", ErrBackpressure, err)
	}
	if err != nil {
		return nil, err
	}
	e.nextIndex++
	ot := &openTxn{key: key, txn: t, final: path.Join(key.Stream, key.Partition, base), conf: e.confFor(key.Stream)}
	e.cur[key] = ot
	e.openTxns = append(e.openTxns, ot)
	return ot, nil
}

// InitProducer gives the producer a new epoch, durably, fencing older
// ones, and is a barrier (I12): before it answers, every batch accepted
// under an older epoch is prepared or aborted, so the next_seq and
// committed_seq it returns — the producer's durable state — survive any
// crash or abort that follows. When the producer has batches not yet
// prepared it runs a checkpoint and waits for its end (bounded by ctx).
func (e *Engine) InitProducer(ctx context.Context, id string) (ProducerState, error) {
	e.initMu.Lock()
	e.mu.Lock()
	err := e.writableLocked()
	e.mu.Unlock()
	if err != nil {
		e.initMu.Unlock()
		return ProducerState{}, err
	}
	rec, err := e.store.InitProducerAt(id, e.cfg.Now())
	if err != nil {
		e.initMu.Unlock()
		if errors.Is(err, durable.ErrDiskFull) {
			// Refused for space with nothing recorded: an answer.
			e.noteDiskFull(err)
			return ProducerState{}, err
		}
		e.fail(err)
		return ProducerState{}, err
	}
	e.diskOK()
	// From here on the older epochs are fenced: nothing more of theirs is
	// accepted, so one barrier after this point covers all of it.
	e.mu.Lock()
	p := e.producers[id]
	if p == nil {
		p = &producer{id: id, streams: map[string]*seqState{}}
		e.producers[id] = p
		e.producerCount.Add(1)
	}
	p.epoch = rec.Epoch
	d := e.durable[id]
	d.ID, d.Epoch = id, rec.Epoch
	if d.Streams == nil {
		d.Streams = rec.Streams
	}
	e.durable[id] = d
	pending := e.unpreparedLocked(p)
	e.mu.Unlock()
	e.initMu.Unlock()

	if pending {
		if _, err := e.Checkpoint(ctx); err != nil {
			return ProducerState{}, fmt.Errorf("init producer %s: barrier: %w", id, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := ProducerState{ID: id, Epoch: rec.Epoch, Fenced: p.fenced, Streams: map[string]recovery.StreamSeq{}}
	for s, ss := range e.durable[id].Streams {
		out.Streams[s] = ss
	}
	for s := range p.streams {
		if _, ok := out.Streams[s]; !ok {
			out.Streams[s] = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
		}
	}
	return out, nil
}

// Wait blocks until checkpoint id has ended: nil if it committed, ErrAborted
// if it aborted.
//
// Waiting on the open checkpoint starts it within Config.CommitLinger
// (group commit).
func (e *Engine) Wait(ctx context.Context, id uint64) error {
	e.mu.Lock()
	o := e.outcomes[id]
	if o != nil {
		e.lingerLocked(id)
	}
	e.mu.Unlock()
	if o == nil {
		c, err := e.store.Get(id)
		if err != nil {
			return err
		}
		switch c.State {
		case recovery.Committed:
			return nil
		case recovery.Aborted:
			return fmt.Errorf("checkpoint %d: %w: %s", id, ErrAborted, c.Error)
		}
		// Prepared and finishing in recovery: poll the store.
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.failed:
				return e.Err()
			case <-time.After(50 * time.Millisecond):
			}
			if c, err := e.store.Get(id); err == nil && c.State == recovery.Committed {
				return nil
			}
		}
	}
	select {
	case <-o.done:
		if o.state == recovery.Committed {
			return nil
		}
		return fmt.Errorf("checkpoint %d: %w: %v", id, ErrAborted, o.err)
	case <-e.failed:
		return e.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Checkpoint runs a checkpoint and waits for its end. A request made while
// one runs is served by the next one. If ctx ends first, the checkpoint
// still completes in the background.
func (e *Engine) Checkpoint(ctx context.Context) (CheckpointResult, error) {
	reply := make(chan ckptReply, 1)
	select {
	case <-e.ready:
	case <-e.failed:
		return CheckpointResult{}, e.Err()
	default:
		return CheckpointResult{}, ErrNotReady
	}
	select {
	case e.reqs <- reply:
	case <-e.failed:
		return CheckpointResult{}, e.Err()
	case <-e.ctx.Done():
		return CheckpointResult{}, ErrClosed
	case <-ctx.Done():
		return CheckpointResult{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.res, r.err
	case <-ctx.Done():
		return CheckpointResult{}, ctx.Err()
	}
}

// run is the coordinator loop: checkpoints on request and on the interval.
func (e *Engine) run() {
	var tick <-chan time.Time
	if e.cfg.CheckpointInterval > 0 {
		t := time.NewTicker(e.cfg.CheckpointInterval)
		defer t.Stop()
		tick = t.C
	}
	var (
		linger     *time.Timer
		lingerC    <-chan time.Time
		lastLinger time.Time
		lastShared int // waits of the last linger-started checkpoint
	)
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for {
		var waiters []chan ckptReply
		select {
		case <-e.ctx.Done():
			return
		case <-e.failed:
			return
		case <-e.soon:
			if lingerC == nil {
				linger = time.NewTimer(e.lingerDelay(lastLinger, lastShared))
				lingerC = linger.C
			}
			continue
		case <-lingerC:
			lingerC = nil
			want, waits := e.wantsCommit()
			if !want {
				continue // a checkpoint since took the waiting batches
			}
			lastLinger, lastShared = time.Now(), waits
		case r := <-e.reqs:
			waiters = append(waiters, r)
		drain:
			for {
				select {
				case r := <-e.reqs:
					waiters = append(waiters, r)
				default:
					break drain
				}
			}
		case <-tick:
			if e.idle() {
				continue // nothing to commit: no barrier, no I/O
			}
		case <-e.kick:
			e.mu.Lock()
			big := e.openBytes > e.cfg.MaxUncommittedBytes/4 || e.early
			e.mu.Unlock()
			if !big {
				continue // the checkpoint that just ran already took it
			}
		}
		res, err := e.checkpoint()
		for _, w := range waiters {
			w <- ckptReply{res, err}
		}
	}
}

// idle reports whether the open checkpoint holds nothing to commit.
func (e *Engine) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.openTxns) == 0 && len(e.dirty) == 0
}

// Shutdown stops accepting writes, runs a final checkpoint (bounded by
// ctx) so accepted batches commit, then closes the engine.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.draining = true
	ready := e.isReady && e.failErr == nil
	e.publishLocked()
	e.mu.Unlock()
	var err error
	if ready {
		var res CheckpointResult
		res, err = e.Checkpoint(ctx)
		if err == nil && res.State == recovery.Aborted {
			err = fmt.Errorf("final checkpoint %d: %w: %s", res.ID, ErrAborted, res.Error)
		}
		if err != nil {
			err = fmt.Errorf("final checkpoint: %w", err)
		} else {
			// Everything accepted is committed: hand the node id over
			// now rather than after the timeout.
			err = e.releaseLease(ctx)
		}
	}
	return errors.Join(err, e.Close())
}

// Close stops the engine at once, like a crash would but with file handles
// closed: open transactions stay as temp files and a prepared checkpoint
// still committing stays prepared; the next Open recovers both.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.publishLocked()
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	e.mu.Lock()
	for _, ot := range e.openTxns {
		ot.txn.Release()
	}
	e.mu.Unlock()
	if err := e.store.Close(); err != nil {
		return fmt.Errorf("close state store: %w", err)
	}
	return nil
}
