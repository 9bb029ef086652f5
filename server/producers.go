package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/eosink/eosink/recovery"
)

// The producer table (DESIGN "Producers"): epochs, sequence numbers per
// (producer, stream), the ranges accepted but not yet committed, and the
// expiry. Idempotency keys, the other dedup state, are in idempotency.go.
//
// The state store holds every producer; the table holds those used since
// the start. A producer is loaded on its first write or init (its epoch),
// and each of its streams on its first write there, one store read each:
// a start reads none of them, so its time does not grow with the producers
// kept (I11). The sequence rule itself is recovery.CheckSeq and the
// StreamSeq steps, which the store applies too.

// DefaultProducerExpiry is --producer-expiry's default: how long an idle
// producer with nothing uncommitted is kept (Config.ProducerExpiry 0
// keeps them forever).
const DefaultProducerExpiry = 168 * time.Hour

// expireBatch is how many idle producers one expiry step looks at, so the
// pass holds the ingest lock for one producer at a time and reads the
// store a batch at a time.
const expireBatch = 256

// ProducerState is a producer as the API shows it.
type ProducerState struct {
	ID      string
	Epoch   int64
	Streams map[string]recovery.StreamSeq
	Fenced  int64
}

type pendingRange struct {
	ckpt uint64
	last int64
}

// seqState is one producer's state on one stream.
type seqState struct {
	durable recovery.StreamSeq // as of the last prepared checkpoint; committed as of the last commit
	next    int64              // the next number expected: durable.NextSeq plus what the open checkpoints accepted
	pending []pendingRange     // accepted, not yet committed, by checkpoint
}

type producer struct {
	id      string
	epoch   int64
	streams map[string]*seqState // the streams loaded
	fenced  int64
}

// producerTable is the engine's producer table. Its methods are called
// with the ingest lock held; count is read without it.
type producerTable struct {
	store *recovery.Store
	// legacyIn names, for stream entries written before committed_in was
	// kept, the newest committed checkpoint at start.
	legacyIn   uint64
	m          map[string]*producer
	dirty      map[string]map[string]bool // (producer, stream) accepted into the open checkpoint
	forgetting map[string]bool            // being deleted from the store: unknown meanwhile
	count      atomic.Int64               // producers in the store
}

func newProducerTable(st *recovery.Store) *producerTable {
	return &producerTable{store: st, m: map[string]*producer{}, dirty: map[string]map[string]bool{}, forgetting: map[string]bool{}}
}

// get returns producer id, loading its epoch from the store on first use;
// nil when unknown.
func (t *producerTable) get(id string) (*producer, error) {
	if p := t.m[id]; p != nil || t.forgetting[id] {
		return p, nil
	}
	epoch, ok, err := t.store.ProducerEpoch(id)
	if err != nil || !ok {
		return nil, err
	}
	p := &producer{id: id, epoch: epoch, streams: map[string]*seqState{}}
	t.m[id] = p
	return p, nil
}

// stream returns p's state on stream, loading it from the store on first use.
func (t *producerTable) stream(p *producer, stream string) (*seqState, error) {
	if ss := p.streams[stream]; ss != nil {
		return ss, nil
	}
	d, ok, err := t.store.StreamSeq(p.id, stream)
	if err != nil {
		return nil, err
	}
	if !ok {
		d = recovery.NewStreamSeq()
	} else if d.CommittedIn == 0 && d.CommittedSeq >= 0 {
		d.CommittedIn = t.legacyIn
	}
	ss := &seqState{durable: d, next: d.NextSeq}
	p.streams[stream] = ss
	return ss, nil
}

// accept takes seq for (p, stream) into the open checkpoint open.
func (t *producerTable) accept(p *producer, stream string, ss *seqState, seq int64, open uint64) {
	ss.next++
	if n := len(ss.pending); n > 0 && ss.pending[n-1].ckpt == open {
		ss.pending[n-1].last = seq
	} else {
		ss.pending = append(ss.pending, pendingRange{ckpt: open, last: seq})
	}
	d := t.dirty[p.id]
	if d == nil {
		d = map[string]bool{}
		t.dirty[p.id] = d
	}
	d[stream] = true
}

