package server

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// Opening the engine and the recovery on every start.

// Open opens the state store and starts recovery in the background. A
// corrupt store is an error here, naming the file: eosink refuses to start.
// Writes are refused with ErrNotReady until Ready is closed.
func Open(cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Node == "" || cfg.FS == nil || cfg.StagingDir == "" || cfg.StorePath == "" || cfg.Committer == nil || cfg.Publisher == nil {
		return nil, errors.New("open engine: node, fs, staging dir, store path, committer and publisher are required")
	}
	if !layout.Node(cfg.Node) {
		return nil, fmt.Errorf("open engine: node id %q: want ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", cfg.Node)
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
		cur: map[staging.Key]*openTxn{}, prods: newProducerTable(st), outcomes: map[uint64]*outcome{},
		recovering: "starting",
	}
	if err := e.loadStreams(); err != nil { // streams.go
		cancel()
		_ = st.Close() // refusing to start; the load error is the one to report
		return nil, err
	}
	e.pol = policy{min: cfg.RetryMin, max: cfg.RetryMax, stop: e.fail}
	if _, remote := cfg.Committer.(committer.RemotePreparer); !remote {
		// An S3 upload is bound to its key at Prepare: only a local
		// destination can commit a file under another name.
		e.fin.Displace = e.displace
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

func (e *Engine) start() {
	defer e.wg.Done()
	if !e.takeLease() || !e.syncStreams() || !e.recover() { // syncStreams: streamstore.go
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

// recover replays the store until it succeeds or the engine closes, then
// opens the first checkpoint and reports ready (DESIGN "Recovery").
func (e *Engine) recover() bool {
	begin := time.Now()
	res, inDest, ok := e.replay()
	if !ok {
		return false
	}
	open := e.firstOpenID(res.LastID, inDest)
	reserved := open + e.cfg.idBlock - 1
	shown := func(err error) string { return "reserve checkpoint ids: " + err.Error() }
	if !e.retry("reserve checkpoint ids", shown, func() error { return e.store.Reserve(reserved) }) {
		return false
	}
	if !e.retry("record reserved checkpoint ids in the node lease", nil, func() error {
		err := e.leaseReserve(reserved)
		if errors.Is(err, ErrLeaseLost) {
			return errStop
		}
		return err
	}) {
		return false
	}
	// Stores written before committed_in was kept: name the newest
	// committed checkpoint instead, never a reserved or aborted id.
	var newest uint64
	if !e.retry("read newest committed checkpoint", nil, func() (err error) {
		newest, err = e.store.NewestCommitted()
		return err
	}) {
		return false
	}
	var keys []recovery.Key
	if !e.retry("read idempotency keys", nil, func() (err error) {
		keys, err = e.store.Keys(e.cfg.Now().Add(-e.cfg.IdempotencyWindow))
		return err
	}) {
		return false
	}
	e.mu.Lock()
	e.reserved = reserved
	e.keyLoadLocked(keys)
	e.prods.legacyIn = newest
	e.openID = open
	e.lastDone = newest // ids between it and firstID the store lacks were never used
	e.firstID = open
	e.outcomes[e.openID] = newOutcome()
	e.isReady = true
	e.recovering, e.diskFull = "", nil
	e.publishLocked()
	e.mu.Unlock()
	e.recount()
	e.countOrphans(recovery.SweepResult{Intents: res.Aborted, Removed: res.Orphans})
	e.log.Info("recovery done", "recommitted", len(res.Recommitted), "removed", len(res.Removed),
		"aborted_uploads", len(res.Aborted), "orphans", len(res.Orphans), "producers", e.ProducerCount(),
		"checkpoint", e.openID, "duration_ms", time.Since(begin).Milliseconds())
	close(e.ready)
	return true
}

// retry runs fn under the failure policy until it succeeds, and reports
// whether it did. It gives up when the engine closes or the policy stops
// it. With shown, the error shows (as shown words it) in Status as why
// recovery is not done.
func (e *Engine) retry(what string, shown func(error) string, fn func() error) bool {
	return e.pol.retry(e.ctx, fn, func(f failure) {
		if shown != nil {
			e.noteDiskFull(f.err)
			e.mu.Lock()
			e.recovering = shown(f.err)
			e.publishLocked()
			e.mu.Unlock()
		}
		if f.planned {
			e.log.Debug(what+", waiting", "err", f.err)
			return
		}
		e.log.Error(what+", retrying", "err", f.err, "attempt", f.attempt, "verdict", f.verdict)
	}) == nil
}

// replay runs the recovery replay (recovery.Replay) and, when the store is
// behind the destination, rebuilds the producers from it (step 5). It
// returns the replay's result and the highest manifest id found.
func (e *Engine) replay() (*recovery.Result, uint64, bool) {
	rp := recovery.Replay{Finisher: e.fin, FS: e.cfg.FS, StagingDir: e.cfg.StagingDir, Logger: e.log}
	var res *recovery.Result
	var inDest uint64
	ok := e.retry("recovery failed", error.Error, func() error {
		var err error
		if res, err = rp.Run(e.ctx); err != nil {
			return err
		}
		if inDest, err = e.highestManifestID(e.ctx); err != nil {
			return err
		}
		if inDest > 0 && inDest+2 > res.LastID {
			return e.rebuildProducers()
		}
		return nil
	})
	return res, inDest, ok
}

// firstOpenID returns the id of the first checkpoint to open. Ids are
// handed out (in answers) before anything records them, but only from a
// block reserved durably beforehand (see reserveIDs), so every id a former
// run may have named is at most lastID, or the highest id any former
// incarnation reserved in the lease (also when the store was lost, I8).
func (e *Engine) firstOpenID(lastID, inDest uint64) uint64 {
	open := max(lastID, e.leaseReserved(max(lastID, inDest))) + 1
	if inDest > 0 && inDest+2 > lastID {
		// Recovery step 5: the store is behind the destination (lost, or
		// an older copy). A store that kept up has reserved at least two
		// ids beyond every manifest. Never reuse an id the destination
		// shows (I8). Ids of empty or aborted checkpoints after the newest
		// manifest left no trace there: skip a whole block beyond it,
		// which covers every id a run hands out between two reservations
		// unless more than a block of them passed without data.
		open = max(open, inDest+e.cfg.idBlock+2, e.lostIDsFloor(inDest)) // lease.go
		e.log.Error("the state store is behind the destination (lost, or an older copy): continuing beyond the highest manifest id found",
			"store", e.cfg.StorePath, "store_last_checkpoint", lastID, "manifest_checkpoint", inDest, "checkpoint", open)
	}
	return open
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
