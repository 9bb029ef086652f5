package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/layout"
)

// Result is the answer to one Send.
type Result struct {
	Stream     string
	Seq        int64  // the batch's sequence number on its stream
	Checkpoint uint64 // the checkpoint holding it
	Records    int    // records in the batch
	Bytes      int    // bytes of the body as sent
	// Duplicate: the service had the batch already (an earlier attempt
	// whose answer was lost reached it); it was not stored twice.
	Duplicate bool
	// Committed: the batch is committed (SendWait, or a duplicate of a
	// committed batch).
	Committed bool
}

// Send appends records as one batch to stream: all of them are stored, in
// a committed file, exactly once, or none. Each record is one JSON value
// on one line (no '\n' in it); the batch is sent as application/x-ndjson
// with the next sequence number of the stream. Records are copied: the
// caller may reuse them once Send returns.
//
// A nil error means the service accepted the batch into its open
// checkpoint (HTTP 202): not yet committed. The client keeps the batch in
// memory until it is known committed, so it can resend it if the service
// loses it in a crash; Flush waits for that, SendWait for one batch.
//
// Transient failures (transport errors, 5xx, 429 honouring Retry-After)
// are retried under the Retry policy. When the service answers that it
// expects an earlier sequence number (it lost accepted batches), the kept
// batches from there on are resent in order, each with its own number.
//
// On error, the batch is either not kept — it may be sent again — or kept:
// errors.Is(err, ErrKept), and the client delivers it before
// anything newer on the stream; do not send it again. Errors include
// *APIError (ErrTooLarge, ErrInvalidJSON, ...: nothing was stored), ErrFenced
// (stop: another Client with this producer id took over),
// ErrUnknownProducer and ErrInvalidEpoch (call Init), ErrBufferFull.
//
// Buffer: the kept batches' bytes are bounded by WithMaxBuffered. A Send
// that would go over it blocks, polling the service for commits (and
// resending what it lost), until room is made or ctx ends (ErrBufferFull).
// A batch larger than the whole buffer is refused at once (ErrTooLarge).
func (c *Client) Send(ctx context.Context, stream string, records [][]byte) (Result, error) {
	return c.send(ctx, stream, records, false)
}

// SendWait is Send with ?wait=commit: it returns once the batch is
// committed (Result.Committed), and with it every earlier batch of the
// stream; it resends them if their checkpoint aborts. When the service's
// own wait times out (it answers 202), SendWait goes on waiting by
// polling, like Flush, until ctx ends. A batch accepted but not yet seen
// committed when ctx ends stays kept: the error wraps ErrKept, Result.Seq
// is set, and Flush waits for it.
func (c *Client) SendWait(ctx context.Context, stream string, records [][]byte) (Result, error) {
	res, err := c.send(ctx, stream, records, true)
	if err != nil || res.Committed {
		return res, err
	}
	if err := c.waitSeq(ctx, stream, res.Seq); err != nil {
		if errors.Is(err, ErrFenced) {
			return res, fmt.Errorf("wait for commit of %s seq %d: %w", stream, res.Seq, err)
		}
		return res, fmt.Errorf("wait for commit of %s seq %d: %w: %w", stream, res.Seq, ErrKept, err)
	}
	res.Committed = true
	return res, nil
}

// waitSeq waits until seq of stream name is committed.
func (c *Client) waitSeq(ctx context.Context, name string, seq int64) error {
	c.mu.Lock()
	st := c.streams[name]
	c.mu.Unlock()
	return c.waitCommitted(ctx, map[*stream]int64{st: seq})
}

