package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// checkpoint runs one checkpoint: barrier, pre-commit, prepared, commit.
// Only the run loop (and Shutdown, after it stopped) call it.
func (e *Engine) checkpoint() (CheckpointResult, error) {
	start := e.cfg.Now()
	began := time.Now()

	// 0. The barrier hands out the next id, an abort the one after it:
	// both must be reserved before any answer can name them (I8).
	if err := e.reserveIDs(); err != nil {
		if e.storeFailed(err) {
			return CheckpointResult{}, e.Err()
		}
		// Refused for space, nothing recorded: no barrier, try later.
		e.noteDiskFull(err)
		return CheckpointResult{}, err
	}

	// 1. Barrier: swap the open checkpoint under the ingest lock.
	e.mu.Lock()
	if e.failErr != nil {
		e.mu.Unlock()
		return CheckpointResult{}, e.failErr
	}
	if len(e.openTxns) == 0 && len(e.dirty) == 0 {
		return e.emptyLocked(began)
	}
	id, txns, out := e.openID, e.openTxns, e.outcomes[e.openID]
	e.inflight = id // the orphan sweep leaves its intents alone
	defer func() {
		e.mu.Lock()
		e.inflight = 0
		e.mu.Unlock()
	}()
	records, bytes := e.openRecords, e.openBytes
	seqs := map[string]map[string]int64{}
	for pid, streams := range e.dirty {
		m := map[string]int64{}
		for s := range streams {
			m[s] = e.producers[pid].streams[s].next
		}
		seqs[pid] = m
	}
	keys, keyPol := e.keyBarrierLocked(start.UTC())
	e.openNextLocked()
	e.mu.Unlock()

	ck := &recovery.Checkpoint{ID: id, StartedAt: start.UTC(), Records: records, Bytes: bytes, Seqs: seqs,
		Keys: keys, KeyPolicy: keyPol}
	res := CheckpointResult{ID: id, Records: records, Bytes: bytes, Files: []committer.File{}}
	log := e.log.With("checkpoint", id)

	// 2. Pre-commit every file in parallel, then make their names durable.
	files, err := e.preCommit(id, txns)
	if err != nil {
		e.noteDiskFull(err)
		return e.abort(ck, txns, files, err, out, began), nil
	}
	ck.Files = files
	ck.PreparedAt = e.cfg.Now().UTC()

	// 3. Prepared: from here on, the checkpoint commits.
	if err := e.store.Prepare(ck); err != nil {
		if errors.Is(err, durable.ErrDiskFull) {
			// Refused for space with nothing recorded: not prepared.
			e.noteDiskFull(err)
			return e.abort(ck, txns, files, fmt.Errorf("record prepared checkpoint %d: %w", id, err), out, began), nil
		}
		// The record may or may not be durable; only recovery can tell.
		e.fail(fmt.Errorf("record prepared checkpoint %d: %w", id, err))
		return res, e.Err()
	}
	e.diskOK()
	e.mu.Lock()
	e.keyPreparedLocked(keys)
	for pid, streams := range seqs {
		d := e.durable[pid]
		if d.Streams == nil {
			d.ID, d.Streams = pid, map[string]recovery.StreamSeq{}
		}
		for s, next := range streams {
			ss, ok := d.Streams[s]
			if !ok {
				ss.CommittedSeq = -1
			}
			ss.NextSeq = next
			d.Streams[s] = ss
		}
		e.durable[pid] = d
	}
	e.mu.Unlock()
	log.Debug("prepared", "files", len(files), "records", records, "bytes", bytes)

	// 4. Commit, retried until it succeeds (I4).
	for attempt := 0; ; attempt++ {
		err := e.fin.Finish(e.ctx, ck)
		if err == nil {
			break
		}
		if errors.Is(err, durable.ErrSync) || errors.Is(err, recovery.ErrWriteFailed) || errors.Is(err, ErrLeaseLost) {
			e.fail(err)
			return res, e.Err()
		}
		if e.ctx.Err() != nil {
			return res, ErrClosed
		}
		e.noteDiskFull(err)
		e.mu.Lock()
		e.stuck = err
		e.publishLocked()
		e.mu.Unlock()
		if h := e.cfg.Hooks.CommitStuck; h != nil {
			h(id, err)
		}
		log.Warn("commit failed, retrying", "err", err, "attempt", attempt)
		if !e.sleep(e.backoff(attempt)) {
			return res, ErrClosed
		}
	}
	res.State, res.Files = recovery.Committed, files
	e.mu.Lock()
	e.stuck, e.diskFull = nil, nil
	for pid, streams := range seqs {
		p := e.producers[pid]
		for s, next := range streams {
			ss := p.streams[s]
			if next-1 >= ss.committed {
				ss.committed, ss.committedIn = next-1, id
			}
			i := 0
			for i < len(ss.pending) && ss.pending[i].ckpt <= id {
				i++
			}
			ss.pending = ss.pending[i:]
			d := e.durable[pid]
			st := d.Streams[s]
			if next-1 >= st.CommittedSeq {
				st.CommittedSeq, st.CommittedIn = next-1, id
			}
			d.Streams[s] = st
		}
	}
	e.mu.Unlock()
	res.DurationMS, res.Seconds = time.Since(began).Milliseconds(), time.Since(began).Seconds()
	e.finished(id, out, res, nil, bytes)
	log.Info("checkpoint committed", "files", len(files), "records", records, "bytes", bytes, "duration_ms", time.Since(began).Milliseconds())
	return res, nil
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
	e.applyStreamsLocked() // streams.go: configurations change at barriers
	e.dirty = map[string]map[string]bool{}
	e.outcomes[e.openID] = newOutcome()
	e.publishLocked()
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
	e.publishLocked()
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
	var wg sync.WaitGroup
	sem := make(chan struct{}, e.cfg.Parallel)
	for i, ot := range txns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sum, err := ot.txn.PreCommit()
			if err == nil {
				sum, err = e.encodeStaged(ot, sum) // streams.go
			}
			if err != nil {
				errs[i] = err
				return
			}
			prod := make(map[string]committer.SeqRanges, len(sum.Producers))
			for p, rs := range sum.Producers {
				prod[p] = rs
			}
			files[i] = committer.File{Stream: ot.key.Stream, Temp: sum.Temp, Final: ot.final, Bytes: sum.Bytes,
				Records: sum.Records, CRC32C: sum.CRC32C, Producers: prod}
			files[i].Format, files[i].Compression, files[i].SchemaVersion = ot.fileFormat()
		}()
	}
	wg.Wait()
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
	for i := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			prepared[i], errs[i] = e.cfg.Committer.Prepare(e.ctx, files[i])
		}()
	}
	wg.Wait()
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

