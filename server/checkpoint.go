package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
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
	failed bool // the engine stopped during it: the result is not final
}

func (c *cut) result(state recovery.State) CheckpointResult {
	return CheckpointResult{ID: c.ck.ID, State: state, Records: c.ck.Records, Bytes: c.ck.Bytes, Files: []committer.File{},
		DurationMS: time.Since(c.began).Milliseconds(), Seconds: time.Since(c.began).Seconds()}
}

// checkpoint runs one checkpoint: reserve ids, barrier, pre-commit,
// prepared, commit. Only the run loop calls it.
func (e *Engine) checkpoint() (CheckpointResult, error) {
	began := time.Now()
	// 0. The barrier hands out the next id, an abort the one after it:
	// both must be reserved before any answer can name them (I8).
	if err := e.reserveIDs(); err != nil {
		if e.health.failOn(err) {
			return CheckpointResult{}, e.Err()
		}
		// Refused for space, nothing recorded: no barrier, try later.
		e.health.noteDiskFull(err)
		return CheckpointResult{}, err
	}
	// 1. Barrier: swap the open checkpoint under the ingest lock.
	c, res, err := e.barrier(began)
	if c == nil {
		return res, err // nothing to commit, or the engine stopped
	}
	defer e.endInflight()
	// 2. Pre-commit every file in parallel, then make their names durable.
	files, err := e.preCommit(c.ck.ID, c.txns)
	if err != nil {
		e.health.noteDiskFull(err)
		return e.abort(c, files, err), nil
	}
	c.ck.Files, c.ck.PreparedAt = files, e.cfg.Now().UTC()
	// 3. Prepared: from here on, the checkpoint commits.
	if err := e.recordPrepared(c); err != nil {
		if !c.failed {
			return e.abort(c, files, err), nil // refused for space: not prepared
		}
		return c.result(""), err
	}
	// 4. Commit, retried until it succeeds (I4).
	if err := e.commit(c); err != nil {
		return c.result(""), err
	}
	return e.committed(c), nil
}

// barrier ends the open checkpoint and opens the next one. It returns nil
// and the result when there was nothing to commit (or the engine stopped).
func (e *Engine) barrier(began time.Time) (*cut, CheckpointResult, error) {
	start := e.cfg.Now().UTC()
	e.mu.Lock()
	if e.health.failErr != nil {
		e.mu.Unlock()
		return nil, CheckpointResult{}, e.health.failErr
	}
	if len(e.openTxns) == 0 && len(e.prods.dirty) == 0 {
		res, err := e.emptyLocked(began)
		return nil, res, err
	}
	id := e.openID
	c := &cut{txns: e.openTxns, out: e.outcomes[id], began: began, log: e.log.With("checkpoint", id)}
	e.inflight = id // the orphan sweep leaves its intents alone
	keys, keyPol := e.keyBarrierLocked(start)
	c.ck = &recovery.Checkpoint{ID: id, StartedAt: start, Records: e.openRecords, Bytes: e.openBytes,
		Seqs: e.prods.barrier(), Keys: keys, KeyPolicy: keyPol}
	e.openNextLocked()
	e.mu.Unlock()
	return c, CheckpointResult{}, nil
}

func (e *Engine) endInflight() {
	e.mu.Lock()
	e.inflight = 0
	e.mu.Unlock()
}

// recordPrepared records c prepared, in one store transaction with its
// producers' sequence numbers and keys. A refusal for space records
// nothing and is returned, to abort c; any other failure stops the engine
// (the record may or may not be durable: only recovery can tell) and sets
// c.failed.
func (e *Engine) recordPrepared(c *cut) error {
	if err := e.store.Prepare(c.ck); err != nil {
		err = fmt.Errorf("record prepared checkpoint %d: %w", c.ck.ID, err)
		if errors.Is(err, ErrDiskFull) {
			e.health.noteDiskFull(err)
			return err
		}
		e.health.fail(err)
		c.failed = true
		return e.Err()
	}
	e.health.diskOK()
	e.mu.Lock()
	e.lastPrepared = c.ck.ID
	e.keyPreparedLocked(c.ck.Keys)
	e.prods.prepared(c.ck.Seqs)
	e.mu.Unlock()
	c.log.Debug("prepared", "files", len(c.ck.Files), "records", c.ck.Records, "bytes", c.ck.Bytes)
	return nil
}

