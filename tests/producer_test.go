package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/ctxsleep"
)

// batchKey names one batch: producer, stream and sequence number. Every
// record of a batch carries it, so the checker knows where each line came
// from.
type batchKey struct {
	P string
	S string
	Q int64
}

func (k batchKey) String() string { return fmt.Sprintf("%s/%s/%d", k.P, k.S, k.Q) }

// record is one test record as stored: {"p","s","q","i","n","x"}. i is
// the record's index in its batch of n; x is padding.
type record struct {
	P string `json:"p"`
	S string `json:"s"`
	Q int64  `json:"q"`
	I int    `json:"i"`
	N int    `json:"n"`
	X string `json:"x,omitempty"`
}

const padding = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789"

// makeRecords renders batch k as n records, each padded by up to pad bytes.
func makeRecords(rng *rand.Rand, k batchKey, n, pad int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		x := ""
		if pad > 0 {
			x = padding[:rng.IntN(min(pad, len(padding))+1)]
		}
		b, _ := json.Marshal(record{P: k.P, S: k.S, Q: k.Q, I: i, N: n, X: x})
		out[i] = b
	}
	return out
}

// ndjson joins records into a body.
func ndjson(recs [][]byte) []byte {
	var b bytes.Buffer
	for _, r := range recs {
		b.Write(r)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ledger is what the producers sent and must find committed, each batch
// exactly once: batch -> record count.
type ledger struct {
	mu      sync.Mutex
	batches map[batchKey]int
}

func newLedger() *ledger { return &ledger{batches: map[batchKey]int{}} }

func (l *ledger) add(k batchKey, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches[k] = n
}

// snapshot copies the ledger.
func (l *ledger) snapshot() map[batchKey]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[batchKey]int, len(l.batches))
	for k, v := range l.batches {
		out[k] = v
	}
	return out
}

func (l *ledger) records() (batches, records int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.batches {
		batches++
		records += n
	}
	return batches, records
}

// sender is a producer as the crash loops drive it: the client in client/,
// or the test's own HTTP producer.
type sender interface {
	ID() string
	// Send delivers recs as batch seq of stream. kept reports whether the
	// batch is now the sender's to deliver (it must end up committed);
	// when not, it must be sent again with the same seq.
	Send(ctx context.Context, stream string, seq int64, recs [][]byte) (kept bool, err error)
	// Flush waits until every kept batch is committed.
	Flush(ctx context.Context) error
	// Resends counts the times the service asked for accepted batches
	// again (it lost them in a crash).
	Resends() int
}

