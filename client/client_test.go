package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/testing/testcert"
	"github.com/eosink/eosink/server"
)

func TestSendFlush(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	c := r.client("p1")
	ps, err := c.Init(ctx(t))
	if err != nil || ps.Epoch != 0 || len(ps.Streams) != 0 {
		t.Fatalf("init: %+v %v", ps, err)
	}
	want := map[string][]string{}
	for i := range 10 {
		for _, s := range []string{"clicks", "views"} {
			recs, keys := records(fmt.Sprintf("%s-%d", s, i), 3)
			res, err := c.Send(ctx(t), s, recs)
			if err != nil {
				t.Fatalf("send %s %d: %v", s, i, err)
			}
			if res.Seq != int64(i) || res.Records != 3 || res.Duplicate || res.Stream != s {
				t.Fatalf("send %s %d: %+v", s, i, res)
			}
			want[s] = append(want[s], keys...)
		}
	}
	if err := c.Flush(ctx(t)); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if st := c.Stats(); st != (client.Stats{}) {
		t.Fatalf("kept after flush: %+v", st)
	}
	ps, err = c.State(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for s, keys := range want {
		if ss := ps.Streams[s]; ss.NextSeq != 10 || ss.CommittedSeq != 9 {
			t.Errorf("stream %s: %+v", s, ss)
		}
		r.expectOnce(s, keys)
	}
	// A Flush with nothing kept returns at once.
	flush(t, c)
}

func TestInitTakesUpSequences(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	a := r.initClient("p")
	keys := sendBatches(t, a, "a", 3)
	flush(t, a)
	// A restarted producer process: a new client with the same id.
	b := r.client("p")
	ps, err := b.Init(ctx(t))
	if err != nil || ps.Epoch != 1 || ps.Streams["s"] != (client.StreamState{NextSeq: 3, CommittedSeq: 2}) {
		t.Fatalf("init: %+v %v", ps, err)
	}
	sendAt(t, b, &keys, "b0", 1, 3)
	flush(t, b)
	r.expectOnce("s", keys)
}

func TestSendWait(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	c := r.initClient("p")
	recs, keys := records("w", 4)
	sendWaitCommitted(t, c, recs, 0)
	r.expectOnce("s", keys)
}

// sendAt sends n records tagged tag to stream s through c, adding their
// keys to keys, and wants them answered as batch seq.
func sendAt(t *testing.T, c *client.Client, keys *[]string, tag string, n int, seq int64) {
	t.Helper()
	recs, k := records(tag, n)
	*keys = append(*keys, k...)
	res, err := c.Send(ctx(t), "s", recs)
	if err != nil || res.Seq != seq {
		t.Fatalf("send %s: %+v %v", tag, res, err)
	}
}

// sendWaitCommitted: SendWait of recs to stream s answers them committed
// as batch seq, and the client keeps no batch after.
func sendWaitCommitted(t *testing.T, c *client.Client, recs [][]byte, seq int64) {
	t.Helper()
	res, err := c.SendWait(ctx(t), "s", recs)
	if err != nil || !res.Committed || res.Seq != seq {
		t.Fatalf("send wait: %+v %v", res, err)
	}
	if st := c.Stats(); st.Batches != 0 {
		t.Fatalf("committed batch still kept: %+v", st)
	}
}

// TestSendWaitPolls: the service's own wait times out (202), SendWait
// goes on polling.
func TestSendWaitPolls(t *testing.T) {
	r := newRig(t, 0)
	r.api = func(c *api.Config) { c.WaitTimeout = 50 * time.Millisecond }
	r.start()
	c := r.initClient("p")
	// Events, not timers, order the steps: a loaded machine outruns a
	// timer (the first write not yet made when a 200 ms ctx ended; the
	// second landing after a checkpoint timed to follow it, with nothing
	// left to commit it).
	// Not committed before ctx ends (at SendWait's first poll, after the
	// service's own wait answered 202): kept, not to be sent again.
	short, cancel := context.WithCancel(t.Context())
	defer cancel()
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Method == http.MethodGet && req.URL.Path == "/v1/producers/p" {
			cancel()
		}
		return false
	})
	recs, keys := records("w0", 2)
	res, err := c.SendWait(short, "s", recs)
	if !errors.Is(err, client.ErrKept) || res.Seq != 0 || res.Committed {
		t.Fatalf("send wait, no checkpoint: %+v %v", res, err)
	}
	if st := c.Stats(); st.Batches != 1 || st.Unconfirmed != 0 {
		t.Fatalf("stats: %+v", st)
	}

	// A checkpoint once the service's own wait for w1 ended (202).
	waited := make(chan struct{})
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, req)
		if rec.Code == http.StatusAccepted {
			r.intercept(nil)
			close(waited)
		}
		copyAnswer(w, rec)
		return true
	})
	go func() {
		select {
		case <-waited:
			r.checkpoint()
		case <-t.Context().Done():
		}
	}()
	recs, k := records("w1", 2)
	keys = append(keys, k...)
	sendWaitCommitted(t, c, recs, 1)
	r.expectOnce("s", keys)
}

