package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/layout"

	"github.com/eosink/eosink/api/batch"
	"github.com/eosink/eosink/server"
	"github.com/go-chi/chi/v5"
)

// CheckpointHeader is carried by every answer to a write.
const CheckpointHeader = "X-Eosink-Checkpoint"

// Idempotence headers.
const (
	HeaderProducerID    = "Producer-Id"
	HeaderProducerEpoch = "Producer-Epoch"
	HeaderProducerSeq   = "Producer-Seq"
	// HeaderIdempotencyKey keys a write without producer headers.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// idempotencyKey returns the write's Idempotency-Key, "" without one. One
// key, 1 to 255 printable ASCII, and never with producer headers.
func idempotencyKey(h http.Header, prod *server.Producer) (string, error) {
	vs := h.Values(HeaderIdempotencyKey)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", fmt.Errorf("%s given %d times", HeaderIdempotencyKey, len(vs))
	case prod != nil:
		return "", fmt.Errorf("send %s or the producer headers, not both", HeaderIdempotencyKey)
	case !layout.IdempotencyKey(vs[0]):
		return "", fmt.Errorf("%s: want 1 to 255 printable ASCII characters", HeaderIdempotencyKey)
	}
	return vs[0], nil
}

func validStream(s string) bool { return layout.Stream(s) }

func validProducer(s string) bool { return layout.Producer(s) }

// pathParam returns a route parameter, unescaped. chi matches on the raw
// path when the request has one, so its parameters may still be escaped.
func pathParam(r *http.Request, name string) (string, bool) {
	v := chi.URLParam(r, name)
	if r.URL.RawPath == "" {
		return v, true
	}
	u, err := url.PathUnescape(v)
	return u, err == nil
}

// producerHeaders parses the idempotence headers: all three or none.
func producerHeaders(h http.Header) (*server.Producer, error) {
	names := []string{HeaderProducerID, HeaderProducerEpoch, HeaderProducerSeq}
	var vals [3]string
	n := 0
	for i, name := range names {
		vs := h.Values(name)
		switch len(vs) {
		case 0:
			continue
		case 1:
			vals[i] = vs[0]
			n++
		default:
			return nil, fmt.Errorf("%s given %d times", name, len(vs))
		}
	}
	switch n {
	case 0:
		return nil, nil
	case 3:
	default:
		return nil, fmt.Errorf("send all of %s, %s and %s, or none", names[0], names[1], names[2])
	}
	if !validProducer(vals[0]) {
		return nil, fmt.Errorf("%s %q: want ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", names[0], vals[0])
	}
	p := &server.Producer{ID: vals[0]}
	for i, dst := range []*int64{&p.Epoch, &p.Seq} {
		v, err := strconv.ParseInt(vals[i+1], 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s %q: want an integer >= 0", names[i+1], vals[i+1])
		}
		*dst = v
	}
	return p, nil
}

// openCheckpointHeader sets X-Eosink-Checkpoint to the open checkpoint
// before anything else runs, so that refusals by the authorization
// middleware carry it too; the handler replaces it.
func (s *Server) openCheckpointHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(CheckpointHeader, strconv.FormatUint(s.eng.Status().OpenID, 10))
		next.ServeHTTP(w, r)
	})
}

// writeFail answers a refused write, with the open checkpoint in the header.
func (s *Server) writeFail(w http.ResponseWriter, status int, e *ErrorResponse) {
	w.Header().Set(CheckpointHeader, strconv.FormatUint(s.eng.Status().OpenID, 10))
	writeError(w, status, e)
}