// barrier returns, for the checkpoint being cut, the next number of every
// (producer, stream) it accepted into, and starts the next one clean.
func (t *producerTable) barrier() map[string]map[string]int64 {
	seqs := make(map[string]map[string]int64, len(t.dirty))
	for pid, streams := range t.dirty {
		m := make(map[string]int64, len(streams))
		for s := range streams {
			m[s] = t.m[pid].streams[s].next
		}
		seqs[pid] = m
	}
	t.dirty = map[string]map[string]bool{}
	return seqs
}

// prepared applies a checkpoint's "prepared" record to the mirror.
func (t *producerTable) prepared(seqs map[string]map[string]int64) {
	t.each(seqs, func(ss *seqState, next int64) { ss.durable = ss.durable.Prepared(next) })
}

// committed applies checkpoint id's commit: its ranges are no longer pending.
func (t *producerTable) committed(id uint64, seqs map[string]map[string]int64) {
	t.each(seqs, func(ss *seqState, next int64) {
		ss.durable = ss.durable.Committed(next, id)
		i := 0
		for i < len(ss.pending) && ss.pending[i].ckpt <= id {
			i++
		}
		ss.pending = ss.pending[i:]
	})
}

func (t *producerTable) each(seqs map[string]map[string]int64, fn func(*seqState, int64)) {
	for pid, streams := range seqs {
		p := t.m[pid]
		if p == nil {
			continue // forgotten meanwhile; cannot be while it has pending ranges
		}
		for s, next := range streams {
			if ss := p.streams[s]; ss != nil {
				fn(ss, next)
			}
		}
	}
}

// abort returns every producer that the aborted checkpoint (seqs) or the
// open one touched to its durable state: the last prepared checkpoint's.
// Ranges of checkpoints from on are no longer pending; those before it
// are prepared, committing (an open checkpoint aborted alone, doomed.go).
func (t *producerTable) abort(seqs map[string]map[string]int64, from uint64) {
	touched := make(map[string]bool, len(seqs)+len(t.dirty))
	for pid := range seqs {
		touched[pid] = true
	}
	for pid := range t.dirty {
		touched[pid] = true
	}
	t.dirty = map[string]map[string]bool{}
	for pid := range touched {
		if p := t.m[pid]; p != nil {
			for _, ss := range p.streams {
				i := len(ss.pending)
				for i > 0 && ss.pending[i-1].ckpt >= from {
					i--
				}
				ss.next, ss.pending = ss.durable.NextSeq, ss.pending[:i]
			}
		}
	}
}

// unprepared reports whether p has accepted batches that no prepared
// checkpoint holds yet.
func (t *producerTable) unprepared(p *producer) bool {
	for _, ss := range p.streams {
		if ss.next != ss.durable.NextSeq {
			return true
		}
	}
	return false
}

// busy reports whether p has anything uncommitted: accepted into the open
// checkpoint, or in one not yet committed.
func (t *producerTable) busy(p *producer) bool {
	if t.dirty[p.id] != nil || t.unprepared(p) {
		return true
	}
	for _, ss := range p.streams {
		if len(ss.pending) > 0 {
			return true
		}
	}
	return false
}

// overlay puts p's loaded streams, live, over streams read from the store.
func (p *producer) overlay(streams map[string]recovery.StreamSeq) map[string]recovery.StreamSeq {
	if streams == nil {
		streams = make(map[string]recovery.StreamSeq, len(p.streams))
	}
	for s, ss := range p.streams {
		streams[s] = recovery.StreamSeq{NextSeq: ss.next, CommittedSeq: ss.durable.CommittedSeq}
	}
	return streams
}

