package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