// TestRetries: failures before and after the service took the batch are
// retried, and nothing is stored twice.
func TestRetries(t *testing.T) {
	cases := []struct {
		name string
		icpt func(w http.ResponseWriter, req *http.Request, next http.Handler)
		dup  bool // the retry is answered as a duplicate
	}{
		{name: "503 not_ready", icpt: func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			answer(w, http.StatusServiceUnavailable, "not_ready")
		}},
		{name: "502 from a proxy", icpt: func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		}},
		{name: "connection dropped before", icpt: func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			hijackClose(w)
		}},
		{name: "connection dropped after", dup: true, icpt: func(w http.ResponseWriter, req *http.Request, next http.Handler) {
			next.ServeHTTP(httptest.NewRecorder(), req) // the service takes it; the answer is lost
			hijackClose(w)
		}},
		{name: "500 after", dup: true, icpt: func(w http.ResponseWriter, req *http.Request, next http.Handler) {
			next.ServeHTTP(httptest.NewRecorder(), req)
			answer(w, http.StatusInternalServerError, "internal")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 20*time.Millisecond).start()
			c := r.initClient("p")
			const fails = 3
			var n atomic.Int64
			r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
				if !isWrite(req) || n.Add(1) > fails {
					return false
				}
				tc.icpt(w, req, next)
				return true
			})
			var keys []string
			for i := range 3 {
				recs, k := records(fmt.Sprintf("r%d", i), 2)
				keys = append(keys, k...)
				res, err := c.Send(ctx(t), "s", recs)
				if err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if i == 0 && res.Duplicate != tc.dup {
					t.Fatalf("send 0: duplicate %v, want %v", res.Duplicate, tc.dup)
				}
			}
			if got := r.attempts("s", 0); got != fails+1 {
				t.Fatalf("seq 0 sent %d times, want %d", got, fails+1)
			}
			flush(t, c)
			r.expectOnce("s", keys)
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	c := r.initClient("p")
	var mu sync.Mutex
	var at []time.Time
	r.intercept(func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			answer(w, http.StatusTooManyRequests, "backpressure", "Retry-After", "1")
			return true
		}
		return false
	})
	recs, keys := records("x", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(at) != 2 {
		t.Fatalf("%d attempts, want 2", len(at))
	}
	if d := at[1].Sub(at[0]); d < time.Second {
		t.Fatalf("retried %v after a 429 with Retry-After: 1", d)
	}
	mu.Unlock()
	flush(t, c)
	r.expectOnce("s", keys)
}

