package server

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/recovery"
)

// Parked tables (docs/tables.md "Parked tables"): a table commit that no
// retry cures (classify: abort — table metadata planted in the
// destination that claims the table, a schema the stream can't take)
// parks its stream instead of holding back the node's every stream (I13).
// The checkpoint commits; the stream's table commit is kept in the state
// store (recovery.Parked), its later checkpoints' behind it; its writes
// are refused with backpressure, so its backlog stays bounded by the
// checkpoints already accepted (I11: at most two, the one that parked and
// the open one); parkLoop lands the rows in checkpoint order under the
// failure policy and, once the last is gone, writes are accepted again.

// parkTable is the Finisher's Park: a table commit whose error no retry
// cures is parked.
func parkTable(_ string, err error) bool { return classify(err) == verdictAbort }

// noteParked is the Finisher's Parked: p is in the store.
func (lc *lifecycle) noteParked(p recovery.Parked) {
	e := lc.e
	e.log.Error("table commit parked: the stream's writes are refused (429 backpressure) until its table takes the commit; the other streams go on. Remove or repair what the error names",
		"op", "table", "stream", p.Stream, "checkpoint", p.Checkpoint, "err", p.Error)
	// Refused from now on, whatever the store read below does: the bound
	// on a parked stream's rows (two) rests on it.
	e.ing.mu.Lock()
	if !e.ing.parked[p.Stream] {
		parked := maps.Clone(e.ing.parked)
		if parked == nil {
			parked = map[string]bool{}
		}
		parked[p.Stream] = true
		e.ing.parked = parked
	}
	e.ing.mu.Unlock()
	if err := e.life.syncParked(); err != nil {
		e.health.failOn(err)
	}
	select {
	case e.life.parkKick <- struct{}{}:
	default:
	}
}

// parking is the lifecycle's state of the parked tables.
type parking struct {
	mu sync.Mutex // serialises syncParked
	// lastErr is the newest failure of each parked stream's retry, for
	// Status; guarded by mu.
	lastErr map[string]error
}

// syncParked sets what writes and Status see (ingest.parked, the health
// fields) from the store's parked rows. Serialised, each reading the
// store under the lock: the last one sets what the store holds last.
func (lc *lifecycle) syncParked() error {
	lc.parking.mu.Lock()
	defer lc.parking.mu.Unlock()
	rows, err := lc.e.store.Parked()
	if err != nil {
		return fmt.Errorf("read parked table commits: %w", err)
	}
	set := map[string]bool{}
	why := ""
	for _, p := range rows {
		if set[p.Stream] {
			continue
		}
		set[p.Stream] = true
		if why == "" {
			msg := p.Error
			if e := lc.parking.lastErr[p.Stream]; e != nil {
				msg = e.Error()
			}
			why = fmt.Sprintf("table commit of stream %s, checkpoint %d, parked since %s: %s", p.Stream, p.Checkpoint, p.At.UTC().Format(time.RFC3339), msg)
		}
	}
	for s := range lc.parking.lastErr {
		if !set[s] {
			delete(lc.parking.lastErr, s)
		}
	}
	in := &lc.e.ing
	in.mu.Lock()
	in.parked = set
	lc.e.health.tablesParked, lc.e.health.tableParked = len(set), why
	lc.e.health.publishLocked()
	in.mu.Unlock()
	return nil
}

// parkedLocked returns ErrBackpressure when stream's table commit is
// parked: its backlog must not grow.
func (in *ingest) parkedLocked(stream string) error {
	if in.parked[stream] {
		// Its loop tries again every RetryMax at most: no sooner retry
		// can pass.
		return &hinted{err: fmt.Errorf("stream %s: its table commit is parked until its table can take it (docs/tables.md \"Parked tables\"): %w", stream, ErrBackpressure),
			after: in.e.cfg.RetryMax}
	}
	return nil
}

