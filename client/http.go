package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/internal/ctxsleep"
)

// Wire headers and limits.
const (
	headerProducerID    = "Producer-Id"
	headerProducerEpoch = "Producer-Epoch"
	headerProducerSeq   = "Producer-Seq"
	headerCheckpoint    = "X-Eosink-Checkpoint"
	contentTypeNDJSON   = "application/x-ndjson"
	userAgent           = "eosink-go-client/1"
	maxAnswer           = 1 << 20 // bytes read of one answer
)

// ProducerState is a producer's state in the service, as POST
// /v1/producers/{id}/init and GET /v1/producers/{id} answer it.
type ProducerState struct {
	Producer string                 `json:"producer"`
	Epoch    int64                  `json:"epoch"`
	Streams  map[string]StreamState `json:"streams"`
}

// StreamState is a producer's sequence state on one stream.
type StreamState struct {
	NextSeq      int64 `json:"next_seq"`      // the sequence number the service expects next
	CommittedSeq int64 `json:"committed_seq"` // the highest committed one, -1 when none
}

// writeAnswer is the body of a write's 200 or 202.
type writeAnswer struct {
	Stream     string `json:"stream"`
	Checkpoint uint64 `json:"checkpoint"`
	Records    int    `json:"records"`
	Bytes      int    `json:"bytes"`
	Duplicate  bool   `json:"duplicate"`
	Committed  bool   `json:"committed"`
	NextSeq    int64  `json:"next_seq"`
}

// errorAnswer is the body of every error.
type errorAnswer struct {
	Error       string `json:"error"`
	Message     string `json:"message"`
	Line        int    `json:"line"`
	ExpectedSeq *int64 `json:"expected_seq"`
	Checkpoint  uint64 `json:"checkpoint"`
}

// request is one HTTP call; it may be sent several times.
type request struct {
	method string
	path   string // below the base URL, starting with "/"
	query  url.Values
	header http.Header
	body   []byte // nil: no body
	// maxAnswer bounds the bytes read of the answer; 0 means maxAnswer.
	maxAnswer int64
}

// do sends req once. A non-2xx answer is an *APIError; a 2xx answer's body
// is decoded into out (if not nil). Transport errors are returned as they
// come, wrapped.
func (c *Client) do(ctx context.Context, req request, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(c.base.Path, "/") + req.path
	u.RawPath = ""
	u.RawQuery = req.query.Encode()
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	for k, vs := range req.header {
		hr.Header[k] = vs
	}
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", userAgent)
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	defer resp.Body.Close()
	limit := req.maxAnswer
	if limit <= 0 {
		limit = maxAnswer
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", req.method, req.path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // let the connection be reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiError(resp, data)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*rawAnswer); ok {
		raw.data = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode %d answer: %w", req.method, req.path, resp.StatusCode, err)
	}
	return nil
}

func apiError(resp *http.Response, data []byte) *APIError {
	e := &APIError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var ea errorAnswer
	if json.Unmarshal(data, &ea) == nil && ea.Error != "" {
		e.Code, e.Message, e.Line, e.ExpectedSeq, e.Checkpoint = ea.Error, ea.Message, ea.Line, ea.ExpectedSeq, ea.Checkpoint
		return e
	}
	// Not ours: a proxy's or load balancer's page. Keep a little of it.
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	e.Message = msg
	return e
}

// retryAfter parses a Retry-After value: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Retry is the retry policy of every request: exponential backoff with
// jitter between Min and Max, for at most MaxAttempts attempts and
// MaxElapsed in a row. A Retry-After answer overrides the backoff.
type Retry struct {
	Min time.Duration // first backoff; default 50ms
	Max time.Duration // longest backoff; default 5s
	// MaxAttempts bounds the attempts of one request, the first included;
	// 0 means no bound.
	MaxAttempts int
	// MaxElapsed bounds the time from the first failure of a run of
	// failures to the next attempt; 0 means the default, 2 minutes, and a
	// negative value no bound (the ctx still ends it).
	MaxElapsed time.Duration
}

// DefaultRetry is the policy of a Client without WithRetry.
func DefaultRetry() Retry {
	return Retry{Min: 50 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: 2 * time.Minute}
}

func (r Retry) withDefaults() Retry {
	d := DefaultRetry()
	if r.Min <= 0 {
		r.Min = d.Min
	}
	if r.Max <= 0 {
		r.Max = max(d.Max, r.Min)
	}
	r.Max = max(r.Max, r.Min)
	if r.MaxElapsed == 0 {
		r.MaxElapsed = d.MaxElapsed
	}
	return r
}

// backoff returns the wait before attempt n+1 (n >= 1 failures so far):
// Min doubled per failure up to Max, the upper half jittered.
func (r Retry) backoff(n int) time.Duration {
	d := r.Min << min(n-1, 30)
	if d > r.Max || d <= 0 {
		d = r.Max
	}
	return d/2 + rand.N(d/2+1)
}

// streak counts a run of failures of one operation.
type streak struct {
	pol   Retry
	n     int
	first time.Time
}

// next records a failure and returns how long to wait before trying
// again, honouring retryAfter; false when the budget is spent.
func (s *streak) next(retryAfter time.Duration) (time.Duration, bool) {
	if s.n == 0 {
		s.first = time.Now()
	}
	s.n++
	if s.pol.MaxAttempts > 0 && s.n >= s.pol.MaxAttempts {
		return 0, false
	}
	d := s.pol.backoff(s.n)
	if retryAfter > 0 {
		d = retryAfter
	}
	if s.pol.MaxElapsed > 0 && time.Since(s.first)+d > s.pol.MaxElapsed {
		return 0, false
	}
	return d, true
}

func (s *streak) reset() { s.n = 0 }

// call sends req, retrying transient failures (transport errors, 5xx, 429)
// under the retry policy. Only for requests that may be repeated freely:
// reads and producer inits. Writes go through deliver.
func (c *Client) call(ctx context.Context, op string, req request, out any) error {
	s := streak{pol: c.retry}
	for {
		err := c.do(ctx, req, out)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
		var ae *APIError
		if errors.As(err, &ae) && !ae.retryable() {
			return fmt.Errorf("%s: %w", op, err)
		}
		var ra time.Duration
		if ae != nil {
			ra = ae.RetryAfter
		}
		d, ok := s.next(ra)
		if !ok {
			return fmt.Errorf("%s: giving up after %d attempts: %w", op, s.n, err)
		}
		c.log.Debug("retrying", "op", op, "attempt", s.n, "wait", d, "err", err)
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
}