// commit finishes prepared checkpoint c, retrying until it succeeds (I4),
// the engine closes (ErrClosed: recovery finishes it), or the policy stops
// the engine. While it fails, the checkpoint is stuck: Status and /readyz
// say why.
func (e *Engine) commit(c *cut) error {
	err := e.pol.retry(e.ctx, func() error { return e.fin.Finish(e.ctx, c.ck) }, func(f failure) {
		e.health.noteStuck(c.ck.ID, f)
		c.log.Warn("commit failed, retrying", "err", f.err, "attempt", f.attempt, "verdict", f.verdict)
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		return e.Err()
	}
	return err
}

// committed publishes c's commit to the producer table, its waiters and
// hooks.
func (e *Engine) committed(c *cut) CheckpointResult {
	e.mu.Lock()
	e.health.stuck, e.health.diskFull = stuck{}, nil
	e.prods.committed(c.ck.ID, c.ck.Seqs)
	e.mu.Unlock()
	res := c.result(recovery.Committed)
	res.Files = c.ck.Files
	e.finished(c.ck.ID, c.out, res, nil, c.ck.Bytes)
	c.log.Info("checkpoint committed", "files", len(c.ck.Files), "records", c.ck.Records, "bytes", c.ck.Bytes, "duration_ms", res.DurationMS)
	return res
}

// emptyLocked ends the open checkpoint, which holds nothing to commit: it is
// committed without a record or an fsync (DESIGN: an idle service does no
// I/O), and the next one opens. Its id and the next were reserved by
// reserveIDs before the barrier (I8). Called with e.mu held; it unlocks it.
func (e *Engine) emptyLocked(began time.Time) (CheckpointResult, error) {
	id, out := e.openID, e.outcomes[e.openID]
	e.openNextLocked()
	e.mu.Unlock()
	res := CheckpointResult{ID: id, State: recovery.Committed, Files: []committer.File{},
		DurationMS: time.Since(began).Milliseconds(), Seconds: time.Since(began).Seconds()}
	e.finished(id, out, res, nil, 0)
	return res, nil
}

// reserveIDs makes sure the ids this checkpoint may open (the next, and
// the one after it should it abort) are durably reserved, reserving the
// next block of ids once half of the current one is used, like a database
// sequence's cache. A restart continues beyond the highest reservation, so
// no id an answer named is ever handed out again (I8). Only the coordinator
// calls it, so the reservation cannot race with the barrier.
func (e *Engine) reserveIDs() error {
	e.mu.Lock()
	open, reserved := e.openID, e.reserved
	e.mu.Unlock()
	if reserved >= open+e.cfg.idBlock/2+2 {
		return nil
	}
	upto := open + e.cfg.idBlock + 2
	if err := e.store.Reserve(upto); err != nil {
		return fmt.Errorf("reserve checkpoint ids up to %d: %w", upto, err)
	}
	if err := e.leaseReserve(upto); err != nil {
		return fmt.Errorf("reserve checkpoint ids up to %d: %w", upto, err)
	}
	e.mu.Lock()
	e.reserved = upto
	e.mu.Unlock()
	return nil
}

// openNextLocked opens a new, empty checkpoint after the current one.
func (e *Engine) openNextLocked() {
	e.openID++
	e.openTxns, e.cur, e.nextIndex = nil, map[staging.Key]*openTxn{}, 0
	e.openBytes, e.openRecords, e.early = 0, 0, false
	e.outcomes[e.openID] = newOutcome()
	e.health.publishLocked()
	// Keep outcomes of recent checkpoints only; older ones are read from the store.
	if old := e.openID - 1024; e.openID > 1024 {
		delete(e.outcomes, old)
	}
}

// finished publishes a checkpoint's end to its waiters and hooks.
func (e *Engine) finished(id uint64, out *outcome, res CheckpointResult, err error, release int64) {
	e.mu.Lock()
	e.held -= release
	if res.State == recovery.Committed && id > e.lastDone {
		e.lastDone = id
	}
	e.health.publishLocked()
	e.mu.Unlock()
	if out != nil {
		out.state, out.err = res.State, err
		close(out.done)
	}
	if h := e.cfg.Hooks.Checkpoint; h != nil {
		h(res)
	}
}

// preCommit flushes, fsyncs and closes every transaction, fsyncs the
// staging directory, and prepares every file with the committer. It returns
// the files prepared so far even on error, so abort can undo them.
func (e *Engine) preCommit(id uint64, txns []*openTxn) ([]committer.File, error) {
	txns = e.dropEmpty(txns) // streams.go
	files := make([]committer.File, len(txns))
	errs := make([]error, len(txns))
	// Every file is tried, whatever the others do: errors are kept in
	// errs, not used to cancel.
	var g errgroup.Group
	g.SetLimit(e.cfg.Parallel)
	for i, ot := range txns {
		g.Go(func() error {
			sum, err := ot.txn.PreCommit()
			if err == nil {
				sum, err = e.encodeStaged(ot, sum) // streams.go
			}
			if err != nil {
				errs[i] = err
				return nil
			}
			prod := make(map[string]committer.SeqRanges, len(sum.Producers))
			for p, rs := range sum.Producers {
				prod[p] = rs
			}
			files[i] = committer.File{Stream: ot.key.Stream, Temp: sum.Temp, Final: ot.final, Bytes: sum.Bytes,
				Records: sum.Records, CRC32C: sum.CRC32C, Producers: prod}
			files[i].Format, files[i].Compression, files[i].SchemaVersion = ot.fileFormat()
			return nil
		})
	}
	_ = g.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if err := durable.SyncDir(e.cfg.FS, e.cfg.StagingDir); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if err := e.leaseCheck(); err != nil {
		return nil, fmt.Errorf("pre-commit: %w", err)
	}
	if _, ok := e.cfg.Committer.(committer.RemotePreparer); ok {
		if err := e.store.PutIntents(id, files); err != nil {
			return nil, fmt.Errorf("pre-commit: record upload intents: %w", err)
		}
	}
	prepared := make([]committer.File, len(files))
	g = errgroup.Group{}
	g.SetLimit(e.cfg.Parallel)
	for i := range files {
		g.Go(func() error {
			prepared[i], errs[i] = e.cfg.Committer.Prepare(e.ctx, files[i])
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
func (e *Engine) abort(c *cut, files []committer.File, cause error) CheckpointResult {
	ck := c.ck
	c.log.Error("checkpoint aborted", "err", cause)
	e.abortFiles(c, files)
	ck.Files = files
	if err := e.store.Abort(ck, cause.Error()); err != nil && !e.health.failOn(err) {
		// Unrecorded, the checkpoint is simply not prepared: recovery
		// treats it as aborted. Its id may be reused, which is harmless
		// since nothing of it was made final.
		c.log.Warn("record aborted checkpoint", "err", err)
	}
	nextID, nextOut, nextBytes := e.abortOpen(c)
	next := &recovery.Checkpoint{ID: nextID, StartedAt: e.cfg.Now().UTC()}
	if err := e.store.Abort(next, fmt.Sprintf("aborted with checkpoint %d", ck.ID)); err != nil && !e.health.failOn(err) {
		c.log.Warn("record aborted checkpoint", "checkpoint", nextID, "err", err)
	}
	res := c.result(recovery.Aborted)
	res.Error = cause.Error()
	e.finished(ck.ID, c.out, res, cause, ck.Bytes)
	e.finished(nextID, nextOut, CheckpointResult{ID: nextID, State: recovery.Aborted, Error: res.Error}, cause, nextBytes)
	return res
}

// abortFiles deletes c's staging files and aborts what the committer
// prepared of files; the intents of the aborts that failed stay for the
// orphan sweep and recovery.
func (e *Engine) abortFiles(c *cut, files []committer.File) {
	for _, ot := range c.txns {
		if err := errors.Join(ot.txn.Abort(), e.removeEncoded(ot)); err != nil {
			c.log.Warn("delete staging file; recovery will", "path", ot.txn.Name(), "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	var aborted, failed []committer.File
	for _, f := range files {
		if f.Final == "" {
			continue
		}
		if err := e.cfg.Committer.Abort(ctx, f); err != nil {
			failed = append(failed, f)
			c.log.Warn("abort file; the orphan sweep and recovery retry", "path", f.Final, "err", err)
			continue
		}
		aborted = append(aborted, f)
	}
	cancel()
	if _, ok := e.cfg.Committer.(committer.RemotePreparer); !ok {
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
	if err := e.store.DeleteIntents(keys...); err != nil && !e.health.failOn(err) {
		c.log.Warn("delete upload intents; recovery aborts again", "err", err)
	}
	if len(failed) > 0 {
		if err := e.store.PutIntents(c.ck.ID, failed); err != nil && !e.health.failOn(err) {
			c.log.Warn("update upload intents; the recorded ones stay", "err", err)
		}
	}
}

// abortOpen aborts the open checkpoint along with c: deletes its staging
// files, forgets both's keys, resets the producers either touched, and
// opens the next. It returns the aborted open checkpoint's id, outcome and
// bytes.
func (e *Engine) abortOpen(c *cut) (uint64, *outcome, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, out, bytes := e.openID, e.outcomes[e.openID], e.openBytes
	// The keys of both are forgotten, so their retries are accepted.
	e.keyForgetLocked(c.ck.Keys)
	e.keyForgetLocked(e.keys.open)
	e.keys.open = nil
	for _, ot := range e.openTxns {
		if err := ot.txn.Abort(); err != nil {
			c.log.Warn("delete staging file; recovery will", "path", ot.txn.Name(), "err", err)
		}
	}
	// Only producers this checkpoint or the next one touched differ from
	// their durable state: reset those, not the whole table.
	e.prods.abort(c.ck.Seqs)
	e.openNextLocked()
	return id, out, bytes
}