func (s *Server) postRecords(w http.ResponseWriter, r *http.Request) {
	stream, ok := pathParam(r, "stream")
	if !ok || !validStream(stream) {
		s.writeFail(w, http.StatusBadRequest, invalidStream(stream))
		return
	}
	prod, err := producerHeaders(r.Header)
	var key string
	if err == nil {
		key, err = idempotencyKey(r.Header, prod)
	}
	if err != nil {
		// An invalid Idempotency-Key is an idempotence header error too:
		// DESIGN's table has no code of its own for it.
		s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidProducerHeaders, Message: err.Error()})
		return
	}
	wait := false
	switch q := r.URL.Query(); q.Get("wait") {
	case "":
	case "commit":
		wait = true
	default:
		s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidWait, Message: fmt.Sprintf("wait=%q: the only value is commit", q.Get("wait"))})
		return
	}
	ct := r.Header.Get("Content-Type")
	if _, err := batch.KindOf(ct); err != nil {
		s.writeFail(w, http.StatusUnsupportedMediaType, &ErrorResponse{Error: CodeUnsupportedMediaType,
			Message: fmt.Sprintf("Content-Type %q: want application/x-ndjson, application/json or text/plain", ct)})
		return
	}
	coding, err := bodyCoding(r.Header.Values("Content-Encoding"))
	if err != nil {
		s.writeFail(w, http.StatusUnsupportedMediaType, &ErrorResponse{Error: CodeUnsupportedEncoding, Message: err.Error()})
		return
	}
	body, release, err := s.readBody(w, r, coding)
	defer release() // for the answers before Write; release is idempotent
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.writeFail(w, http.StatusRequestEntityTooLarge, &ErrorResponse{Error: CodeTooLarge,
				Message: fmt.Sprintf("body over the limit of %d bytes (decoded)", s.maxBody)})
		case errors.Is(err, errBodyBudget):
			w.Header().Set("Retry-After", s.retryAfter)
			s.writeFail(w, http.StatusTooManyRequests, &ErrorResponse{Error: CodeBackpressure,
				Message: fmt.Sprintf("request bodies in flight hold the limit of %d bytes; retry later", s.inflight.limit)})
		case errors.Is(err, errDecode):
			s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody,
				Message: fmt.Sprintf("body does not decode as %s: %v", coding, err)})
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			s.writeFail(w, http.StatusRequestTimeout, &ErrorResponse{Error: CodeBodyTimeout,
				Message: fmt.Sprintf("the body did not arrive within %v", s.bodyTime)})
		default:
			s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody, Message: "read body: " + err.Error()})
		}
		return
	}
	var ikey *server.IdempotencyKey
	if key != "" {
		ikey = server.NewIdempotencyKey(key, body) // the decoded body, before parsing touches it
	}
	b, err := batch.Parse(ct, body, batch.Limits{MaxBody: s.maxBody, MaxRecord: s.maxRecord})
	if err != nil {
		s.writeFail(w, parseStatus(err), parseError(err))
		return
	}
	hold, unhold := s.holdPieces(int64(len(body)), coding)
	res, err := s.eng.Write(server.Write{Stream: stream, Ext: b.Kind.Ext(), Data: b.Data, Records: b.Records, Producer: prod, Key: ikey,
		Scope: s.keyScope(r), // keys are the token's, not the stream's
		Body:  body,          // for a stream that dedups by body (server/streams.go)
		Hold:  hold})
	// The engine copied what it keeps: give the body's bytes back now,
	// not after a wait=commit that may last the wait timeout, during
	// which they would count against every other write's budget.
	body, b = nil, batch.Batch{}
	unhold()
	release()
	if err != nil {
		s.engineError(w, r, err, true)
		return
	}
	out := WriteResponse{Stream: stream, Checkpoint: res.Checkpoint, Records: res.Records, Bytes: res.Bytes,
		Duplicate: res.Duplicate, Committed: res.Committed, NextSeq: res.NextSeq}
	// 200 only for what is committed (I9): a duplicate of a batch whose
	// checkpoint may still abort is 202, like the batch was.
	status := http.StatusAccepted
	if res.Duplicate && res.Committed {
		status = http.StatusOK
	}
	if wait && !out.Committed {
		ctx, cancel := context.WithTimeout(r.Context(), s.wait)
		err := s.eng.Wait(ctx, res.Checkpoint)
		cancel()
		switch {
		case err == nil:
			out.Committed, status = true, http.StatusOK
		case errors.Is(err, server.ErrAborted):
			e := &ErrorResponse{Error: CodeAborted, Checkpoint: res.Checkpoint,
				Message: fmt.Sprintf("checkpoint %d aborted; the batch is not stored: send it again", res.Checkpoint)}
			if prod != nil {
				next := int64(0)
				if st, ok := s.eng.Producer(prod.ID); ok {
					next = st.Streams[stream].NextSeq
				}
				e.ExpectedSeq = &next
				e.Message = fmt.Sprintf("checkpoint %d aborted; the batch is not stored: send again from seq %d", res.Checkpoint, next)
			}
			w.Header().Set(CheckpointHeader, strconv.FormatUint(res.Checkpoint, 10))
			w.Header().Set("Retry-After", s.retryAfter)
			writeError(w, http.StatusServiceUnavailable, e)
			return
		case r.Context().Err() != nil:
			return // the client is gone
		case errors.Is(err, context.DeadlineExceeded):
			// Not committed yet: the batch stays accepted, answer as without wait.
		default:
			s.engineError(w, r, err, true)
			return
		}
	}
	w.Header().Set(CheckpointHeader, strconv.FormatUint(res.Checkpoint, 10))
	writeJSON(w, status, out)
}

