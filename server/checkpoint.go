package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"golang.org/x/sync/errgroup"
)

// cut is one checkpoint past its barrier.
type cut struct {
	ck     *recovery.Checkpoint // its record: id, counts, sequence numbers, keys, files
	txns   []*openTxn
	out    *outcome
	began  time.Time
	log    *slog.Logger
	failed bool  // the engine stopped during it: the result is not final
	doomed *doom // a file of it can't be finished (doomed.go): it aborts
}

func (c *cut) result(state recovery.State) CheckpointResult {
	return CheckpointResult{ID: c.ck.ID, State: state, Records: c.ck.Records, Bytes: c.ck.Bytes, Files: []committer.File{},
		DurationMS: time.Since(c.began).Milliseconds(), Seconds: time.Since(c.began).Seconds()}
}

// checkpoint runs one checkpoint: reserve ids, barrier, pre-commit,
// prepared, commit. Only the run loop calls it.
func (pipe *pipeline) checkpoint(ctx context.Context) (CheckpointResult, error) {
	began := time.Now()
	// 0. The barrier hands out the next id, an abort the one after it:
	// both must be reserved before any answer can name them (I8).
	if err := pipe.reserveIDs(ctx); err != nil {
		if pipe.e.health.failOn(err) {
			return CheckpointResult{}, pipe.e.Err()
		}
		// Refused for space, nothing recorded: the next checkpoint tries
		// again. Without the ids this one hands out, no barrier. With
		// them (only the reservation ahead was refused) it goes on: on a
		// full disk its pre-commit or its abort (a doomed checkpoint's,
		// doomed.go) frees the space its staging files hold.
		pipe.e.health.noteDiskFull(err)
		if pipe.reserved.Load() < pipe.e.ing.open()+2 {
			// A doomed open checkpoint still aborts alone when the id
			// that opens after it is reserved (doomed.go).
			pipe.abortDoomedAlone(true)
			return CheckpointResult{}, err
		}
	}
	// 1. Barrier: swap the open checkpoint under the ingest lock.
	c, res, err := pipe.barrier(began)
	if c == nil {
		return res, err // nothing to commit, or the engine stopped
	}
	defer pipe.e.ing.endInflight()
	// 2. Pre-commit every file in parallel, then make their names durable.
	files, err := pipe.preCommit(ctx, c)
	if err != nil {
		pipe.e.health.noteDiskFull(err)
		res := pipe.abort(ctx, c, files, err)
		// Aborted, so its clients resend; and a failed fsync (of a staging
		// file or the staging directory) stops the engine, as everywhere
		// (I14): the disk may have dropped other pages it said it wrote.
		if pipe.e.health.failOn(err) {
			return res, err
		}
		return res, nil
	}
	c.ck.Files, c.ck.PreparedAt = files, pipe.e.cfg.Now().UTC()
	// 3. Prepared: from here on, the checkpoint commits.
	if err := pipe.recordPrepared(c); err != nil {
		if !c.failed {
			return pipe.abort(ctx, c, files, err), nil // refused for space: not prepared
		}
		return c.result(""), err
	}
	// 4. Commit, retried until it succeeds (I4).
	if err := pipe.commit(ctx, c); err != nil {
		return c.result(""), err
	}
	return pipe.committed(c), nil
}

// barrier ends the open checkpoint and opens the next one. It returns nil
// and the result when there was nothing to commit (or the engine stopped).
func (pipe *pipeline) barrier(began time.Time) (*cut, CheckpointResult, error) {
	start := pipe.e.cfg.Now().UTC()
	c, empty, err := pipe.e.ing.cut(began, start)
	if err != nil {
		return nil, CheckpointResult{}, err
	}
	if empty != nil {
		res, err := pipe.empty(empty, began)
		return nil, res, err
	}
	return c, CheckpointResult{}, nil
}

