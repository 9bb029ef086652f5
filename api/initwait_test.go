package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/server"
)

// TestInitDuringOutage: init's barrier waits for the commit of the older
// epochs' batches, which a destination outage holds back. The answer is
// bounded by --wait-timeout (503 not_ready, Retry-After), and a retried
// init answers once those batches are prepared, with a next_seq that
// survives anything (I12). Before, init hung for the whole outage.
func TestInitDuringOutage(t *testing.T) {
	var sc *committertest.Stuck
	r := newRig(t, rigOpts{
		engine: func(c *server.Config) { sc = &committertest.Stuck{Committer: c.Committer}; c.Committer = sc },
		api:    func(c *Config) { c.WaitTimeout = 300 * time.Millisecond },
	})
	if rec := r.serve(request("POST", "/v1/producers/p/init", "")); rec.Code != http.StatusOK {
		t.Fatalf("init: %d %s", rec.Code, rec.Body)
	}
	for seq := range 3 {
		rec := r.serve(request("POST", "/v1/streams/s/records", "{\"n\":1}\n", "Content-Type", "application/x-ndjson",
			"Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", string(rune('0'+seq))))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("write seq %d: %d %s", seq, rec.Code, rec.Body)
		}
	}
	sc.On.Store(true)
	done := make(chan *http.Response, 1)
	go func() {
		rec := r.serve(request("POST", "/v1/producers/p/init", ""))
		done <- rec.Result()
	}()
	select {
	case res := <-done:
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Fatalf("init during the outage: %d, Retry-After %q; want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("init during the outage did not answer")
	}
	rec := r.serve(request("POST", "/v1/producers/p/init", ""))
	if rec.Code != http.StatusOK {
		t.Fatalf("init retried during the outage: %d %s", rec.Code, rec.Body)
	}
	var st struct {
		Epoch   int64 `json:"epoch"`
		Streams map[string]struct {
			Next      int64 `json:"next_seq"`
			Committed int64 `json:"committed_seq"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 2 || st.Streams["s"].Next != 3 {
		t.Fatalf("init retried during the outage: %s; want epoch 2, next_seq 3 (seqs 0-2 prepared)", rec.Body)
	}
	sc.On.Store(false)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for r.eng.Status().Stuck != "" || r.eng.Status().LastDone == 0 {
		if ctx.Err() != nil {
			t.Fatalf("the barrier never committed after the outage: %+v", r.eng.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