// TestGiveUp: a Send that gives up after an attempt that may have reached
// the service keeps the batch (ErrKept) and the next call delivers
// it; one that only met refusals does not keep it.
func TestGiveUp(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	c := r.initClient("p", client.WithRetry(client.Retry{Min: time.Millisecond, Max: 2 * time.Millisecond, MaxAttempts: 3}))
	var keys []string

	// Only 429s: refused, not kept, the number is reused.
	r.intercept(func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		answer(w, http.StatusTooManyRequests, "backpressure")
		return true
	})
	recs, _ := records("refused", 1)
	_, err := c.Send(ctx(t), "s", recs)
	if !errors.Is(err, client.ErrBackpressure) || errors.Is(err, client.ErrKept) {
		t.Fatalf("429s: %v", err)
	}
	if st := c.Stats(); st.Batches != 0 {
		t.Fatalf("refused batch kept: %+v", st)
	}

	// Lost answers: kept unconfirmed.
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		next.ServeHTTP(httptest.NewRecorder(), req)
		answer(w, http.StatusBadGateway, "")
		return true
	})
	recs, k := records("kept", 1)
	keys = append(keys, k...)
	res, err := c.Send(ctx(t), "s", recs)
	var ae *client.APIError
	if !errors.Is(err, client.ErrKept) || !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || res.Seq != 0 {
		t.Fatalf("lost answers: %+v %v", res, err)
	}
	if st := c.Stats(); st.Batches != 1 || st.Unconfirmed != 1 {
		t.Fatalf("stats: %+v", st)
	}

	// Healed: the next Send delivers the kept batch first.
	r.intercept(nil)
	sendAt(t, c, &keys, "next", 1, 1)
	flush(t, c)
	r.expectOnce("s", keys)

	// Flush alone delivers a kept batch too.
	r.intercept(func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		hijackClose(w)
		return true
	})
	recs, k = records("flushed", 1)
	keys = append(keys, k...)
	if _, err := c.Send(ctx(t), "s", recs); !errors.Is(err, client.ErrKept) {
		t.Fatalf("dropped: %v", err)
	}
	r.intercept(nil)
	flush(t, c)
	r.expectOnce("s", keys)
}

// TestCrashResend: the service crashes with accepted, unprepared batches;
// the client resends them from the expected_seq, each once.
func TestCrashResend(t *testing.T) {
	for _, then := range []string{"send", "flush", "sendwait"} {
		t.Run("then "+then, func(t *testing.T) {
			r := newRig(t, 0).start()
			c := r.initClient("p")
			var keys []string
			send := func(i int) client.Result {
				t.Helper()
				recs, k := records(fmt.Sprintf("b%d", i), 3)
				keys = append(keys, k...)
				res, err := c.Send(ctx(t), "s", recs)
				if err != nil || res.Seq != int64(i) {
					t.Fatalf("send %d: %+v %v", i, res, err)
				}
				return res
			}
			for i := range 5 {
				send(i)
			}
			r.checkpoint()
			for i := 5; i < 10; i++ {
				send(i)
			}
			r.interval = 20 * time.Millisecond
			r.crash() // 5..9 accepted, never prepared: lost
			switch then {
			case "send":
				send(10) // answered expected_seq 5: resends 5..10
				if st := c.Stats(); st.Unconfirmed != 0 {
					t.Fatalf("unconfirmed after send: %+v", st)
				}
				flush(t, c)
			case "flush":
				flush(t, c)
			case "sendwait":
				recs, k := records("b10", 3)
				keys = append(keys, k...)
				res, err := c.SendWait(ctx(t), "s", recs)
				if err != nil || !res.Committed || res.Seq != 10 {
					t.Fatalf("send wait: %+v %v", res, err)
				}
				flush(t, c)
			}
			for seq := int64(5); seq < 10; seq++ {
				if n := r.attempts("s", seq); n != 2 {
					t.Errorf("seq %d sent %d times, want 2", seq, n)
				}
			}
			if st := c.Stats(); st != (client.Stats{}) {
				t.Fatalf("kept after flush: %+v", st)
			}
			r.expectOnce("s", keys)
		})
	}
}

// TestAbortedCheckpointResent: with ?wait=commit, a checkpoint that
// aborts answers 503 aborted with expected_seq; SendWait resends.
func TestAbortedCheckpointResent(t *testing.T) {
	var failing atomic.Bool
	aborted := make(chan struct{}, 1)
	r := newRig(t, 20*time.Millisecond)
	r.failPreCommitsWhile(&failing)
	r.engine = func(c *server.Config) {
		c.Hooks.Checkpoint = func(res server.CheckpointResult) {
			if res.State == "aborted" && failing.CompareAndSwap(true, false) {
				aborted <- struct{}{}
			}
		}
	}
	r.start()
	c := r.initClient("p")
	recs0, keys := records("a", 2)
	if _, err := c.SendWait(ctx(t), "s", recs0); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	recs1, k := records("b", 2)
	keys = append(keys, k...)
	res, err := c.SendWait(ctx(t), "s", recs1)
	if err != nil || !res.Committed || res.Seq != 1 {
		t.Fatalf("send wait across an abort: %+v %v", res, err)
	}
	select {
	case <-aborted:
	default:
		t.Fatal("no checkpoint aborted")
	}
	if n := r.attempts("s", 1); n < 2 {
		t.Fatalf("seq 1 sent %d times: not resent after the abort", n)
	}
	r.expectOnce("s", keys)
}