// Body reading steps.
const (
	// bodyStep bounds what is reserved and allocated ahead of the bytes
	// read: a declared Content-Length is a claim, not bytes.
	bodyStep = 1 << 20
	// bodyFirst is the first step of a body of unknown length.
	bodyFirst = 64 << 10
)

// errBodyBudget: the bodies in flight hold the server's whole budget.
var errBodyBudget = errors.New("in-flight body budget exhausted")

// readBody reads at most maxBody bytes of the body, by steps of at most
// bodyStep bytes, each one reserved from the in-flight budget before it is
// allocated. Reading must end within the body timeout. release gives the
// reservation back and must be called, on error too, once the body is no
// longer used; calling it again does nothing. A body in a content coding
// ("gzip", "zstd"; "" for none) is decoded as it is read: maxBody and the
// steps count decoded bytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, coding string) (body []byte, release func(), err error) {
	var (
		held           int64
		pooled, joined *[]byte
		windowHeld     bool // a zstd window is held in s.windows (and in held)
	)
	release = func() {
		s.inflight.give(held)
		held = 0
		if windowHeld {
			s.windows.give(zstdMaxWindow)
			windowHeld = false
		}
		// Only a buffer that held a whole body goes back to the pool, so
		// that it holds buffers of the bodies' sizes.
		if joined != nil {
			s.putBuf(joined)
		} else if pooled != nil {
			s.putBuf(pooled)
		}
		pooled, joined = nil, nil
	}
	if r.ContentLength > s.maxBody {
		return nil, release, &http.MaxBytesError{Limit: s.maxBody}
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.bodyTime)) == nil {
		// Cleared once read: it must not cut a wait=commit that follows.
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, s.maxBody)
	// limit is all the body may hold: its Content-Length (of an unencoded
	// body), else the body limit. Steps never reserve beyond it, and its
	// end is seen with an unreserved one-byte read, so a body of exactly
	// MaxBody holds at most twice that (its steps, then one slice): what
	// New requires.
	limit := s.maxBody
	if r.ContentLength >= 0 && coding == "" {
		limit = r.ContentLength
	}
	var window *holdOnFirstByte
	if coding == "zstd" {
		// The decoder's window is memory too: it is held against the
		// budget once the body's first byte arrives (the decoder allocates
		// it on the frame header), not from the headers on, and zstd
		// windows may hold at most half the budget: many senders that
		// declare zstd and send little can't hold it all (issue 22 item 8).
		window = &holdOnFirstByte{r: src, take: func() bool {
			if !s.windows.take(zstdMaxWindow) {
				return false
			}
			if !s.inflight.take(zstdMaxWindow) {
				s.windows.give(zstdMaxWindow)
				return false
			}
			held += zstdMaxWindow
			windowHeld = true
			return true
		}}
		src = window
	}
	if coding != "" {
		dec, err := newDecodedBody(coding, src, s.maxBody)
		if window != nil && window.refused {
			err = errBodyBudget
		}
		if err != nil {
			return nil, release, err
		}
		defer dec.close()
		src = dec
	}
	var chunks [][]byte
	total := 0
	for {
		if int64(total) >= limit {
			var probe [1]byte
			n, err := io.ReadFull(src, probe[:])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, release, err
			}
			if n > 0 { // more than its Content-Length: net/http never lets that through
				return nil, release, &http.MaxBytesError{Limit: limit}
			}
		}
		// A step reserves no more than has arrived (at least bodyFirst),
		// whatever the body declares: a sender holds about what it sent,
		// so many slow ones cannot hold the budget (issue 22).
		step := int(min(int64(min(max(total, bodyFirst), bodyStep)), limit-int64(total)))
		if !s.inflight.take(int64(step)) {
			return nil, release, errBodyBudget
		}
		held += int64(step)
		var c []byte
		inPlace := false
		switch {
		case pooled == nil:
			// A pooled buffer of the declared size (up to a step) takes
			// the whole body in place; a new one is only a step.
			want := step
			if r.ContentLength >= 0 && coding == "" {
				want = int(min(limit, bodyStep))
			}
			pooled = s.getBuf(want, step)
			c = (*pooled)[:step]
		case len(chunks) == 1 && total+step <= cap(*pooled):
			// The pooled buffer has room: the body stays one slice.
			c, inPlace = (*pooled)[total:total+step], true
		default:
			c = make([]byte, step)
		}
		n, err := io.ReadFull(src, c)
		if window != nil && window.refused {
			return nil, release, errBodyBudget // whatever the decoder made of it
		}
		if inPlace {
			chunks[0] = (*pooled)[:total+n]
		} else {
			chunks = append(chunks, c[:n])
		}
		total += n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, release, err
		}
	}
	if len(chunks) == 1 {
		return chunks[0], release, nil
	}
	// One slice for the parser: the steps stay reserved until release,
	// as the collector frees them when it will. It goes to the pool too,
	// so the pool learns the sizes of the bodies and the next one like
	// this one is read in place.
	if !s.inflight.take(int64(total)) {
		return nil, release, errBodyBudget
	}
	held += int64(total)
	joined = s.getBuf(total, total)
	body = (*joined)[:0]
	for _, c := range chunks {
		body = append(body, c...)
	}
	return body, release, nil
}

