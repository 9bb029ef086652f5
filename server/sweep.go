package server

import (
	"context"
	"fmt"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

// Sweep runs the orphan sweep now (recovery.Sweep): it retries the aborts
// that failed and removes this node's uploads and staging objects that no
// intent and no prepared checkpoint claims. The checkpoint being prepared
// meanwhile is left alone. It returns what it removed, also on error.
func (e *Engine) Sweep(ctx context.Context) (recovery.SweepResult, error) {
	select {
	case <-e.ready:
	default:
		return recovery.SweepResult{}, ErrNotReady
	}
	e.sweepMu.Lock()
	defer e.sweepMu.Unlock()
	if err := e.leaseCheck(); err != nil {
		// Uploads this node can't account for may be its successor's.
		return recovery.SweepResult{}, fmt.Errorf("sweep: %w", err)
	}
	e.mu.Lock()
	// Checkpoints below live have ended: their checkpoint() call is over,
	// so an intent of theirs is only a failed abort.
	live := e.openID
	if e.inflight != 0 {
		live = e.inflight
	}
	e.mu.Unlock()
	sw := recovery.Sweep{Store: e.store, Committer: e.cfg.Committer, Node: e.cfg.Node, Logger: e.log}
	res, err := sw.Run(ctx, live)
	e.countOrphans(res)
	return res, err
}

// sweepLoop runs Sweep every SweepInterval until the engine closes.
func (e *Engine) sweepLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	e.runEvery(t.C, func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, max(e.cfg.SweepInterval, time.Minute))
		res, err := e.Sweep(ctx)
		cancel()
		if err != nil && e.health.failOn(err) {
			return true
		}
		if err != nil && e.ctx.Err() == nil {
			e.log.Warn("orphan sweep failed; the next one retries", "err", err, "op", "sweep",
				"intents_aborted", len(res.Intents), "removed", len(res.Removed))
		} else if n := len(res.Intents) + len(res.Removed); n > 0 {
			e.log.Info("orphan sweep done", "op", "sweep", "intents_aborted", len(res.Intents), "removed", len(res.Removed))
		}
		return false
	})
}

// runEvery calls step on every tick of c until the engine closes, the
// engine fails, or step returns true. The caller owns the timer or ticker
// behind c (and may Reset it from step); the loops of the lease, producer
// expiry and the orphan sweep share it.
func (e *Engine) runEvery(c <-chan time.Time, step func() (stop bool)) {
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.health.failed:
			return
		case <-c:
		}
		if step() {
			return
		}
	}
}

// countOrphans reports what a sweep removed to the hook.
func (e *Engine) countOrphans(res recovery.SweepResult) {
	h := e.cfg.Hooks.OrphansRemoved
	if h == nil {
		return
	}
	if n := len(res.Intents); n > 0 {
		h("intent", n)
	}
	byKind := map[string]int{}
	for _, l := range res.Removed {
		byKind[l.Kind]++
	}
	for _, k := range []string{committer.LeftoverUpload, committer.LeftoverObject} {
		if byKind[k] > 0 {
			h(k, byKind[k])
		}
	}
}