func TestFencing(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	a := r.initClient("p")
	recs, keys := records("a0", 1)
	if _, err := a.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	b := r.client("p")
	ps, err := b.Init(ctx(t))
	if err != nil || ps.Epoch != a.Epoch()+1 {
		t.Fatalf("init b: %+v %v", ps, err)
	}
	recs, _ = records("zombie", 1)
	_, err = a.Send(ctx(t), "s", recs)
	var ae *client.APIError
	if !errors.Is(err, client.ErrFenced) || !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "producer_fenced" {
		t.Fatalf("zombie send: %v", err)
	}
	before := r.writes.Load()
	for _, err := range []error{
		func() error { _, err := a.Send(ctx(t), "s", recs); return err }(),
		func() error { _, err := a.SendWait(ctx(t), "s", recs); return err }(),
		a.Flush(ctx(t)),
		func() error { _, err := a.Init(ctx(t)); return err }(),
	} {
		if !errors.Is(err, client.ErrFenced) {
			t.Fatalf("zombie call: %v", err)
		}
	}
	if r.writes.Load() != before {
		t.Fatal("a fenced client kept writing")
	}
	if st := a.Stats(); st.Batches != 0 {
		t.Fatalf("fenced client keeps %+v", st)
	}
	// The new owner goes on after a's accepted batch.
	sendAt(t, b, &keys, "b0", 1, 1)
	flush(t, b)
	r.expectOnce("s", keys)

	// A zombie that only flushes learns it from the newer epoch.
	c := r.initClient("p")
	if err := b.Flush(ctx(t)); err != nil {
		t.Fatalf("flush with nothing kept: %v", err)
	}
	recs, _ = records("x", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.initClient("p") // fences c
	if err := c.Flush(ctx(t)); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("zombie flush: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	r := newRig(t, 20*time.Millisecond)
	r.api = func(c *api.Config) { c.MaxRecord = 100 }
	r.start()

	noProducer, err := client.New(r.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noProducer.Init(ctx(t)); !errors.Is(err, client.ErrNoProducer) {
		t.Fatalf("no producer: %v", err)
	}
	if _, err := client.New(r.ts.URL, client.WithProducer("bad id")); err == nil {
		t.Fatal("bad producer id accepted")
	}
	if _, err := client.New("ftp://x"); err == nil {
		t.Fatal("ftp url accepted")
	}

	c := r.client("p", client.WithMaxBuffered(1000))
	one, _ := records("x", 1)
	if _, err := c.Send(ctx(t), "s", one); !errors.Is(err, client.ErrNotInitialized) {
		t.Fatalf("send before init: %v", err)
	}
	if err := c.Flush(ctx(t)); !errors.Is(err, client.ErrNotInitialized) {
		t.Fatalf("flush before init: %v", err)
	}
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		stream  string
		records [][]byte
		want    error
		line    int
	}{
		{"bad stream", "Bad", one, client.ErrInvalidStream, 0},
		{"stream with ..", "a..b", one, client.ErrInvalidStream, 0},
		{"empty", "s", nil, client.ErrEmptyBatch, 0},
		{"newline", "s", [][]byte{[]byte("{\n}")}, client.ErrInvalidRecord, 0},
		{"blank", "s", [][]byte{[]byte(" ")}, client.ErrInvalidRecord, 0},
		{"over the buffer", "s", [][]byte{[]byte(`"` + strings.Repeat("x", 1000) + `"`)}, client.ErrTooLarge, 0},
		{"invalid json", "s", [][]byte{[]byte(`{"k":"ok"}`), []byte(`{bad`)}, client.ErrInvalidJSON, 2},
		{"record over the service limit", "s", [][]byte{[]byte(`"` + strings.Repeat("x", 200) + `"`)}, client.ErrTooLarge, 1},
	}
	for _, tc := range cases {
		_, err := c.Send(ctx(t), tc.stream, tc.records)
		if !errors.Is(err, tc.want) || errors.Is(err, client.ErrKept) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		var ae *client.APIError
		if tc.line > 0 && (!errors.As(err, &ae) || ae.Line != tc.line) {
			t.Errorf("%s: %v, want an APIError at line %d", tc.name, err, tc.line)
		}
	}
	// None of them used a sequence number.
	recs, keys := records("ok", 1)
	res, err := c.Send(ctx(t), "s", recs)
	if err != nil || res.Seq != 0 {
		t.Fatalf("send after refusals: %+v %v", res, err)
	}
	flush(t, c)
	r.expectOnce("s", keys)

	// The state store is replaced by an empty one: the service rebuilds
	// the producer from the destination's manifests (committed seq 0, epoch
	// 0), so the client goes on at seq 1 without an init.
	r.er.StorePath += ".new"
	r.crash()
	res, err = c.Send(ctx(t), "s", recs)
	if err != nil || res.Seq != 1 {
		t.Fatalf("send after the state store was replaced: %+v %v, want seq 1 (producer rebuilt from the manifests)", res, err)
	}
}

func TestAuth(t *testing.T) {
	r := newRig(t, 20*time.Millisecond)
	tokens, err := auth.NewTokens(map[string]auth.Role{"ingest-token-0123456789": auth.RoleIngest})
	if err != nil {
		t.Fatal(err)
	}
	r.api = func(c *api.Config) { c.Auth = tokens }
	r.start()
	if _, err := r.client("p").Init(ctx(t)); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("no token: %v", err)
	}
	c := r.initClient("p", client.WithToken("ingest-token-0123456789"))
	recs, _ := records("a", 1)
	if _, err := c.SendWait(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
}

// TestBufferBound: a Send over WithMaxBuffered waits for commits, or
// fails with ErrBufferFull without keeping the batch.
func TestBufferBound(t *testing.T) {
	r := newRig(t, 0).start()
	recs, _ := records("b0", 1)
	size := int64(len(recs[0]) + 1)
	var stall atomic.Bool // GET /v1/producers/p answers only when its request ends
	hc := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if stall.Load() && req.Method == http.MethodGet && req.URL.Path == "/v1/producers/p" {
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
		return http.DefaultTransport.RoundTrip(req)
	})}
	c := r.initClient("p", client.WithMaxBuffered(3*size), client.WithHTTPClient(hc))
	keys := sendBatches(t, c, "b", 3)
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	recs, k := records("b3", 1)
	if _, err := c.Send(short, "s", recs); !errors.Is(err, client.ErrBufferFull) || errors.Is(err, client.ErrKept) {
		t.Fatalf("over the buffer: %v", err)
	}
	// A ctx that ends while Send reads the producer's state to make room
	// (a service slow to answer) is the same ErrBufferFull, not the
	// read's error.
	stall.Store(true)
	slow, cancelSlow := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancelSlow()
	if _, err := c.Send(slow, "s", recs); !errors.Is(err, client.ErrBufferFull) || errors.Is(err, client.ErrKept) {
		t.Fatalf("over the buffer, the state read stalled: %v", err)
	}
	stall.Store(false)
	if st := c.Stats(); st.Batches != 3 || st.Bytes != 3*size {
		t.Fatalf("stats: %+v", st)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		r.checkpoint()
	}()
	keys = append(keys, k...)
	res, err := c.Send(ctx(t), "s", recs)
	if err != nil || res.Seq != 3 {
		t.Fatalf("send after commit made room: %+v %v", res, err)
	}
	if st := c.Stats(); st.Batches != 1 {
		t.Fatalf("stats: %+v", st)
	}
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", keys)
}

