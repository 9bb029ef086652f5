package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/recovery"
)

// The coordinator loop, waiting on checkpoints, failure and shutdown.

// Checkpoint runs a checkpoint and waits for its end. A request made while
// one runs is served by the next one. If ctx ends first, the checkpoint
// still completes in the background.
func (e *Engine) Checkpoint(ctx context.Context) (CheckpointResult, error) {
	reply := make(chan ckptReply, 1)
	select {
	case <-e.life.ready:
	case <-e.health.failed:
		return CheckpointResult{}, e.Err()
	default:
		return CheckpointResult{}, ErrNotReady
	}
	select {
	case e.life.reqs <- reply:
	case <-e.health.failed:
		return CheckpointResult{}, e.Err()
	case <-e.life.closing:
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

// Wait blocks until checkpoint id has ended: nil if it committed, ErrAborted
// if it aborted.
//
// Waiting on the open checkpoint starts it within Config.CommitLinger
// (group commit).
func (e *Engine) Wait(ctx context.Context, id uint64) error {
	e.ing.mu.Lock()
	o := e.ing.outcomes[id]
	if o != nil {
		e.life.lingerLocked(id)
	}
	e.ing.mu.Unlock()
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
			case <-e.health.failed:
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
	case <-e.health.failed:
		return e.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the coordinator loop: checkpoints on request and on the interval.
func (lc *lifecycle) run(ctx context.Context) {
	var tick <-chan time.Time
	if lc.e.cfg.CheckpointInterval > 0 {
		t := time.NewTicker(lc.e.cfg.CheckpointInterval)
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
		case <-ctx.Done():
			return
		case <-lc.e.health.failed:
			return
		case <-lc.soon:
			if lingerC == nil {
				linger = time.NewTimer(lc.lingerDelay(lastLinger, lastShared))
				lingerC = linger.C
			}
			continue
		case <-lingerC:
			lingerC = nil
			want, waits := lc.wantsCommit()
			if !want {
				continue // a checkpoint since took the waiting batches
			}
			lastLinger, lastShared = time.Now(), waits
		case r := <-lc.reqs:
			waiters = append(waiters, r)
		drain:
			for {
				select {
				case r := <-lc.reqs:
					waiters = append(waiters, r)
				default:
					break drain
				}
			}
		case <-tick:
			if lc.idle() {
				continue // nothing to commit: no barrier, no I/O
			}
		case <-lc.kick:
			lc.e.ing.mu.Lock()
			big := lc.e.ing.openBytes > lc.e.cfg.MaxUncommittedBytes/4 || lc.e.ing.early || lc.e.ing.doomedLocked() != nil
			lc.e.ing.mu.Unlock()
			if !big {
				continue // the checkpoint that just ran already took it
			}
		}
		res, err := lc.e.pipe.checkpoint(ctx)
		for _, w := range waiters {
			w <- ckptReply{res, err}
		}
	}
}

// idle reports whether the open checkpoint holds nothing to commit.
func (lc *lifecycle) idle() bool {
	lc.e.ing.mu.Lock()
	defer lc.e.ing.mu.Unlock()
	return len(lc.e.ing.openTxns) == 0 && len(lc.e.ing.prods.dirty) == 0
}

// Shutdown stops accepting writes, runs a final checkpoint (bounded by
// ctx) so accepted batches commit, then closes the engine.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.ing.mu.Lock()
	e.ing.draining = true
	ready := e.ing.isReady && e.health.failErr == nil
	e.health.publishLocked()
	e.ing.mu.Unlock()
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
			err = e.life.releaseLease(ctx)
		}
	}
	return errors.Join(err, e.Close())
}

// Close stops the engine at once, like a crash would but with file handles
// closed: open transactions stay as temp files and a prepared checkpoint
// still committing stays prepared; the next Open recovers both.
func (e *Engine) Close() error {
	e.ing.mu.Lock()
	if e.ing.closed {
		e.ing.mu.Unlock()
		return nil
	}
	e.ing.closed = true
	e.health.publishLocked()
	e.ing.mu.Unlock()
	e.life.cancel()
	<-e.life.done
	e.ing.mu.Lock()
	for _, ot := range e.ing.openTxns {
		ot.txn.Release()
	}
	e.ing.mu.Unlock()
	if err := e.store.Close(); err != nil {
		return fmt.Errorf("close state store: %w", err)
	}
	return nil
}

func newOutcome() *outcome { return &outcome{done: make(chan struct{})} }

// fail stops the engine after err. Held under no lock.
func (hs *health) fail(err error) {
	hs.e.ing.mu.Lock()
	if hs.failErr != nil {
		hs.e.ing.mu.Unlock()
		return
	}
	hs.failErr = fmt.Errorf("%w: %w", ErrFailed, err)
	hs.publishLocked()
	hs.e.ing.mu.Unlock()
	hs.e.log.Error("engine stopped; recovery on restart decides", "err", err)
	close(hs.failed)
}

// failOn stops the engine if the policy says err must (classify), and
// reports whether it did.
func (hs *health) failOn(err error) bool {
	if err == nil || classify(err) != verdictStop {
		return false
	}
	hs.fail(err)
	return true
}

// noteDiskFull remembers err if it is a write refused for space, for
// Status and /readyz.
func (hs *health) noteDiskFull(err error) {
	if !errors.Is(err, ErrDiskFull) {
		return
	}
	hs.e.ing.mu.Lock()
	hs.diskFull, hs.diskFullAt = err, time.Now()
	hs.publishLocked()
	hs.e.ing.mu.Unlock()
}

func (hs *health) noteDiskFullLocked(err error) {
	if errors.Is(err, ErrDiskFull) {
		hs.diskFull, hs.diskFullAt = err, time.Now()
	}
}

// diskOK forgets a full disk: a durable write just succeeded.
func (hs *health) diskOK() {
	hs.e.ing.mu.Lock()
	hs.diskFull = nil
	hs.publishLocked()
	hs.e.ing.mu.Unlock()
}
