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
	case <-e.life.ready:
	default:
		return recovery.SweepResult{}, ErrNotReady
	}
	e.life.sweepMu.Lock()
	defer e.life.sweepMu.Unlock()
	if err := e.life.leaseCheck(); err != nil {
		// Uploads this node can't account for may be its successor's.
		return recovery.SweepResult{}, fmt.Errorf("sweep: %w", err)
	}
	e.ing.mu.Lock()
	// Checkpoints below live have ended: their checkpoint() call is over,
	// so an intent of theirs is only a failed abort.
	live := e.ing.openID
	if e.ing.inflight != 0 {
		live = e.ing.inflight
	}
	e.ing.mu.Unlock()
	sw := recovery.Sweep{Store: e.store, Committer: e.cfg.Committer, Node: e.cfg.Node, Logger: e.log}
	res, err := sw.Run(ctx, live)
	e.life.countOrphans(res)
	return res, err
}

// sweepLoop runs Sweep every SweepInterval until the engine closes.
func (lc *lifecycle) sweepLoop(ctx context.Context) {
	t := time.NewTicker(lc.e.cfg.SweepInterval)
	defer t.Stop()
	lc.runEvery(ctx, t.C, func() bool {
		sctx, cancel := context.WithTimeout(ctx, max(lc.e.cfg.SweepInterval, time.Minute))
		res, err := lc.e.Sweep(sctx)
		cancel()
		if err != nil && lc.e.health.failOn(err) {
			return true
		}
		if err != nil && ctx.Err() == nil {
			lc.e.log.Warn("orphan sweep failed; the next one retries", "err", err, "op", "sweep",
				"intents_aborted", len(res.Intents), "removed", len(res.Removed))
		} else if n := len(res.Intents) + len(res.Removed); n > 0 {
			lc.e.log.Info("orphan sweep done", "op", "sweep", "intents_aborted", len(res.Intents), "removed", len(res.Removed))
		}
		return false
	})
}

// runEvery calls step on every tick of c until the engine closes, the
// engine fails, or step returns true. The caller owns the timer or ticker
// behind c (and may Reset it from step); the loops of the lease, producer
// expiry and the orphan sweep share it.
func (lc *lifecycle) runEvery(ctx context.Context, c <-chan time.Time, step func() (stop bool)) {
	lc.runEveryOr(ctx, c, nil, step)
}

// runEveryOr is runEvery that also calls step, at once, on each receive
// from now (the lease's renewal asked for early).
func (lc *lifecycle) runEveryOr(ctx context.Context, c <-chan time.Time, now <-chan struct{}, step func() (stop bool)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-lc.e.health.failed:
			return
		case <-c:
		case <-now:
		}
		if step() {
			return
		}
	}
}

// countOrphans reports what a sweep removed to the hook.
func (lc *lifecycle) countOrphans(res recovery.SweepResult) {
	h := lc.e.cfg.Hooks.OrphansRemoved
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