// holdOnFirstByte reads r, calling take once its first byte has arrived;
// when take refuses, the read fails and refused is set (a decoder over it
// may wrap the error beyond recognition).
type holdOnFirstByte struct {
	r       io.Reader
	take    func() bool
	taken   bool
	refused bool
}

func (h *holdOnFirstByte) Read(p []byte) (int, error) {
	if h.refused {
		return 0, errBodyBudget
	}
	n, err := h.r.Read(p)
	if n > 0 && !h.taken {
		h.taken = true
		if !h.take() {
			h.refused = true
			return 0, errBodyBudget
		}
	}
	return n, err
}

// holdPieces returns the Write.Hold of a write whose body is n bytes: the
// pieces of a batch the engine splits over partitions are held against
// the in-flight budget, as the body is, until unhold. A request alone
// (nothing held but its own body) is served even when they don't fit:
// else a body the budget admits could, split, never be written, and its
// producer would retry forever.
func (s *Server) holdPieces(n int64, coding string) (hold func(int64) error, unhold func()) {
	// What this request holds for its body, at most: its steps, one
	// joined copy, a step over, a zstd window.
	own := 2*n + bodyStep
	if coding == "zstd" {
		own += zstdMaxWindow
	}
	var held int64
	hold = func(m int64) error {
		if s.inflight.take(m) {
			held += m
			return nil
		}
		if s.inflight.inUse() <= own+held {
			return nil
		}
		return errBodyBudget
	}
	unhold = func() {
		s.inflight.give(held)
		held = 0
	}
	return hold, unhold
}

// maxPooled keeps a rare huge body from being held by the pool.
const maxPooled = 4 << 20

// getBuf takes a body buffer of at least want bytes from the server's
// pool, or makes one of n bytes: one allocation of the body's size per
// request was the largest garbage source under load.
func (s *Server) getBuf(want, n int) *[]byte {
	if b, ok := s.bodies.Get().(*[]byte); ok && cap(*b) >= want {
		return b
	}
	b := make([]byte, n)
	return &b
}