// cut swaps the open checkpoint under the ingest lock and hands it to the
// pipeline: nil and the open checkpoint (as empty) when it holds nothing
// to commit, the error when the engine stopped.
func (in *ingest) cut(began, start time.Time) (*cut, *emptyCut, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.e.health.failErr != nil {
		return nil, nil, in.e.health.failErr
	}
	if len(in.openTxns) == 0 && len(in.prods.dirty) == 0 {
		empty := &emptyCut{id: in.openID, out: in.outcomes[in.openID]}
		in.openNextLocked()
		return nil, empty, nil
	}
	id := in.openID
	c := &cut{txns: in.openTxns, out: in.outcomes[id], began: began, log: in.e.log.With("checkpoint", id)}
	if d := in.doomedLocked(); d != nil && d.id <= id {
		c.doomed = d
	}
	in.inflight = id // the orphan sweep leaves its intents alone
	keys, keyPol := in.keyBarrierLocked(start)
	c.ck = &recovery.Checkpoint{ID: id, StartedAt: start, Records: in.openRecords, Bytes: in.openBytes,
		Seqs: in.prods.barrier(), Keys: keys, KeyPolicy: keyPol}
	in.openNextLocked()
	return c, nil, nil
}

// emptyCut is an open checkpoint that ended holding nothing to commit.
type emptyCut struct {
	id  uint64
	out *outcome
}

// endInflight: no checkpoint is past its barrier any more.
func (in *ingest) endInflight() {
	in.mu.Lock()
	in.inflight = 0
	in.mu.Unlock()
}

// recordPrepared records c prepared, in one store transaction with its
// producers' sequence numbers and keys. A refusal for space records
// nothing and is returned, to abort c; any other failure stops the engine
// (the record may or may not be durable: only recovery can tell) and sets
// c.failed.
func (pipe *pipeline) recordPrepared(c *cut) error {
	if err := pipe.e.store.Prepare(c.ck); err != nil {
		err = fmt.Errorf("record prepared checkpoint %d: %w", c.ck.ID, err)
		if errors.Is(err, ErrDiskFull) {
			pipe.e.health.noteDiskFull(err)
			return err
		}
		pipe.e.health.fail(err)
		c.failed = true
		return pipe.e.Err()
	}
	pipe.e.health.diskOK()
	pipe.e.ing.prepared(c.ck)
	c.log.Debug("prepared", "files", len(c.ck.Files), "records", c.ck.Records, "bytes", c.ck.Bytes)
	// A doomed open checkpoint need not wait for c's commit (doomed.go).
	pipe.abortDoomedOpen()
	return nil
}

// prepared binds ck's keys and sequence numbers: ck is recorded prepared.
func (in *ingest) prepared(ck *recovery.Checkpoint) {
	in.mu.Lock()
	in.lastPrepared = ck.ID
	in.keyPreparedLocked(ck.Keys)
	in.prods.prepared(ck.Seqs)
	in.mu.Unlock()
}