func (c *Client) send(ctx context.Context, name string, records [][]byte, wait bool) (Result, error) {
	if !layout.Stream(name) {
		return Result{}, fmt.Errorf("send to %q: %w: want ^[a-z0-9][a-z0-9_.-]{0,127}$ without \"..\"", name, ErrInvalidStream)
	}
	body, err := encode(records)
	if err != nil {
		return Result{}, fmt.Errorf("send to %s: %w", name, err)
	}
	if int64(len(body)) > c.maxBuffered {
		return Result{}, fmt.Errorf("send to %s: %w: batch of %d bytes, client buffer %d", name, ErrTooLarge, len(body), c.maxBuffered)
	}
	c.mu.Lock()
	if err := c.checkLocked(true); err != nil {
		c.mu.Unlock()
		return Result{}, fmt.Errorf("send to %s: %w", name, err)
	}
	st := c.streamLocked(name)
	c.mu.Unlock()

	if err := st.lock(ctx); err != nil {
		return Result{}, fmt.Errorf("send to %s: %w", name, err)
	}
	defer st.unlock()
	b := &batch{body: body, records: len(records)}
	if err := c.keep(ctx, st, b); err != nil {
		return Result{}, fmt.Errorf("send to %s: %w", name, err)
	}
	var target *batch
	if wait {
		target = b
	}
	err = c.deliver(ctx, st, target)

	c.mu.Lock()
	defer c.mu.Unlock()
	if b.confirmed {
		return b.result(name), nil
	}
	if err == nil {
		err = errors.New("batch not confirmed") // not reached: deliver confirms every kept batch
	}
	if c.fenced {
		return Result{}, err
	}
	if n := len(st.kept); !b.maybeSent && n > 0 && st.kept[n-1] == b {
		// The service never took it: forget it and its number.
		st.kept[n-1] = nil
		st.kept = st.kept[:n-1]
		st.next--
		c.releaseLocked(int64(len(body)))
		return Result{}, err
	}
	return Result{Stream: name, Seq: b.seq, Records: b.records, Bytes: len(b.body)}, fmt.Errorf("%w: %w", ErrKept, err)
}

func (b *batch) result(stream string) Result {
	return Result{Stream: stream, Seq: b.seq, Checkpoint: b.ans.Checkpoint, Records: b.records, Bytes: len(b.body),
		Duplicate: b.ans.Duplicate, Committed: b.committed || b.ans.Committed}
}

// encode renders records as an NDJSON body.
func encode(records [][]byte) ([]byte, error) {
	if len(records) == 0 {
		return nil, ErrEmptyBatch
	}
	n := 0
	for i, r := range records {
		if bytes.IndexByte(r, '\n') >= 0 {
			return nil, fmt.Errorf("%w: record %d holds a newline", ErrInvalidRecord, i+1)
		}
		if len(bytes.Trim(r, " \t\r")) == 0 {
			return nil, fmt.Errorf("%w: record %d is blank", ErrInvalidRecord, i+1)
		}
		n += len(r) + 1
	}
	body := make([]byte, 0, n)
	for _, r := range records {
		body = append(body, r...)
		body = append(body, '\n')
	}
	return body, nil
}

// keep gives b the stream's next sequence number and keeps it, once its
// bytes fit under the buffer bound. While they do not, it asks the service
// what is committed (which drops kept batches) and waits. The caller holds
// st's send lock.
func (c *Client) keep(ctx context.Context, st *stream, b *batch) error {
	delay := pollMin
	for refreshed := false; ; {
		c.mu.Lock()
		if err := c.sendableLocked(st); err != nil {
			c.mu.Unlock()
			return err
		}
		if c.buffered+int64(len(b.body)) <= c.maxBuffered {
			c.buffered += int64(len(b.body))
			b.seq = st.next
			st.next++
			st.kept = append(st.kept, b)
			c.mu.Unlock()
			return nil
		}
		space := c.space
		c.mu.Unlock()
		if !refreshed {
			// Make room: drop what is committed, deliver what is not.
			if err := c.refresh(ctx, st); err != nil {
				if ctx.Err() != nil {
					// The wait for room ended, whatever step it was in.
					return fmt.Errorf("%w: %w", ErrBufferFull, err)
				}
				return err
			}
			refreshed = true
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-space:
		case <-t.C:
			refreshed = false
			delay = min(2*delay, pollMax)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", ErrBufferFull, ctx.Err())
		}
		t.Stop()
	}
}