func (s *Server) putBuf(b *[]byte) {
	if cap(*b) > maxPooled {
		return
	}
	s.bodies.Put(b)
}

func parseStatus(err error) int {
	switch {
	case errors.Is(err, batch.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, batch.ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType
	default:
		return http.StatusBadRequest
	}
}

func parseError(err error) *ErrorResponse {
	e := &ErrorResponse{Message: err.Error()}
	switch {
	case errors.Is(err, batch.ErrTooLarge):
		e.Error = CodeTooLarge
	case errors.Is(err, batch.ErrUnsupportedMediaType):
		e.Error = CodeUnsupportedMediaType
	default:
		e.Error = CodeInvalidJSON
	}
	var le *batch.LineError
	if errors.As(err, &le) {
		e.Line = le.Line
	}
	return e
}

// retryAfterOf is the Retry-After for err: the configured one, or the
// error's own hint (server.RetryHint) when that is longer, in whole
// seconds rounded up.
func (s *Server) retryAfterOf(err error) string {
	var h server.RetryHint
	if errors.As(err, &h) {
		secs := int64((h.RetryAfter() + time.Second - 1) / time.Second)
		if own, _ := strconv.ParseInt(s.retryAfter, 10, 64); secs > own {
			return strconv.FormatInt(secs, 10)
		}
	}
	return s.retryAfter
}

// engineError answers an error of the engine. write marks the write route,
// whose answers carry the open checkpoint.
func (s *Server) engineError(w http.ResponseWriter, r *http.Request, err error, write bool) {
	if r.Context().Err() != nil {
		return // the client is gone; nobody reads an answer
	}
	if write && s.streamError(w, err) { // streams.go
		return
	}
	var (
		status int
		e      = &ErrorResponse{Message: err.Error()}
		se     *server.SeqError
	)
	switch {
	case errors.As(err, &se):
		status, e.Error, e.ExpectedSeq = http.StatusConflict, CodeOutOfOrderSequence, &se.Expected
	case errors.Is(err, server.ErrUnknownProducer):
		status, e.Error = http.StatusConflict, CodeUnknownProducer
		e.Message += ": POST /v1/producers/{producer}/init first"
	case errors.Is(err, server.ErrProducerBusy):
		status, e.Error = http.StatusConflict, CodeProducerBusy
	case errors.Is(err, server.ErrProducerDamaged):
		// The node's own record is at fault, not the request: the
		// operator repairs it (docs/nodes.md, "When a node dies"); other producers work.
		status, e.Error = http.StatusInternalServerError, CodeProducerDamaged
	case errors.Is(err, server.ErrFenced):
		status, e.Error = http.StatusConflict, CodeProducerFenced
	case errors.Is(err, server.ErrInvalidEpoch):
		status, e.Error = http.StatusConflict, CodeInvalidEpoch
	case errors.Is(err, server.ErrKeyReused):
		status, e.Error = http.StatusUnprocessableEntity, CodeIdempotencyKeyReused
	case errors.Is(err, server.ErrBackpressure):
		status, e.Error = http.StatusTooManyRequests, CodeBackpressure
		w.Header().Set("Retry-After", s.retryAfterOf(err))
	case errors.Is(err, server.ErrNotReady):
		status, e.Error = http.StatusServiceUnavailable, CodeNotReady
		w.Header().Set("Retry-After", s.retryAfter)
	case errors.Is(err, server.ErrClosed):
		status, e.Error = http.StatusServiceUnavailable, CodeShuttingDown
	case errors.Is(err, server.ErrDiskFull):
		status, e.Error = http.StatusInsufficientStorage, CodeInsufficientStorage
	default:
		if write {
			w.Header().Set(CheckpointHeader, strconv.FormatUint(s.eng.Status().OpenID, 10))
		}
		s.internal(w, r, err)
		return
	}
	if write {
		s.writeFail(w, status, e)
		return
	}
	writeError(w, status, e)
}