// commit finishes prepared checkpoint c, retrying until it succeeds (I4),
// the engine closes (ErrClosed: recovery finishes it), or the policy stops
// the engine. While it fails, the checkpoint is stuck: Status and /readyz
// say why.
func (pipe *pipeline) commit(ctx context.Context, c *cut) error {
	err := pipe.e.pol.retry(ctx, func() error { return pipe.e.fin.Finish(ctx, c.ck) }, func(f failure) {
		pipe.e.health.noteStuck(c.ck.ID, f)
		c.log.Warn("commit failed, retrying", "err", f.err, "attempt", f.attempt, "verdict", f.verdict)
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		return pipe.e.Err()
	}
	return err
}

// committed publishes c's commit to the producer table, its waiters and
// hooks.
func (pipe *pipeline) committed(c *cut) CheckpointResult {
	pipe.e.ing.committed(c.ck)
	res := c.result(recovery.Committed)
	res.Files = c.ck.Files
	pipe.finished(c.ck.ID, c.out, res, nil, c.ck.Bytes)
	c.log.Info("checkpoint committed", "files", len(c.ck.Files), "records", c.ck.Records, "bytes", c.ck.Bytes, "duration_ms", res.DurationMS)
	return res
}

// committed publishes ck's commit to the producer table; nothing holds a
// prepared checkpoint back any more.
func (in *ingest) committed(ck *recovery.Checkpoint) {
	in.mu.Lock()
	in.e.health.stuck, in.e.health.diskFull = stuck{}, nil
	in.prods.committed(ck.ID, ck.Seqs)
	in.mu.Unlock()
}

// empty ends the open checkpoint, which held nothing to commit (the cut
// already opened the next one): it is committed without a record or an
// fsync (DESIGN: an idle service does no I/O). Its id and the next were
// reserved by reserveIDs before the barrier (I8).
func (pipe *pipeline) empty(c *emptyCut, began time.Time) (CheckpointResult, error) {
	id, out := c.id, c.out
	res := CheckpointResult{ID: id, State: recovery.Committed, Files: []committer.File{},
		DurationMS: time.Since(began).Milliseconds(), Seconds: time.Since(began).Seconds()}
	pipe.finished(id, out, res, nil, 0)
	return res, nil
}

// reserveIDs makes sure the ids this checkpoint may open (the next, and
// the one after it should it abort) are durably reserved, reserving the
// next block of ids once half of the current one is used, like a database
// sequence's cache. A restart continues beyond the highest reservation, so
// no id an answer named is ever handed out again (I8). Only the coordinator
// calls it, so the reservation cannot race with the barrier.
func (pipe *pipeline) reserveIDs(ctx context.Context) error {
	open, reserved := pipe.e.ing.open(), pipe.reserved.Load()
	if reserved >= open+pipe.e.cfg.idBlock/2+2 {
		return nil
	}
	upto := open + pipe.e.cfg.idBlock + 2
	if err := pipe.e.store.Reserve(upto); err != nil {
		return fmt.Errorf("reserve checkpoint ids up to %d: %w", upto, err)
	}
	if err := pipe.e.life.leaseReserve(ctx, upto); err != nil {
		return fmt.Errorf("reserve checkpoint ids up to %d: %w", upto, err)
	}
	pipe.reserved.Store(upto) // only the coordinator raises it
	return nil
}

// open returns the open checkpoint's id.
func (in *ingest) open() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.openID
}

// openNextLocked opens a new, empty checkpoint after the current one.
func (in *ingest) openNextLocked() {
	in.openID++
	in.openTxns, in.cur, in.nextIndex = nil, map[staging.Key]*openTxn{}, 0
	in.openBytes, in.openRecords, in.early = 0, 0, false
	in.outcomes[in.openID] = newOutcome()
	in.e.health.publishLocked()
	// Keep outcomes of recent checkpoints only; older ones are read from the store.
	if old := in.openID - 1024; in.openID > 1024 {
		delete(in.outcomes, old)
	}
}

// finished publishes a checkpoint's end to its waiters and hooks.
func (pipe *pipeline) finished(id uint64, out *outcome, res CheckpointResult, err error, release int64) {
	pipe.e.ing.finished(id, res.State, release)
	if out != nil {
		out.state, out.err = res.State, err
		close(out.done)
	}
	if h := pipe.e.cfg.Hooks.Checkpoint; h != nil {
		h(res)
	}
}

// finished gives back a checkpoint's bytes and notes its commit.
func (in *ingest) finished(id uint64, state recovery.State, release int64) {
	in.mu.Lock()
	in.held -= release
	if state == recovery.Committed && id > in.lastDone {
		in.lastDone = id
	}
	in.e.health.publishLocked()
	in.mu.Unlock()
}

