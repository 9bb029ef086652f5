package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/recovery"
)

// The producer table: epochs, sequence numbers and their expiry. The live
// state (e.producers) is guarded by the ingest lock; reads for the API and
// the UI page through the state store instead, and the count is an atomic.

// DefaultProducerExpiry is how long an idle producer with nothing
// uncommitted is kept when Config.ProducerExpiry is 0.
const DefaultProducerExpiry = 168 * time.Hour

// expireBatch is how many idle producers one expiry step looks at, so the
// pass holds the ingest lock for one producer at a time and reads the
// store a batch at a time.
const expireBatch = 256

// ProducerState is a producer as the API shows it.
type ProducerState struct {
	ID      string                        `json:"producer"`
	Epoch   int64                         `json:"epoch"`
	Streams map[string]recovery.StreamSeq `json:"streams"`
	Fenced  int64                         `json:"fenced"`
}

type pendingRange struct {
	ckpt uint64
	last int64
}

type seqState struct {
	next        int64
	committed   int64
	committedIn uint64         // the committed checkpoint that committed committed
	pending     []pendingRange // accepted, not yet committed, by checkpoint
}

type producer struct {
	id      string
	epoch   int64
	streams map[string]*seqState
	fenced  int64
}

// producerFrom restores a producer's live state; newest is the checkpoint
// to name for committed batches whose record lacks committed_in.
func producerFrom(p recovery.Producer, newest uint64) *producer {
	out := &producer{id: p.ID, epoch: p.Epoch, streams: map[string]*seqState{}}
	for s, ss := range p.Streams {
		in := ss.CommittedIn
		if in == 0 && ss.CommittedSeq >= 0 {
			in = newest
		}
		out.streams[s] = &seqState{next: ss.NextSeq, committed: ss.CommittedSeq, committedIn: in}
	}
	return out
}

// unpreparedLocked reports whether p has accepted batches that no prepared
// checkpoint holds yet.
func (e *Engine) unpreparedLocked(p *producer) bool {
	d := e.durable[p.id]
	for s, ss := range p.streams {
		if ss.next != d.Streams[s].NextSeq {
			return true
		}
	}
	return false
}

// busyLocked reports whether p has anything uncommitted: accepted into the
// open checkpoint, or in one not yet committed.
func (e *Engine) busyLocked(p *producer) bool {
	if e.dirty[p.id] != nil || e.unpreparedLocked(p) {
		return true
	}
	for _, ss := range p.streams {
		if len(ss.pending) > 0 {
			return true
		}
	}
	return false
}

func (p *producer) state() ProducerState {
	out := ProducerState{ID: p.id, Epoch: p.epoch, Fenced: p.fenced, Streams: map[string]recovery.StreamSeq{}}
	for s, ss := range p.streams {
		out.Streams[s] = recovery.StreamSeq{NextSeq: ss.next, CommittedSeq: ss.committed}
	}
	return out
}

// Producer returns one producer's live state.
func (e *Engine) Producer(id string) (ProducerState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.producers[id]
	if p == nil {
		return ProducerState{}, false
	}
	return p.state(), true
}

// ProducersPage returns up to limit producers with ids after after, in id
// order, and the cursor of the next page ("" after the last). It reads the
// state store, never the ingest lock: the sequence numbers are as of the
// last prepared checkpoint (a write's own answer is the live next_seq),
// and Fenced is not kept there.
func (e *Engine) ProducersPage(after string, limit int) ([]ProducerState, string, error) {
	ps, next, err := e.store.ProducersPage(after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list producers: %w", err)
	}
	out := make([]ProducerState, len(ps))
	for i, p := range ps {
		out[i] = ProducerState{ID: p.ID, Epoch: p.Epoch, Streams: p.Streams}
	}
	return out, next, nil
}

// ProducerCount returns how many producers are known, without a lock.
func (e *Engine) ProducerCount() int { return int(e.producerCount.Load()) }

