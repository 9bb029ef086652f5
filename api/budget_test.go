package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestLargestBodyFitsTheBudget: New accepts an in-flight budget of twice
// the body limit as enough for the largest body, so a body of exactly the
// limit, alone in flight, must be read, with or without a Content-Length.
// (It was refused 429 backpressure forever: its steps reserve one byte, or
// one step, beyond the body to see its end, then the one slice its size.)
func TestLargestBodyFitsTheBudget(t *testing.T) {
	const maxBody = 1 << 20
	line := `{"pad":"` + strings.Repeat("x", 1000) + `"}` + "\n"
	body := strings.Repeat(line, maxBody/len(line))
	body += `{"p":"` + strings.Repeat("y", maxBody-len(body)-9) + `"}` + "\n"
	if len(body) != maxBody {
		t.Fatalf("body %d bytes, want %d", len(body), maxBody)
	}
	for _, inflight := range []int64{0, 2 * maxBody} { // the default, and the least New accepts
		r := newRig(t, rigOpts{api: func(c *Config) { c.MaxBody, c.MaxRecord, c.MaxInflightBody = maxBody, maxBody, inflight }})
		for _, chunked := range []bool{false, true} {
			req := request("POST", "/v1/streams/s/records", body, "Content-Type", "application/x-ndjson")
			if chunked {
				req.ContentLength = -1
			}
			rec := r.serve(req)
			if rec.Code != http.StatusAccepted {
				t.Fatalf("in-flight limit %d (configured %d), chunked %v: a body of exactly the limit, alone: %d %s",
					r.srv.inflight.limit, inflight, chunked, rec.Code, rec.Body.String())
			}
			if n := r.srv.inflight.inUse(); n != 0 {
				t.Fatalf("%d bytes still reserved", n)
			}
		}
	}
}

// TestWaitingWriteHoldsNoBudget: a write waiting for its commit
// (?wait=commit, up to the wait timeout) no longer needs its body, which
// the engine copied: it must not hold the in-flight body budget, or a slow
// commit with enough waiters answers every other write 429.
func TestWaitingWriteHoldsNoBudget(t *testing.T) {
	r := newRig(t, rigOpts{api: func(c *Config) { c.WaitTimeout = 20 * time.Second }})
	ts := httptest.NewServer(r.srv)
	t.Cleanup(ts.Close)
	body := strings.Repeat(`{"pad":"`+strings.Repeat("x", 1000)+`"}`+"\n", 100)
	type answer struct {
		code int
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/streams/s/records?wait=commit", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := ts.Client().Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		_ = resp.Body.Close()
		done <- answer{code: resp.StatusCode}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r.eng.Status().OpenRecords != 100 {
		if time.Now().After(deadline) {
			t.Fatal("the write never reached the engine")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the handler is in its wait now
	held := r.srv.inflight.inUse()
	r.checkpoint()
	if a := <-done; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("wait=commit: %d %v, want 200", a.code, a.err)
	}
	if held != 0 {
		t.Fatalf("a write waiting for its commit held %d bytes of the in-flight body budget, want 0", held)
	}
}

// TestSlowZstdBodiesHoldLittle: a zstd body that has sent nothing yet holds
// no decoder window against the in-flight budget, and those that sent a
// frame header hold at most half of it: a plain write of a whole body
// still fits. (Each held 8 MiB from its headers on: 32 connections
// declaring zstd and sending nothing held the default 256 MiB, and every
// other write was 429 for up to the body timeout — issue 22 item 8 again,
// by Content-Encoding.)
func TestSlowZstdBodiesHoldLittle(t *testing.T) {
	const senders = 8
	budget := int64(4 * zstdMaxWindow)
	r := newRig(t, rigOpts{api: func(c *Config) { c.MaxBody, c.MaxInflightBody = 1<<20, budget }})
	ts := httptest.NewServer(r.srv)
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	send := func(first []byte) {
		for range senders {
			slowSender(t, addr, 1<<20, string(first), "Content-Encoding", "zstd")
		}
		time.Sleep(300 * time.Millisecond) // the senders' handlers wait for their bodies
	}
	send(nil)
	if n, most := r.srv.inflight.inUse(), int64(senders*bodyFirst); n > most {
		t.Errorf("%d zstd senders of nothing hold %d bytes of the budget, want at most %d", senders, n, most)
	}
	big := strings.Repeat(`{"pad":"`+strings.Repeat("x", 1014)+`"}`+"\n", 900)
	postAccepted(t, ts, big, "a 900 KiB write beside zstd senders of nothing")

	// Senders of a frame header (an 8 MiB window, the most there is).
	var frame bytes.Buffer
	zw, err := zstd.NewWriter(&frame, zstd.WithWindowSize(zstdMaxWindow), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write([]byte(big))
	_ = zw.Close()
	send(frame.Bytes()[:64])
	if n, most := r.srv.inflight.inUse(), budget/2+int64(4*senders*bodyFirst); n > most {
		t.Errorf("zstd senders of a frame header hold %d bytes of the budget, want at most %d", n, most)
	}
	postAccepted(t, ts, big, "a 900 KiB write beside zstd senders of a frame header")
}

// BenchmarkReadBody reads a 100 KiB body with a Content-Length, the
// size of the benchmarks' batches: once the pool is warm it is one
// pooled slice, read in place.
func BenchmarkReadBody(b *testing.B) {
	s := &Server{maxBody: DefaultMaxBody, inflight: &budget{limit: DefaultMaxInflightBody}}
	body := bytes.Repeat([]byte("x"), 100<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/streams/s/records", bytes.NewReader(body))
		got, release, err := s.readBody(httptest.NewRecorder(), r, "")
		if err != nil || len(got) != len(body) {
			b.Fatal(len(got), err)
		}
		release()
	}
}