// preCommit flushes, fsyncs and closes every transaction, fsyncs the
// staging directory, and prepares every file with the committer. It returns
// the files prepared so far even on error, so abort can undo them.
func (pipe *pipeline) preCommit(ctx context.Context, c *cut) ([]committer.File, error) {
	if c.doomed != nil {
		// A file of c can't be finished (doomed.go): c aborts now,
		// without syncing the others first.
		return nil, fmt.Errorf("pre-commit: %w", c.doomed.err)
	}
	id, txns := c.ck.ID, pipe.dropEmpty(c.txns) // streams.go
	files := make([]committer.File, len(txns))
	errs := make([]error, len(txns))
	// Every file is tried, whatever the others do: errors are kept in
	// errs, not used to cancel.
	var g errgroup.Group
	g.SetLimit(pipe.e.cfg.Parallel)
	for i, ot := range txns {
		g.Go(func() error {
			sum, err := ot.txn.PreCommit()
			if err != nil {
				errs[i] = fmt.Errorf("stream %s: %w", ot.key.Stream, err)
				return nil
			}
			pipe.removePlain(sum) // streams.go
			prod := make(map[string]committer.SeqRanges, len(sum.Producers))
			for p, rs := range sum.Producers {
				prod[p] = rs
			}
			files[i] = committer.File{Stream: ot.key.Stream, Temp: sum.Temp, Final: ot.final, Bytes: sum.Bytes,
				Records: sum.Records, CRC32C: sum.CRC32C, Producers: prod}
			files[i].Format, files[i].Compression, files[i].SchemaVersion = ot.fileFormat()
			if ot.conf != nil && ot.conf.cfg.IsTable() {
				files[i].Table = streamconf.TableIceberg
			}
			return nil
		})
	}
	_ = g.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if err := durable.SyncDir(pipe.e.cfg.FS, pipe.e.cfg.StagingDir); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if err := pipe.e.life.leaseCheck(); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if _, ok := pipe.e.cfg.Committer.(committer.RemotePreparer); ok {
		if err := pipe.e.store.PutIntents(id, files); err != nil {
			return nil, fmt.Errorf("pre-commit: record upload intents: %w", err)
		}
	}
	prepared := make([]committer.File, len(files))
	g = errgroup.Group{}
	g.SetLimit(pipe.e.cfg.Parallel)
	for i := range files {
		g.Go(func() error {
			prepared[i], errs[i] = pipe.e.cfg.Committer.Prepare(ctx, files[i])
			return nil
		})
	}
	_ = g.Wait()
	if err := errors.Join(errs...); err != nil {
		for i := range prepared {
			if errs[i] != nil {
				prepared[i] = files[i] // abort what a failed Prepare may have started
			}
		}
		return prepared, fmt.Errorf("pre-commit: %w", err)
	}
	return prepared, nil
}

// abort undoes checkpoint c before its "prepared" record, and with it the
// open checkpoint after it, whose batches may follow sequence numbers c
// lost. Producer state returns to the last prepared checkpoint's.
func (pipe *pipeline) abort(ctx context.Context, c *cut, files []committer.File, cause error) CheckpointResult {
	ck := c.ck
	c.log.Error("checkpoint aborted", "err", cause)
	pipe.abortFiles(ctx, c, files)
	ck.Files = files
	pipe.recordedAbort(ck.ID, pipe.e.store.Abort(ck, cause.Error()), c.log)
	next := pipe.e.ing.abortOpen(c, fmt.Sprintf("aborted with checkpoint %d", ck.ID))
	res := c.result(recovery.Aborted)
	res.Error = cause.Error()
	pipe.finished(ck.ID, c.out, res, cause, ck.Bytes)
	pipe.abortedOpen(next, cause, c.log)
	return res
}

// recordedAbort applies the failure policy to the record of checkpoint
// id's abort.
func (pipe *pipeline) recordedAbort(id uint64, err error, log *slog.Logger) {
	if err != nil && !pipe.e.health.failOn(err) {
		// Unrecorded, the checkpoint is simply not prepared: recovery
		// treats it as aborted. Nothing of it was made final, and its
		// id is not handed out again: ids are reserved (I8).
		log.Warn("record aborted checkpoint", "checkpoint", id, "err", err)
	}
}

// abortedOpen ends the open checkpoint that abortOpenLocked aborted: the
// policy on its record, its waiters told "aborted" (cause), its bytes
// given back.
func (pipe *pipeline) abortedOpen(ao abortedOpen, cause error, log *slog.Logger) {
	pipe.recordedAbort(ao.id, ao.recordErr, log)
	res := CheckpointResult{ID: ao.id, State: recovery.Aborted, Error: cause.Error()}
	pipe.finished(ao.id, ao.out, res, cause, ao.bytes)
}