// DeleteProducer forgets a producer (DELETE /v1/producers/{producer}):
// ErrUnknownProducer when there is none, ErrProducerBusy while it has
// uncommitted batches. Writing again then needs a new init.
func (e *Engine) DeleteProducer(ctx context.Context, id string) error {
	return e.forget(id, time.Time{})
}

// forget removes producer id from the live table and the store, unless it
// has uncommitted batches; with a non-zero idleBefore, only if its
// recorded activity is older than that (the expiry). initMu keeps an init
// of the same producer out.
func (e *Engine) forget(id string, idleBefore time.Time) error {
	e.initMu.Lock()
	defer e.initMu.Unlock()
	e.mu.Lock()
	if err := e.writableLocked(); err != nil {
		e.mu.Unlock()
		return err
	}
	p := e.producers[id]
	if p == nil {
		e.mu.Unlock()
		return fmt.Errorf("producer %s: %w", id, ErrUnknownProducer)
	}
	if e.busyLocked(p) {
		e.mu.Unlock()
		return fmt.Errorf("producer %s: %w", id, ErrProducerBusy)
	}
	// Gone from the live table first, so no write is accepted for it
	// while the store forgets it.
	d := e.durable[id]
	delete(e.producers, id)
	delete(e.durable, id)
	e.mu.Unlock()
	err := e.store.DeleteProducerIdle(id, idleBefore)
	if err == nil || errors.Is(err, recovery.ErrNotFound) {
		e.producerCount.Add(-1)
		return nil
	}
	// Not forgotten: put it back as it was (nothing of it was accepted
	// meanwhile: it was unknown).
	e.mu.Lock()
	e.producers[id], e.durable[id] = p, d
	e.mu.Unlock()
	if errors.Is(err, recovery.ErrNotIdle) {
		return fmt.Errorf("producer %s: %w", id, ErrProducerBusy)
	}
	if !e.storeFailed(err) && errors.Is(err, durable.ErrDiskFull) {
		e.noteDiskFull(err)
	}
	return err
}

// ExpireProducers forgets the producers idle since before now minus the
// expiry with nothing uncommitted, a batch at a time, and returns how many
// it forgot. The expiry loop calls it; tests call it directly.
func (e *Engine) ExpireProducers(now time.Time) (int, error) {
	cutoff := now.Add(-e.cfg.ProducerExpiry)
	var after []byte
	n := 0
	for {
		ids, next, err := e.store.IdleProducers(cutoff, after, expireBatch)
		if err != nil {
			return n, fmt.Errorf("expire producers: %w", err)
		}
		forgot := 0
		for _, id := range ids {
			err := e.forget(id, cutoff)
			switch {
			case err == nil:
				forgot++
			case errors.Is(err, ErrProducerBusy), errors.Is(err, ErrUnknownProducer):
			default:
				err = fmt.Errorf("expire producers: %w", err)
			}
			if err != nil && !errors.Is(err, ErrProducerBusy) && !errors.Is(err, ErrUnknownProducer) {
				e.expired(forgot)
				return n + forgot, err
			}
		}
		e.expired(forgot)
		n += forgot
		if next == nil {
			return n, nil
		}
		after = next
		if e.ctx.Err() != nil {
			return n, e.ctx.Err()
		}
	}
}

func (e *Engine) expired(n int) {
	if h := e.cfg.Hooks.ProducersExpired; h != nil && n > 0 {
		h(n)
	}
}

// expireLoop runs ExpireProducers periodically.
func (e *Engine) expireLoop() {
	defer e.wg.Done()
	every := min(e.cfg.ProducerExpiry/8, time.Hour)
	t := time.NewTicker(max(every, time.Second))
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.failed:
			return
		case <-t.C:
			if n, err := e.ExpireProducers(e.cfg.Now()); err != nil && e.ctx.Err() == nil {
				e.log.Warn("producer expiry", "err", err, "expired", n)
			} else if n > 0 {
				e.log.Info("producers expired", "count", n)
			}
		}
	}
}