// newSender makes the crash loops' producer: client/ by default, the raw
// HTTP producer with EOSINK_E2E_PRODUCER=raw.
func newSender(ctx context.Context, t testing.TB, baseURL, id string) sender {
	t.Helper()
	var err error
	for attempt := 0; ; attempt++ {
		var s sender
		switch v := os.Getenv(envProducer); v {
		case "", "client":
			s, err = newClientSender(ctx, baseURL, id)
		case "raw":
			s, err = newRawProducer(ctx, baseURL, id)
		default:
			t.Fatalf("%s=%q: want client or raw", envProducer, v)
		}
		if err == nil {
			return s
		}
		if ctx.Err() != nil || attempt > 100 {
			t.Fatalf("producer %s: init: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientSender drives client.Client.
type clientSender struct {
	c       *client.Client
	resends *atomic.Int64
}

func newClientSender(ctx context.Context, baseURL, id string) (*clientSender, error) {
	n := new(atomic.Int64)
	c, err := client.New(baseURL, client.WithProducer(id),
		client.WithRetry(client.Retry{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond, MaxElapsed: -1}),
		client.WithLogger(slog.New(resendCounter{n})))
	if err != nil {
		return nil, err
	}
	if _, err := c.Init(ctx); err != nil {
		return nil, err
	}
	return &clientSender{c: c, resends: n}, nil
}

func (s *clientSender) Resends() int { return int(s.resends.Load()) }

// resendCounter counts the client's log messages about resending.
type resendCounter struct{ n *atomic.Int64 }

func (h resendCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h resendCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "resend") {
		h.n.Add(1)
	}
	return nil
}
func (h resendCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h resendCounter) WithGroup(string) slog.Handler      { return h }

func (s *clientSender) ID() string { return s.c.Producer() }

func (s *clientSender) Send(ctx context.Context, stream string, seq int64, recs [][]byte) (bool, error) {
	res, err := s.c.Send(ctx, stream, recs)
	switch {
	case err == nil || errors.Is(err, client.ErrKept):
		if res.Seq != seq {
			return true, fmt.Errorf("client gave batch %s/%s seq %d, the test expected %d", s.ID(), stream, res.Seq, seq)
		}
		return true, err
	default:
		return false, err
	}
}

func (s *clientSender) Flush(ctx context.Context) error { return s.c.Flush(ctx) }

// --- the raw HTTP producer ---

// writeAnswer is a write's 200/202 body.
type writeAnswer struct {
	Stream     string `json:"stream"`
	Checkpoint uint64 `json:"checkpoint"`
	Records    int    `json:"records"`
	Duplicate  bool   `json:"duplicate"`
	Committed  bool   `json:"committed"`
	NextSeq    int64  `json:"next_seq"`
}

// answer is one answer to one POST of a batch, as the raw producer saw it.
type answer struct {
	Stream string
	Seq    int64
	Wait   bool
	Status int    // 0: transport error
	Code   string // error code of a non-2xx answer
	Write  writeAnswer
	Exp    *int64 // expected_seq
	Err    error  // transport error
	Sent   time.Time
	At     time.Time
}

// rawProducer speaks the HTTP API directly: idempotence headers, one
// request in flight per stream, kept batches resent from expected_seq,
// retries on transport errors, 5xx and 429. It is the reference the
// client is compared with, and it lets tests see every answer.
// sendNew sends batch seq of n new records (of about pad bytes each) to
// stream once, requires 202, and counts its records in want.
func (p *rawProducer) sendNew(t testing.TB, rng *rand.Rand, stream string, seq int64, n, pad int, want map[batchKey]int) {
	t.Helper()
	k := batchKey{P: p.ID(), S: stream, Q: seq}
	recs := makeRecords(rng, k, n, pad)
	if a := p.post(t.Context(), stream, &rawBatch{seq: seq, body: ndjson(recs)}, p.epoch, false); a.Status != http.StatusAccepted {
		t.Fatalf("send %s: %d %s (%v), want 202", k, a.Status, a.Code, a.Err)
	}
	want[k] = len(recs)
}

type rawProducer struct {
	id   string
	base string
	hc   *http.Client

	// Observe, if set, sees every answer (under no lock of the producer).
	Observe func(a answer)

	mu      sync.Mutex
	epoch   int64
	streams map[string]*rawStream
	rewinds int // answers that asked for a seq below one already accepted
}

type rawStream struct {
	send chan struct{} // one sender at a time
	next int64
	kept []*rawBatch // kept[i].seq == kept[0].seq+i
}

type rawBatch struct {
	seq       int64
	body      []byte
	confirmed bool
}

// newRawProducer makes a producer and takes an epoch (init).
func newRawProducer(ctx context.Context, base, id string) (*rawProducer, error) {
	p := &rawProducer{id: id, base: base, streams: map[string]*rawStream{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
	if err := p.Init(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// mustRawProducer is newRawProducer, ending the test if it fails.
func mustRawProducer(ctx context.Context, t testing.TB, base, id string) *rawProducer {
	t.Helper()
	p, err := newRawProducer(ctx, base, id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *rawProducer) ID() string { return p.id }

func (p *rawProducer) Resends() int { return p.Rewinds() }

// Rewinds returns how often the service asked to resend accepted batches.
func (p *rawProducer) Rewinds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rewinds
}

// Init takes a new epoch, retrying transient failures until ctx ends.
func (p *rawProducer) Init(ctx context.Context) error {
	var st producerState
	for attempt := 0; ; attempt++ {
		err := p.do(ctx, http.MethodPost, "/v1/producers/"+p.id+"/init", nil, nil, &st)
		if err == nil {
			break
		}
		if !transient(err) || ctx.Err() != nil {
			return fmt.Errorf("init %s: %w", p.id, err)
		}
		if err := ctxsleep.Sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = st.Epoch
	for name, ss := range st.Streams {
		rs := p.stream(name)
		if len(rs.kept) == 0 && ss.NextSeq > rs.next {
			rs.next = ss.NextSeq
		}
	}
	return nil
}

func (p *rawProducer) stream(name string) *rawStream {
	rs := p.streams[name]
	if rs == nil {
		rs = &rawStream{send: make(chan struct{}, 1)}
		p.streams[name] = rs
	}
	return rs
}

// Next returns the sequence number the next new batch of stream gets.
func (p *rawProducer) Next(stream string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stream(stream).next
}

func (p *rawProducer) Send(ctx context.Context, stream string, seq int64, recs [][]byte) (bool, error) {
	_, err := p.SendBody(ctx, stream, seq, ndjson(recs), false)
	return true, err
}

// SendBody delivers body as batch seq of stream (which must be the
// stream's next), with ?wait=commit if wait, after any kept batch the
// service lost. It returns the answer that confirmed the batch. It retries
// until the batch is confirmed or ctx ends; the batch is kept either way.
func (p *rawProducer) SendBody(ctx context.Context, stream string, seq int64, body []byte, wait bool) (answer, error) {
	p.mu.Lock()
	rs := p.stream(stream)
	p.mu.Unlock()
	select {
	case rs.send <- struct{}{}:
	case <-ctx.Done():
		return answer{}, ctx.Err()
	}
	defer func() { <-rs.send }()
	p.mu.Lock()
	if seq != rs.next {
		p.mu.Unlock()
		return answer{}, fmt.Errorf("producer %s stream %s: sending seq %d, next is %d", p.id, stream, seq, rs.next)
	}
	b := &rawBatch{seq: seq, body: body}
	rs.next++
	rs.kept = append(rs.kept, b)
	p.mu.Unlock()
	return p.deliver(ctx, stream, rs, b, wait)
}

// deliver sends the unconfirmed kept batches of rs in order until target
// (nil: all) is confirmed. The caller holds rs.send.
func (p *rawProducer) deliver(ctx context.Context, stream string, rs *rawStream, target *rawBatch, wait bool) (answer, error) {
	fails := 0
	for {
		p.mu.Lock()
		var b *rawBatch
		for _, k := range rs.kept {
			if !k.confirmed {
				b = k
				break
			}
		}
		epoch := p.epoch
		p.mu.Unlock()
		if b == nil {
			if target == nil {
				return answer{}, nil
			}
			return answer{}, fmt.Errorf("producer %s stream %s: seq %d neither confirmed nor kept", p.id, stream, target.seq)
		}
		a := p.post(ctx, stream, b, epoch, wait && b == target)
		if p.Observe != nil {
			p.Observe(a)
		}
		switch {
		case a.Status == http.StatusOK || a.Status == http.StatusAccepted:
			p.mu.Lock()
			b.confirmed = true
			p.mu.Unlock()
			fails = 0
			if b == target {
				return a, nil
			}
			continue
		case a.Exp != nil && (a.Code == "out_of_order_sequence" || a.Code == "aborted"):
			if err := p.rewind(stream, rs, *a.Exp, b.seq, a); err != nil {
				return a, err
			}
			if a.Code == "out_of_order_sequence" && *a.Exp != b.seq {
				continue // resend at once from the expected batch
			}
		case a.Status == 0, a.Status >= 500, a.Status == http.StatusTooManyRequests:
			// transient: retry below
		default:
			return a, fmt.Errorf("producer %s: send %s seq %d: HTTP %d %s", p.id, stream, b.seq, a.Status, a.Code)
		}
		if ctx.Err() != nil {
			return a, ctx.Err()
		}
		fails++
		if err := ctxsleep.Sleep(ctx, backoff(fails)); err != nil {
			return a, err
		}
	}
}

// rewind marks the kept batches from exp on as unsent, after the service
// said it expects exp.
func (p *rawProducer) rewind(stream string, rs *rawStream, exp, sent int64, a answer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := rs.next
	if len(rs.kept) > 0 {
		first = rs.kept[0].seq
	}
	if exp < first || exp > rs.next {
		return fmt.Errorf("producer %s stream %s: service expects seq %d, but only %d..%d are kept (answer %d %s to seq %d)",
			p.id, stream, exp, first, rs.next-1, a.Status, a.Code, sent)
	}
	p.unconfirmFrom(rs, exp)
	return nil
}

// post sends one batch once.
func (p *rawProducer) post(ctx context.Context, stream string, b *rawBatch, epoch int64, wait bool) answer {
	a := answer{Stream: stream, Seq: b.seq, Wait: wait, Sent: time.Now()}
	u := p.base + "/v1/streams/" + stream + "/records"
	if wait {
		u += "?wait=commit"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b.body))
	if err != nil {
		a.Err = err
		return a
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Producer-Id", p.id)
	req.Header.Set("Producer-Epoch", strconv.FormatInt(epoch, 10))
	req.Header.Set("Producer-Seq", strconv.FormatInt(b.seq, 10))
	resp, err := p.hc.Do(req)
	if err != nil {
		a.Err, a.At = err, time.Now()
		return a
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	a.At = time.Now()
	if err != nil {
		a.Err = err
		return a
	}
	a.Status = resp.StatusCode
	if a.Status == http.StatusOK || a.Status == http.StatusAccepted {
		if err := json.Unmarshal(data, &a.Write); err != nil {
			a.Status, a.Err = 0, fmt.Errorf("decode %q: %w", data, err)
		}
		return a
	}
	var e apiError
	if json.Unmarshal(data, &e) == nil {
		a.Code, a.Exp = e.Error, e.ExpectedSeq
	}
	return a
}

// Flush waits until every kept batch is committed, resending what the
// service lost; trigger, if set, is called between polls (to request a
// checkpoint).
func (p *rawProducer) Flush(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		var st producerState
		err := p.do(ctx, http.MethodGet, "/v1/producers/"+p.id, nil, nil, &st)
		if err != nil {
			if !transient(err) || ctx.Err() != nil {
				return fmt.Errorf("flush %s: %w", p.id, err)
			}
			if err := ctxsleep.Sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		p.mu.Lock()
		names := make([]string, 0, len(p.streams))
		for n := range p.streams {
			names = append(names, n)
		}
		p.mu.Unlock()
		slices.Sort(names)
		pending := false
		for _, name := range names {
			p.mu.Lock()
			rs := p.streams[name]
			p.mu.Unlock()
			rs.send <- struct{}{}
			p.mu.Lock()
			ss, ok := st.Streams[name]
			if !ok {
				ss.NextSeq, ss.CommittedSeq = 0, -1
			}
			i := 0
			for i < len(rs.kept) && rs.kept[i].seq <= ss.CommittedSeq {
				i++
			}
			rs.kept = rs.kept[i:]
			var rerr error
			if len(rs.kept) > 0 && ss.NextSeq < rs.next {
				rerr = p.rewindLocked(name, rs, ss.NextSeq)
			}
			left := len(rs.kept) > 0
			p.mu.Unlock()
			if rerr == nil && left {
				pending = true
				_, rerr = p.deliver(ctx, name, rs, nil, false)
			}
			<-rs.send
			if rerr != nil {
				return fmt.Errorf("flush %s: %w", p.id, rerr)
			}
		}
		if !pending {
			return nil
		}
		if err := ctxsleep.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("flush %s: %w", p.id, err)
		}
	}
}

// unconfirmFrom marks rs's kept batches from exp on as unconfirmed and
// counts a rewind if one of them was confirmed. p.mu is held.
func (p *rawProducer) unconfirmFrom(rs *rawStream, exp int64) {
	lost := false
	for _, k := range rs.kept {
		if k.seq >= exp {
			lost = lost || k.confirmed
			k.confirmed = false
		}
	}
	if lost {
		p.rewinds++
	}
}

func (p *rawProducer) rewindLocked(stream string, rs *rawStream, exp int64) error {
	first := rs.kept[0].seq
	if exp < first || exp > rs.next {
		return fmt.Errorf("producer %s stream %s: service's next_seq %d, but only %d..%d are kept", p.id, stream, exp, first, rs.next-1)
	}
	p.unconfirmFrom(rs, exp)
	return nil
}

// do is a plain JSON request against the producer's service.
func (p *rawProducer) do(ctx context.Context, method, path string, hdr http.Header, body []byte, out any) error {
	return callJSON(ctx, p.hc, p.base, method, path, hdr, body, out)
}

// transient reports whether a request should be retried: a transport
// error, 5xx or 429.
func transient(err error) bool {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusTooManyRequests
	}
	return true
}

// backoff is 5ms doubled per failure up to 100ms.
func backoff(n int) time.Duration {
	d := 5 * time.Millisecond << min(n, 5)
	return min(d, 100*time.Millisecond)
}