// abortFiles deletes c's staging files and aborts what the committer
// prepared of files; the intents of the aborts that failed stay for the
// orphan sweep and recovery.
func (pipe *pipeline) abortFiles(ctx context.Context, c *cut, files []committer.File) {
	for _, ot := range c.txns {
		if err := ot.txn.Abort(); err != nil {
			c.log.Warn("delete staging file; recovery will", "path", ot.txn.Name(), "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	var aborted, failed []committer.File
	for _, f := range files {
		if f.Final == "" {
			continue
		}
		if err := pipe.e.cfg.Committer.Abort(ctx, f); err != nil {
			failed = append(failed, f)
			c.log.Warn("abort file; the orphan sweep and recovery retry", "path", f.Final, "err", err)
			continue
		}
		aborted = append(aborted, f)
	}
	cancel()
	if _, ok := pipe.e.cfg.Committer.(committer.RemotePreparer); !ok {
		return
	}
	// An intent goes only once its abort succeeded (I10): a failed one (S3
	// down, or Close cancelled the aborts of a shutdown cut short) stays
	// for the orphan sweep and recovery, updated with what Prepare
	// returned (the upload id) when it got that far.
	keys := make([]string, 0, len(aborted))
	for _, f := range aborted {
		keys = append(keys, recovery.IntentKey(c.ck.ID, f.Final))
	}
	if err := pipe.e.store.DeleteIntents(keys...); err != nil && !pipe.e.health.failOn(err) {
		c.log.Warn("delete upload intents; recovery aborts again", "err", err)
	}
	if len(failed) > 0 {
		if err := pipe.e.store.PutIntents(c.ck.ID, failed); err != nil && !pipe.e.health.failOn(err) {
			c.log.Warn("update upload intents; the recorded ones stay", "err", err)
		}
	}
}

// abortOpen aborts the open checkpoint along with c (see
// abortOpenLocked); c's keys are forgotten too, and the producers c
// touched reset.
func (in *ingest) abortOpen(c *cut, reason string) abortedOpen {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.keyForgetLocked(c.ck.Keys)
	return in.abortOpenLocked(c.ck.ID, c.ck.Seqs, reason, c.log)
}

// abortedOpen is an open checkpoint aborted by abortOpenLocked.
type abortedOpen struct {
	id        uint64
	out       *outcome
	bytes     int64 // its uncommitted bytes, to give back
	recordErr error // of the record of its abort
}

// abortOpenLocked aborts the open checkpoint, with from, the aborted
// checkpoint before it (its own id when alone: doomed.go), and opens the
// next: deletes its staging files, forgets its keys, returns the
// producers it touched, and those in seqs (from's), to their last
// prepared state, and records it aborted with reason. Its waiters are
// answered by pipeline.abortedOpen, without the lock. Every abort of an
// open checkpoint is this one.
func (in *ingest) abortOpenLocked(from uint64, seqs map[string]map[string]int64, reason string, log *slog.Logger) abortedOpen {
	ao := abortedOpen{id: in.openID, out: in.outcomes[in.openID], bytes: in.openBytes}
	// Its keys are forgotten, so their retries are accepted.
	in.keyForgetLocked(in.keys.open)
	in.keys.open = nil
	for _, ot := range in.openTxns {
		if err := ot.txn.Abort(); err != nil {
			log.Warn("delete staging file; recovery will", "checkpoint", ao.id, "path", ot.txn.Name(), "err", err)
		}
	}
	// Only producers this checkpoint or from touched differ from their
	// durable state: reset those, not the whole table.
	in.prods.abort(seqs, from)
	in.abortedThrough = ao.id // a doom of it or of from is over (doomed.go)
	in.openNextLocked()
	// Recorded under the lock: no barrier can cut the next one, and so
	// no later checkpoint be prepared, before the record.
	ao.recordErr = in.e.store.Abort(&recovery.Checkpoint{ID: ao.id, StartedAt: in.e.cfg.Now().UTC()}, reason)
	return ao
}