// abort undoes checkpoint ck before its "prepared" record, and with it the
// open checkpoint after it, whose batches may follow sequence numbers ck
// lost. Producer state returns to the last prepared checkpoint's.
func (e *Engine) abort(ck *recovery.Checkpoint, txns []*openTxn, files []committer.File, cause error, out *outcome, began time.Time) CheckpointResult {
	log := e.log.With("checkpoint", ck.ID)
	log.Error("checkpoint aborted", "err", cause)
	for _, ot := range txns {
		if err := errors.Join(ot.txn.Abort(), e.removeEncoded(ot)); err != nil {
			log.Warn("delete staging file; recovery will", "path", ot.txn.Name(), "err", err)
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
			log.Warn("abort file; the orphan sweep and recovery retry", "path", f.Final, "err", err)
			continue
		}
		aborted = append(aborted, f)
	}
	cancel()
	if _, ok := e.cfg.Committer.(committer.RemotePreparer); ok {
		// An intent goes only once its abort succeeded (I10): a failed
		// one (S3 down, or Close cancelled the aborts of a shutdown cut
		// short) stays for the orphan sweep and recovery, updated with
		// what Prepare returned (the upload id) when it got that far.
		keys := make([]string, 0, len(aborted))
		for _, f := range aborted {
			keys = append(keys, recovery.IntentKey(ck.ID, f.Final))
		}
		if err := e.store.DeleteIntents(keys...); err != nil && !e.storeFailed(err) {
			log.Warn("delete upload intents; recovery aborts again", "err", err)
		}
		if len(failed) > 0 {
			if err := e.store.PutIntents(ck.ID, failed); err != nil && !e.storeFailed(err) {
				log.Warn("update upload intents; the recorded ones stay", "err", err)
			}
		}
	}
	ck.Files = files
	if err := e.store.Abort(ck, cause.Error()); err != nil && !e.storeFailed(err) {
		// Unrecorded, the checkpoint is simply not prepared: recovery
		// treats it as aborted. Its id may be reused, which is harmless
		// since nothing of it was made final.
		log.Warn("record aborted checkpoint", "err", err)
	}

	e.mu.Lock()
	nextID, nextTxns, nextOut, nextBytes := e.openID, e.openTxns, e.outcomes[e.openID], e.openBytes
	// The keys of both are forgotten, so their retries are accepted.
	e.keyForgetLocked(ck.Keys)
	e.keyForgetLocked(e.keys.open)
	e.keys.open = nil
	for _, ot := range nextTxns {
		if err := ot.txn.Abort(); err != nil {
			log.Warn("delete staging file; recovery will", "path", ot.txn.Name(), "err", err)
		}
	}
	// Only producers this checkpoint or the next one touched differ from
	// their durable state: reset those, not the whole table.
	touched := make(map[string]bool, len(ck.Seqs)+len(e.dirty))
	for pid := range ck.Seqs {
		touched[pid] = true
	}
	for pid := range e.dirty {
		touched[pid] = true
	}
	e.openNextLocked()
	for pid := range touched {
		p := e.producers[pid]
		if p == nil {
			continue
		}
		d := e.durable[pid]
		for s, ss := range p.streams {
			if dss, ok := d.Streams[s]; ok {
				ss.next, ss.committed = dss.NextSeq, dss.CommittedSeq
			} else {
				ss.next, ss.committed = 0, -1
			}
			ss.pending = nil
		}
	}
	e.mu.Unlock()

	next := &recovery.Checkpoint{ID: nextID, StartedAt: e.cfg.Now().UTC()}
	if err := e.store.Abort(next, fmt.Sprintf("aborted with checkpoint %d", ck.ID)); err != nil && !e.storeFailed(err) {
		log.Warn("record aborted checkpoint", "checkpoint", nextID, "err", err)
	}
	res := CheckpointResult{ID: ck.ID, State: recovery.Aborted, Files: []committer.File{}, Records: ck.Records, Bytes: ck.Bytes,
		DurationMS: time.Since(began).Milliseconds(), Seconds: time.Since(began).Seconds(), Error: cause.Error()}
	e.finished(ck.ID, out, res, cause, ck.Bytes)
	e.finished(nextID, nextOut, CheckpointResult{ID: nextID, State: recovery.Aborted, Error: res.Error}, cause, nextBytes)
	return res
}