// sequenceLocked is Write's producer check: the epoch, then the sequence
// rule on the batch's stream. A duplicate fills res and returns no state;
// an accepted batch returns the stream's state, for acceptLocked.
func (in *ingest) sequenceLocked(w Write, res *WriteResult) (*seqState, error) {
	p, err := in.prods.get(w.Producer.ID)
	if err != nil {
		in.reject("storage")
		return nil, fmt.Errorf("producer %s: %w", w.Producer.ID, err)
	}
	if p == nil {
		in.reject("unknown_producer")
		return nil, fmt.Errorf("producer %s: %w", w.Producer.ID, ErrUnknownProducer)
	}
	switch {
	case w.Producer.Epoch < p.epoch:
		p.fenced++
		in.reject("producer_fenced")
		return nil, fmt.Errorf("producer %s epoch %d < %d: %w", p.id, w.Producer.Epoch, p.epoch, ErrFenced)
	case w.Producer.Epoch > p.epoch:
		in.reject("invalid_epoch")
		return nil, fmt.Errorf("producer %s epoch %d > %d: %w", p.id, w.Producer.Epoch, p.epoch, ErrInvalidEpoch)
	}
	ss, err := in.prods.stream(p, w.Stream)
	if err != nil {
		in.reject("storage")
		return nil, fmt.Errorf("producer %s stream %s: %w", p.id, w.Stream, err)
	}
	seq := w.Producer.Seq
	switch recovery.CheckSeq(seq, ss.next) {
	case recovery.SeqDuplicate:
		res.Duplicate, res.NextSeq, res.Records, res.Bytes = true, ss.next, 0, 0
		res.Committed = seq <= ss.durable.CommittedSeq
		if res.Committed {
			// The committed checkpoint that committed this producer's
			// newest batch on the stream: the one holding seq for a
			// retry of the latest batches, else a later one. Never an
			// open, aborted or merely reserved id.
			res.Checkpoint = ss.durable.CommittedIn
		} else {
			for _, r := range ss.pending {
				if seq <= r.last {
					res.Checkpoint = r.ckpt
					break
				}
			}
		}
		if h := in.e.cfg.Hooks.Duplicate; h != nil {
			h(w.Stream)
		}
		return nil, nil
	case recovery.SeqGap:
		in.reject("out_of_order_sequence")
		return nil, &SeqError{Producer: p.id, Stream: w.Stream, Got: seq, Expected: ss.next}
	}
	return ss, nil
}

// acceptLocked takes an accepted batch's sequence number into the open
// checkpoint and answers the next one.
func (in *ingest) acceptLocked(w Write, ss *seqState, res *WriteResult) {
	in.prods.accept(in.prods.m[w.Producer.ID], w.Stream, ss, w.Producer.Seq, in.openID)
	res.NextSeq = ss.next
}