// parkLoop lands the parked table commits, each stream's in checkpoint
// order, retrying a stream whose commit fails under the failure policy
// (its wait; an abort waits the longest), each stream on its own
// schedule so that one does not hold back another. Woken by a new park.
func (lc *lifecycle) parkLoop(ctx context.Context) {
	type retry struct {
		next    time.Time
		attempt int
	}
	tries := map[string]*retry{}
	for {
		if lc.stopped() {
			return
		}
		rows, err := lc.e.store.Parked()
		if lc.e.health.failOn(err) {
			return
		}
		wake := time.Duration(-1) // none: wait for a kick
		if err != nil {
			lc.e.log.Error("read parked table commits, retrying", "op", "table", "err", err)
			wake = lc.e.pol.max
		}
		seen := map[string]bool{}
		for i := 0; i < len(rows); {
			j := i
			for j < len(rows) && rows[j].Stream == rows[i].Stream {
				j++
			}
			stream, rs := rows[i].Stream, rows[i:j]
			i = j
			seen[stream] = true
			if r := tries[stream]; r != nil {
				if d := time.Until(r.next); d > 0 {
					wake = soonest(wake, d)
					continue
				}
			}
			err := lc.landParked(ctx, rs)
			if ctx.Err() != nil || lc.stopped() {
				return
			}
			if err == nil {
				delete(tries, stream)
				lc.e.log.Info("table stream unparked: its parked table commits landed, its writes are accepted again", "op", "table", "stream", stream)
				continue
			}
			v := classify(err)
			if v == verdictStop {
				lc.e.pol.stop(err)
				return
			}
			r := tries[stream]
			if r == nil {
				r = &retry{}
				tries[stream] = r
			}
			d := lc.e.pol.wait(v, r.attempt)
			r.next, r.attempt = time.Now().Add(d), r.attempt+1
			wake = soonest(wake, d)
			lc.parking.mu.Lock()
			if lc.parking.lastErr == nil {
				lc.parking.lastErr = map[string]error{}
			}
			lc.parking.lastErr[stream] = err
			lc.parking.mu.Unlock()
			lc.e.log.Warn("parked table commit failed, retrying", "op", "table", "stream", stream, "err", err, "attempt", r.attempt, "verdict", v)
		}
		for s := range tries {
			if !seen[s] {
				delete(tries, s)
			}
		}
		if err := lc.syncParked(); lc.e.health.failOn(err) {
			return
		}
		if !lc.waitParkKick(ctx, wake) {
			return
		}
	}
}

// soonest is the shorter of wake (negative: none) and d.
func soonest(wake, d time.Duration) time.Duration {
	if wake < 0 || d < wake {
		return d
	}
	return wake
}

// stopped reports whether the engine stopped (health.fail): the loop
// stops with it, as every loop does (I14); the next start's recovery
// decides.
func (lc *lifecycle) stopped() bool {
	select {
	case <-lc.e.health.failed:
		return true
	default:
		return false
	}
}

// waitParkKick waits for d (negative: until kicked), a kick, or the end
// (the engine closed or stopped); false at the end. One select, no helper
// goroutine: a kick is taken only by a wait that returns for it, never
// swallowed after the wait ended on its timer (the loop read the store
// before waiting, so a lost kick left a new row unretried).
func (lc *lifecycle) waitParkKick(ctx context.Context, d time.Duration) bool {
	var timer <-chan time.Time // nil: no timer
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-lc.parkKick:
	case <-timer:
	case <-ctx.Done():
		return false
	case <-lc.e.health.failed:
		return false
	}
	return ctx.Err() == nil && !lc.stopped()
}

// landParked commits rs, one stream's parked table commits in
// checkpoint order, into its table, deleting each row once its table
// holds it (a table that holds it already is success: a crash between the
// commit and the delete repeats the commit, which adds nothing). It stops
// at the first failure: a later checkpoint never lands ahead of an
// earlier one.
//
// A table that holds a later checkpoint of this node (below the open one)
// holds p too: a parked stream's later table commits follow its rows, so
// a later one landed only after p did. That is what a row a state store
// restored from an older copy brings back finds, once the table's later
// commits expired p's own snapshot (the node's newest stays).
func (lc *lifecycle) landParked(ctx context.Context, rs []recovery.Parked) error {
	ctx = table.WithBound(ctx, lc.e.ing.open()-1)
	for _, p := range rs {
		if lc.stopped() {
			return fmt.Errorf("parked table commit of checkpoint %d: %w", p.Checkpoint, lc.e.Err())
		}
		if f := lc.e.fin.Fence; f != nil {
			if err := f(); err != nil {
				return fmt.Errorf("parked table commit of checkpoint %d: %w", p.Checkpoint, err)
			}
		}
		if err := lc.e.fin.Tables.Commit(ctx, lc.e.cfg.Node, p.Checkpoint, p.Files); err != nil {
			return fmt.Errorf("parked table commit of checkpoint %d: %w", p.Checkpoint, err)
		}
		if err := lc.e.store.Unpark(p.Stream, p.Checkpoint); err != nil {
			return fmt.Errorf("parked table commit of checkpoint %d: landed, delete its row: %w", p.Checkpoint, err)
		}
		lc.e.log.Info("parked table commit landed in its table", "op", "table", "stream", p.Stream, "checkpoint", p.Checkpoint)
	}
	return nil
}