// refresh reads the producer's state, drops committed batches, and
// delivers the batches of streams the service does not hold: held (whose
// send lock the caller holds) and any other stream nobody is sending on.
func (c *Client) refresh(ctx context.Context, held *stream) error {
	ps, gen, err := c.fetchState(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	need, err := c.observeLocked(ps, gen)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	for _, st := range need {
		switch {
		case st == held:
			if err := c.resync(ctx, st, &ps, gen); err != nil {
				return err
			}
		case st.tryLock():
			// A busy stream is left to its sender, which delivers it.
			err := c.resync(ctx, st, nil, 0)
			st.unlock()
			if err != nil && ctx.Err() == nil {
				// Its failure is its own (its writes refused for a
				// while: a parked table stream), not held's: held goes
				// on waiting for room (a fenced client ends the wait).
				c.log.Debug("deliver kept batches of another stream to make room", "stream", st.name, "err", err)
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

// resync brings st in line with the service: kept batches it does not
// hold are resent from its next_seq. ps is a state read while holding st's
// send lock (gen: c.inits before it was asked for), or nil to read one.
// The caller holds st's send lock.
func (c *Client) resync(ctx context.Context, st *stream, ps *ProducerState, gen uint64) error {
	if ps == nil {
		fresh, g, err := c.fetchState(ctx)
		if err != nil {
			return err
		}
		ps, gen = &fresh, g
	}
	c.mu.Lock()
	_, err := c.observeLocked(*ps, gen)
	if err == nil && !c.staleLocked(gen) {
		ss, ok := ps.Streams[st.name]
		if !ok {
			ss = StreamState{NextSeq: 0, CommittedSeq: -1}
		}
		if ss.NextSeq < st.next {
			first := st.next - int64(len(st.kept))
			lost := false
			for _, b := range st.kept {
				lost = lost || b.confirmed && b.seq >= ss.NextSeq
			}
			if c.behindLocked(st, ss.NextSeq) {
				c.mu.Unlock()
				if err := c.reinit(ctx, st, ss.NextSeq); err != nil {
					return err
				}
				return c.deliver(ctx, st, nil)
			}
			if lost || ss.NextSeq < first {
				c.log.Info("service lost accepted batches; resending", "stream", st.name, "from_seq", ss.NextSeq, "to_seq", st.next-1)
				err = c.rewindLocked(st, ss.NextSeq)
			}
		}
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.deliver(ctx, st, nil)
}

// reinit is Init on the client's own behalf: the service expects seq, below
// every batch st keeps. Its answer says what the service holds; the kept
// batches are resent from there (see adoptLocked).
func (c *Client) reinit(ctx context.Context, st *stream, seq int64) error {
	c.log.Warn("service expects a sequence number below the batches kept: re-initialising", "stream", st.name, "expected_seq", seq)
	if _, err := c.Init(ctx); err != nil {
		return fmt.Errorf("stream %s: service expects seq %d: re-init: %w", st.name, seq, err)
	}
	return nil
}

// deliver sends st's unconfirmed kept batches, in sequence order, until
// none is left. The one that is wait is sent with ?wait=commit. The caller
// holds st's send lock.
func (c *Client) deliver(ctx context.Context, st *stream, wait *batch) error {
	s := streak{pol: c.retry}
	lastExpected := int64(-1)
	reinits := 0
	for {
		c.mu.Lock()
		if err := c.sendableLocked(st); err != nil {
			c.mu.Unlock()
			return err
		}
		var b *batch
		for _, k := range st.kept {
			if !k.confirmed {
				b = k
				break
			}
		}
		if b == nil {
			c.mu.Unlock()
			return nil
		}
		epoch, seq := c.epoch, b.seq
		c.mu.Unlock()
		if err := ctx.Err(); err != nil {
			// Before the attempt: the service cannot have seen it.
			return fmt.Errorf("send %s seq %d: %w", st.name, b.seq, err)
		}

		ans, err := c.post(ctx, st.name, b, seq, epoch, b == wait)
		c.mu.Lock()
		if stale := c.epoch != epoch || b.seq != seq; stale {
			// An Init answered meanwhile: it told what the service holds,
			// and renumbered or re-confirmed the kept batches from it.
			// This answer, to the older epoch, adds nothing.
			b.maybeSent = true
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		if err == nil {
			c.mu.Lock()
			b.confirmed, b.maybeSent, b.ans = true, true, ans
			if ans.Committed {
				c.trimLocked(st, b.seq)
			}
			c.mu.Unlock()
			s.reset()
			continue
		}
		op := fmt.Sprintf("send %s seq %d", st.name, b.seq)
		var ae *APIError
		isAPI := errors.As(err, &ae)
		if !isAPI || !ae.refusedUnheard() {
			c.mu.Lock()
			b.maybeSent = true
			c.mu.Unlock()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
		var retryAfter time.Duration
		if isAPI {
			retryAfter = ae.RetryAfter
			if ae.ExpectedSeq != nil && (ae.Code == "out_of_order_sequence" || ae.Code == "aborted") {
				exp := *ae.ExpectedSeq
				c.mu.Lock()
				if c.behindLocked(st, exp) && reinits < maxReinits {
					c.mu.Unlock()
					reinits++
					if rerr := c.reinit(ctx, st, exp); rerr != nil {
						return fmt.Errorf("%s: %w (answer: %w)", op, rerr, err)
					}
					continue
				}
				rerr := c.rewindLocked(st, exp)
				c.mu.Unlock()
				if rerr != nil {
					return fmt.Errorf("%s: %w (answer: %w)", op, rerr, err)
				}
				c.log.Info("service expects an earlier batch; resending", "stream", st.name, "seq", b.seq, "expected_seq", exp, "code", ae.Code)
				// Resend at once, unless the same answer repeats or a
				// checkpoint aborted (the service may be failing).
				if exp != lastExpected && ae.Code != "aborted" {
					lastExpected = exp
					continue
				}
				lastExpected = exp
			} else if ae.Code == "producer_fenced" {
				c.mu.Lock()
				switch {
				case c.epoch > epoch:
					// Fenced by our own newer Init: send with the new epoch.
					c.mu.Unlock()
					continue
				case c.initing > 0:
					// Maybe by our own Init, taken and not yet answered:
					// wait for its answer (the backoff below), then send
					// with its epoch.
					c.mu.Unlock()
				case c.initCut && reinits < maxReinits:
					// Maybe by our own Init, cut before its answer.
					c.mu.Unlock()
					reinits++
					if rerr := c.finishCutInit(ctx, "producer_fenced: "+ae.Message); rerr != nil {
						return fmt.Errorf("%s: %w (answer: %w)", op, rerr, err)
					}
					continue
				default:
					c.fenceLocked(ae.Message)
					c.mu.Unlock()
					return fmt.Errorf("%s: %w", op, err)
				}
			} else if !ae.retryable() {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		d, ok := s.next(retryAfter)
		if !ok {
			return fmt.Errorf("%s: giving up after %d attempts: %w", op, s.n, err)
		}
		c.log.Debug("retrying", "op", "send", "stream", st.name, "seq", b.seq, "attempt", s.n, "wait", d, "err", err)
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
}

// maxReinits bounds the Inits one delivery makes on its own behalf.
const maxReinits = 3

// post sends one batch once, as seq.
func (c *Client) post(ctx context.Context, stream string, b *batch, seq, epoch int64, wait bool) (writeAnswer, error) {
	req := request{
		method: http.MethodPost,
		path:   "/v1/streams/" + stream + "/records",
		header: http.Header{
			"Content-Type":      {contentTypeNDJSON},
			headerProducerID:    {c.producer},
			headerProducerEpoch: {strconv.FormatInt(epoch, 10)},
			headerProducerSeq:   {strconv.FormatInt(seq, 10)},
		},
		body: b.body,
	}
	if wait {
		req.query = url.Values{"wait": {"commit"}}
	}
	var ans writeAnswer
	err := c.do(ctx, req, &ans)
	return ans, err
}

// Flush delivers every kept batch the service has not confirmed and waits
// until every batch sent before the call is committed, polling the
// producer's state (GET /v1/producers/{id}) with backoff; it resends what
// the service lost in a crash, from its next_seq. Committed batches are
// dropped from memory. It does not force a checkpoint: it waits for the
// service's periodic ones (or anyone's POST /v1/checkpoints), so bound it
// with ctx.
func (c *Client) Flush(ctx context.Context) error {
	c.mu.Lock()
	if err := c.checkLocked(true); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("flush: %w", err)
	}
	targets := map[*stream]int64{}
	for _, st := range c.streams {
		if len(st.kept) > 0 {
			targets[st] = st.next - 1
		}
	}
	c.mu.Unlock()
	if len(targets) == 0 {
		return nil
	}
	if err := c.waitCommitted(ctx, targets); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// waitCommitted waits until each stream's committed_seq reaches its
// target, delivering what the service does not hold.
func (c *Client) waitCommitted(ctx context.Context, targets map[*stream]int64) error {
	delay := pollMin
	for {
		ps, gen, err := c.fetchState(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		need, err := c.observeLocked(ps, gen)
		left := map[*stream]bool{}
		for st, seq := range targets {
			if st.broken != nil && err == nil {
				err = st.broken
			}
			// A batch a failed Send forgot lowers the target.
			if st.committed < min(seq, st.next-1) {
				left[st] = true
			}
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		for _, st := range need {
			if !left[st] {
				continue
			}
			if err := st.lock(ctx); err != nil {
				return err
			}
			err := c.resync(ctx, st, nil, 0)
			st.unlock()
			if err != nil {
				return err
			}
		}
		if err := ctxsleep.Sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, pollMax)
	}
}