// Producer returns one producer's live state: the store's streams with
// the ones in use since the start over them.
func (e *Engine) Producer(id string) (ProducerState, bool) {
	rec, err := e.store.Producer(id)
	if err != nil {
		e.log.Warn("read producer", "producer", id, "err", err)
	}
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	p := e.ing.prods.m[id]
	if e.ing.prods.forgetting[id] || (p == nil && rec == nil) {
		return ProducerState{}, false
	}
	var streams map[string]recovery.StreamSeq
	out := ProducerState{ID: id}
	if rec != nil {
		out.Epoch, streams = rec.Epoch, rec.Streams
	}
	if p != nil {
		out.Epoch, out.Fenced, streams = p.epoch, p.fenced, p.overlay(streams)
	}
	out.Streams = streams
	if out.Streams == nil {
		out.Streams = map[string]recovery.StreamSeq{}
	}
	return out, true
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
func (e *Engine) ProducerCount() int { return int(e.ing.prods.count.Load()) }

// recount reads the producer count from the store after a change to it.
func (in *ingest) recount() {
	if n, err := in.e.store.ProducerCount(); err == nil {
		in.prods.count.Store(int64(n))
	}
}

// DeleteProducer forgets a producer (DELETE /v1/producers/{producer}):
// ErrUnknownProducer when there is none, ErrProducerBusy while it has
// uncommitted batches. Writing again then needs a new init.
func (e *Engine) DeleteProducer(ctx context.Context, id string) error {
	return e.ing.forget(id, time.Time{}, func() error { return e.life.recordForgotten(ctx, []string{id}, time.Time{}) })
}

// forget removes producer id from the table and the store, unless it has
// uncommitted batches; with a non-zero idleBefore, only if its recorded
// activity is older than that (the expiry). initMu keeps an init of the
// same producer out. record (nil: none) runs once the producer is known
// not busy, before the store forgets it: an error keeps it.
func (in *ingest) forget(id string, idleBefore time.Time, record func() error) error {
	in.initMu.Lock()
	defer in.initMu.Unlock()
	in.mu.Lock()
	if err := in.writableLocked(); err != nil {
		in.mu.Unlock()
		return err
	}
	// A producer not loaded has nothing uncommitted: what a former run
	// accepted was committed or forgotten by the recovery.
	p := in.prods.m[id]
	if p != nil && in.prods.busy(p) {
		in.mu.Unlock()
		return fmt.Errorf("producer %s: %w", id, ErrProducerBusy)
	}
	// Unknown to writes first, so none is accepted for it while the store
	// forgets it.
	delete(in.prods.m, id)
	in.prods.forgetting[id] = true
	in.mu.Unlock()
	var err error
	if record != nil {
		err = record()
	}
	if err == nil {
		err = in.e.store.DeleteProducerIdle(id, idleBefore)
	}
	in.mu.Lock()
	delete(in.prods.forgetting, id)
	if err != nil && p != nil {
		// Not forgotten: put it back as it was (nothing of it was
		// accepted meanwhile: it was unknown).
		in.prods.m[id] = p
	}
	in.mu.Unlock()
	switch {
	case err == nil:
		in.recount()
		return nil
	case errors.Is(err, recovery.ErrNotFound):
		return fmt.Errorf("producer %s: %w", id, ErrUnknownProducer)
	case errors.Is(err, recovery.ErrNotIdle):
		return fmt.Errorf("producer %s: %w", id, ErrProducerBusy)
	case errors.Is(err, ErrProducerDamaged):
		return err
	}
	if !in.e.health.failOn(err) {
		in.e.health.noteDiskFull(err)
	}
	return err
}

// ExpireProducers forgets the producers idle since before now minus the
// expiry with nothing uncommitted, a batch at a time, and returns how many
// it forgot. The expiry loop calls it (when Config.ProducerExpiry is
// not 0); tests call it directly.
func (e *Engine) ExpireProducers(now time.Time) (int, error) {
	return e.life.expire(context.Background(), now)
}

// expire is ExpireProducers; ctx bounds the documents it publishes (the
// expiry loop's ends when the engine closes).
func (lc *lifecycle) expire(ctx context.Context, now time.Time) (int, error) {
	e := lc.e
	cutoff := now.Add(-e.cfg.ProducerExpiry)
	var after []byte
	n := 0
	for {
		ids, next, err := e.store.IdleProducers(cutoff, after, expireBatch)
		if err != nil {
			return n, fmt.Errorf("expire producers: %w", err)
		}
		// One document for the batch, before any of it is forgotten
		// (forgotten.go): it leaves out the producers busy or active
		// now; one that turns busy or active later is not forgotten, and
		// its later commits or init void the document for it.
		if err := e.life.recordForgotten(ctx, ids, cutoff); err != nil {
			return n, fmt.Errorf("expire producers: %w", err)
		}
		forgot := 0
		for _, id := range ids {
			err := e.ing.forget(id, cutoff, nil)
			switch {
			case err == nil:
				forgot++
			case errors.Is(err, ErrProducerBusy), errors.Is(err, ErrUnknownProducer), errors.Is(err, ErrProducerDamaged):
			default:
				e.life.expired(forgot)
				return n + forgot, fmt.Errorf("expire producers: %w", err)
			}
		}
		e.life.expired(forgot)
		n += forgot
		if next == nil {
			return n, nil
		}
		after = next
		select {
		case <-e.life.closing:
			return n, context.Canceled // the engine closes
		default:
		}
	}
}

func (lc *lifecycle) expired(n int) {
	if h := lc.e.cfg.Hooks.ProducersExpired; h != nil && n > 0 {
		h(n)
	}
}

// expireLoop runs ExpireProducers periodically.
func (lc *lifecycle) expireLoop(ctx context.Context) {
	every := min(lc.e.cfg.ProducerExpiry/8, time.Hour)
	t := time.NewTicker(max(every, time.Second))
	defer t.Stop()
	lc.runEvery(ctx, t.C, func() bool {
		n, err := lc.expire(ctx, lc.e.cfg.Now())
		if lc.e.health.failOn(err) {
			return true
		}
		if err != nil && ctx.Err() == nil {
			lc.e.log.Warn("producer expiry", "err", err, "expired", n)
		} else if n > 0 {
			lc.e.log.Info("producers expired", "count", n)
		}
		return false
	})
}

// InitProducer gives the producer a new epoch, durably, fencing older
// ones, and is a barrier (I12): before it answers, every batch accepted
// under an older epoch is prepared or aborted, so the next_seq and
// committed_seq it returns — the producer's durable state — survive any
// crash or abort that follows. When the producer has batches not yet
// prepared it runs a checkpoint and waits for its end (bounded by ctx).
func (e *Engine) InitProducer(ctx context.Context, id string) (ProducerState, error) {
	e.ing.initMu.Lock()
	e.ing.mu.Lock()
	err := e.ing.writableLocked()
	e.ing.mu.Unlock()
	if err != nil {
		e.ing.initMu.Unlock()
		return ProducerState{}, err
	}
	rec, err := e.store.InitProducerAt(id, e.cfg.Now())
	if err != nil {
		e.ing.initMu.Unlock()
		if errors.Is(err, ErrProducerDamaged) {
			// Nothing was written; the others are served.
			e.log.Error("init of a damaged producer refused", "producer", id, "err", err)
			return ProducerState{}, err
		}
		if errors.Is(err, ErrDiskFull) {
			// Refused for space with nothing recorded: an answer.
			e.health.noteDiskFull(err)
			return ProducerState{}, err
		}
		e.health.fail(err)
		return ProducerState{}, err
	}
	e.health.diskOK()
	e.ing.recount()
	// From here on the older epochs are fenced: nothing more of theirs is
	// accepted, so one barrier after this point covers all of it.
	e.ing.mu.Lock()
	p := e.ing.prods.m[id]
	if p == nil {
		p = &producer{id: id, streams: map[string]*seqState{}}
		e.ing.prods.m[id] = p
	}
	p.epoch = rec.Epoch
	e.ing.mu.Unlock()
	e.ing.initMu.Unlock()

	if err := e.ing.awaitBarrier(ctx, func() bool { return e.ing.prods.unprepared(p) }); err != nil {
		return ProducerState{}, fmt.Errorf("init producer %s: barrier: %w", id, err)
	}
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	// The store's streams as of the init, with the ones in use since the
	// start, durable after the barrier, over them.
	out := ProducerState{ID: id, Epoch: rec.Epoch, Fenced: p.fenced, Streams: rec.Streams}
	if out.Streams == nil {
		out.Streams = map[string]recovery.StreamSeq{}
	}
	for s, ss := range p.streams {
		out.Streams[s] = recovery.StreamSeq{NextSeq: ss.durable.NextSeq, CommittedSeq: ss.durable.CommittedSeq}
	}
	return out, nil
}

// awaitBarrier is the barrier of a producer's init and of a stream's PUT
// (streams.go): once it returns nil, every batch that unprepared (called
// under the ingest lock) stands for — accepted before the call, and no
// more of them accepted since — is prepared (bound to commit) or aborted.
// When unprepared reports any, it runs a checkpoint, whose barrier comes
// after the checkpoint in flight and takes everything the open one
// accepted, and waits for its end, bounded by ctx (a destination outage
// holds a commit back: the caller answers "retry", and the barrier goes
// on; a retry finds those batches prepared).
func (in *ingest) awaitBarrier(ctx context.Context, unprepared func() bool) error {
	in.mu.Lock()
	pending := unprepared()
	in.mu.Unlock()
	if !pending {
		return nil
	}
	_, err := in.e.Checkpoint(ctx)
	return err
}