// TestConcurrentWithFaults: goroutines on several streams send through
// injected failures and a crash of the service; every record is
// committed once.
func TestConcurrentWithFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	var rngMu sync.Mutex
	roll := func() float64 {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64()
	}
	r := newRig(t, 10*time.Millisecond).start()
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if !isWrite(req) {
			return false
		}
		switch p := roll(); {
		case p < 0.05:
			answer(w, http.StatusServiceUnavailable, "not_ready")
		case p < 0.10:
			hijackClose(w)
		case p < 0.15:
			next.ServeHTTP(httptest.NewRecorder(), req)
			hijackClose(w)
		default:
			return false
		}
		return true
	})
	c := r.initClient("p")
	streams := []string{"s0", "s1", "s2"}
	const perWorker, workers = 30, 2
	var wg sync.WaitGroup
	var sent atomic.Int64
	total := int64(len(streams) * workers * perWorker)
	for _, s := range streams {
		for w := range workers {
			wg.Go(func() {
				for i := range perWorker {
					recs, _ := records(fmt.Sprintf("%s-w%d-%d", s, w, i), 1+i%3)
					if _, err := c.Send(t.Context(), s, recs); err != nil {
						t.Errorf("send %s w%d %d: %v", s, w, i, err)
						return
					}
					// Crash the service twice along the way; Sends go on
					// meanwhile against the closed and the recovering engine.
					if n := sent.Add(1); n == total/3 || n == 2*total/3 {
						r.crash()
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	flush(t, c)
	for _, s := range streams {
		var keys []string
		for w := range workers {
			for i := range perWorker {
				_, k := records(fmt.Sprintf("%s-w%d-%d", s, w, i), 1+i%3)
				keys = append(keys, k...)
			}
		}
		r.expectOnce(s, keys)
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBufferFullBesideRefusedStream: stream a refuses writes for a long
// while (429 backpressure: its table commit is parked) and the client
// keeps a batch of a that the service does not hold (its first attempt's
// answer was lost). A Send on stream s over the buffer bound waits for
// room until its ctx ends (ErrBufferFull), as documented; a's refusals
// are a's: they must not end s's Send with a's error. Failed before:
// s's Send failed at once with "send a seq 0: giving up after 1
// attempts: 429 backpressure" (with the default retry policy, after
// two minutes of a's retries).
func TestBufferFullBesideRefusedStream(t *testing.T) {
	r := newRig(t, 0).start()
	recs, aKeys := records("x", 1)
	size := int64(len(recs[0]) + 1)
	var aWrites atomic.Int64
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/streams/a/records" {
			return false
		}
		if aWrites.Add(1) == 1 {
			hijackClose(w) // the answer is lost: the batch is kept, unconfirmed
			return true
		}
		answer(w, http.StatusTooManyRequests, "backpressure", "Retry-After", "1")
		return true
	})
	c := r.initClient("p", client.WithMaxBuffered(2*size+2),
		client.WithRetry(client.Retry{Min: time.Millisecond, Max: 20 * time.Millisecond, MaxElapsed: 200 * time.Millisecond}))
	if _, err := c.Send(ctx(t), "a", recs); !errors.Is(err, client.ErrKept) {
		t.Fatalf("send to a (%d attempts): %v, want ErrKept", aWrites.Load(), err)
	}
	sKeys := sendBatches(t, c, "s", 1) // a's batch and this one fill the buffer
	short, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err := c.Send(short, "s", recs)
	if !errors.Is(err, client.ErrBufferFull) {
		t.Fatalf("send to s over the buffer: %v, want ErrBufferFull", err)
	}
	// Once a takes writes again, its kept batch goes first.
	r.intercept(nil)
	r.checkpoint() // s's batch: room for another
	more, k := records("y", 1)
	if _, err := c.Send(ctx(t), "a", more); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	r.expectOnce("a", append(aKeys, k...))
	r.expectOnce("s", sKeys)
}

// TestTLSConfig: a service behind HTTPS with a private CA is reached with
// WithTLSConfig's RootCAs and refused without them.
func TestTLSConfig(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	ca := testcert.NewCA(t, "client test CA")
	ts := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "eosink").TLSCertificate(t)}}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	tcs := []struct {
		name    string
		opts    []client.Option
		wantErr string // "" means the batch is committed
	}{
		{"private CA trusted", []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()})}, ""},
		{"system roots only", nil, "certificate signed by unknown authority"},
		{"another CA", []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: testcert.NewCA(t, "other").Pool()})}, "certificate signed by unknown authority"},
	}
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]client.Option{client.WithProducer("tls-" + strings.ReplaceAll(tc.name, " ", "-")),
				client.WithRetry(client.Retry{Min: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 2})}, tc.opts...)
			c, err := client.New(ts.URL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Init(ctx(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("init over TLS: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("init over TLS: %v", err)
			}
			recs, keys := records("tls", 3)
			if _, err := c.SendWait(ctx(t), "secure", recs); err != nil {
				t.Fatalf("send over TLS: %v", err)
			}
			r.expectOnce("secure", keys)
		})
	}
	if _, err := client.New(ts.URL, client.WithHTTPClient(&http.Client{}), client.WithTLSConfig(&tls.Config{})); err == nil {
		t.Fatal("WithHTTPClient and WithTLSConfig together: accepted")
	}
}
