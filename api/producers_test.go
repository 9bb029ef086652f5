package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
)

// countingEngine counts the lists read from the state store.
type countingEngine struct {
	Engine
	reads *atomic.Int64
}

func (c countingEngine) ProducersPage(after string, limit int) ([]server.ProducerState, string, error) {
	c.reads.Add(1)
	return c.Engine.ProducersPage(after, limit)
}

func (c countingEngine) CheckpointRecords(before uint64, limit int) ([]recovery.Checkpoint, error) {
	c.reads.Add(1)
	return c.Engine.CheckpointRecords(before, limit)
}

// newCountingRig is a ready rig whose API's engine is a countingEngine;
// it returns the count too.
func newCountingRig(t *testing.T) (*rig, *atomic.Int64) {
	t.Helper()
	reads := new(atomic.Int64)
	r := newRig(t, rigOpts{api: func(c *Config) { c.Engine = countingEngine{c.Engine, reads} }})
	r.waitReady()
	return r, reads
}

// TestProducerListKeptUntilStoreChanges: GET /v1/producers polled in a
// loop reads the state store once per change of it, not once per poll (a
// poller made every write wait: the soak's polled write p99 was 8-11x the
// idle one), and every change shows in the next answer.
func TestProducerListKeptUntilStoreChanges(t *testing.T) {
	r, pages := newCountingRig(t)
	list := func(target string) ProducerList {
		t.Helper()
		return getOK[ProducerList](r, target)
	}
	r.initProducer("a")
	for range 50 {
		if l := list("/v1/producers"); len(l.Producers) != 1 || l.Producers[0].Producer != "a" {
			t.Fatalf("list: %+v", l)
		}
	}
	if n := pages.Load(); n != 1 {
		t.Fatalf("50 polls with no change read the store %d times, want 1", n)
	}
	list("/v1/producers?limit=1") // another page is another answer
	if n := pages.Load(); n != 2 {
		t.Fatalf("a second page: %d reads, want 2", n)
	}

	r.initProducer("b") // a change: seen at once
	if l := list("/v1/producers"); len(l.Producers) != 2 || l.Producers[1].Producer != "b" {
		t.Fatalf("after init b: %+v", l)
	}
	expectStatus(t, r.do("POST", "/v1/streams/s/records", "x\n", "Content-Type", "text/plain",
		"Producer-Id", "a", "Producer-Epoch", "0", "Producer-Seq", "0"), http.StatusAccepted)
	if l := list("/v1/producers"); len(l.Producers[0].Streams) != 0 {
		t.Fatalf("before the checkpoint the store has no stream of a: %+v", l.Producers[0])
	}
	r.checkpoint()
	if l := list("/v1/producers"); l.Producers[0].Streams["s"].NextSeq != 1 || l.Producers[0].Streams["s"].CommittedSeq != 0 {
		t.Fatalf("after the checkpoint: %+v, want s next_seq 1 committed_seq 0", l.Producers[0])
	}
	before := pages.Load()
	for range 20 {
		list("/v1/producers")
	}
	if n := pages.Load() - before; n != 0 {
		t.Fatalf("polls after the checkpoint read the store %d times, want 0", n)
	}
}

// TestCheckpointListKeptUntilStoreChanges: GET /v1/checkpoints likewise;
// "after" absent (the newest) and "after=0" (nothing) are different answers.
func TestCheckpointListKeptUntilStoreChanges(t *testing.T) {
	r, reads := newCountingRig(t)
	list := func(target string) CheckpointList {
		t.Helper()
		return getOK[CheckpointList](r, target)
	}
	expectStatus(t, r.do("POST", "/v1/streams/s/records", "x\n", "Content-Type", "text/plain"), http.StatusAccepted)
	c1 := r.checkpoint()
	start := reads.Load()
	for range 20 {
		if l := list("/v1/checkpoints"); len(l.Checkpoints) != 1 || l.Checkpoints[0].ID != c1.ID {
			t.Fatalf("list: %+v, want checkpoint %d", l, c1.ID)
		}
	}
	if n := reads.Load() - start; n != 1 {
		t.Fatalf("20 polls with no change read the store %d times, want 1", n)
	}
	if l := list("/v1/checkpoints?after=0"); len(l.Checkpoints) != 0 {
		t.Fatalf("after=0: %+v, want nothing", l)
	}
	expectStatus(t, r.do("POST", "/v1/streams/s/records", "y\n", "Content-Type", "text/plain"), http.StatusAccepted)
	c2 := r.checkpoint()
	if l := list("/v1/checkpoints"); len(l.Checkpoints) != 2 || l.Checkpoints[0].ID != c2.ID {
		t.Fatalf("after checkpoint %d: %+v", c2.ID, l)
	}
}

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

func TestLocateSeq(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.waitReady()
	write := func(epoch int64, seq int, body string) {
		t.Helper()
		expectStatus(t, r.admin("POST", "/v1/streams/clicks/records", body, "Content-Type", "application/x-ndjson",
			"Producer-Id", "p1", "Producer-Epoch", strconv.FormatInt(epoch, 10), "Producer-Seq", strconv.Itoa(seq)), http.StatusAccepted)
	}
	ep := r.initProducer("p1")
	write(ep, 0, "{\"a\":0}\n")
	write(ep, 1, "{\"a\":1}\n")
	first := r.checkpoint()
	write(ep, 2, "{\"a\":2}\n")
	second := r.checkpoint()

	got := getOK[SeqLocations](r, "/v1/producers/p1/streams/clicks/seqs/2")
	if len(got.Locations) != 1 || !got.Complete {
		t.Fatalf("seq 2: %+v", got)
	}
	l := got.Locations[0]
	if l.Checkpoint != second.ID || l.First != 2 || l.Last != 2 || l.Incarnation == nil || l.Epoch == nil || *l.Epoch != ep ||
		!strings.HasPrefix(l.Path, "clicks/") || l.Manifest == "" || l.CommittedAt == nil {
		t.Fatalf("seq 2: %+v", l)
	}
	// The file holds it: download it.
	if body := r.do("GET", "/v1/files/"+l.Path, "").Body.String(); body != "{\"a\":2}\n" {
		t.Fatalf("file %s holds %q", l.Path, body)
	}

	// Deleted and created again: seq 0 is now in two incarnations, the
	// newest first.
	expectStatus(t, r.admin("DELETE", "/v1/producers/p1", ""), http.StatusNoContent)
	ep2 := r.initProducer("p1")
	write(ep2, 0, "{\"b\":0}\n")
	third := r.checkpoint()
	got = decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/0", ""))
	if len(got.Locations) != 2 || got.Locations[0].Checkpoint != third.ID || got.Locations[1].Checkpoint != first.ID ||
		*got.Locations[0].Incarnation <= *got.Locations[1].Incarnation {
		t.Fatalf("seq 0: %+v", got)
	}

	// Seq 1 of the new incarnation is not committed yet: the old one's is
	// the only location, labelled as such.
	write(ep2, 1, "{\"b\":1}\n")
	write(ep2, 2, "{\"b\":2}\n")
	write(ep2, 3, "{\"b\":3}\n")
	got = decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/1", ""))
	if len(got.Locations) != 1 || got.Locations[0].Checkpoint != first.ID || *got.Locations[0].Incarnation == *decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/0", "")).Locations[0].Incarnation {
		t.Fatalf("seq 1: %+v", got)
	}
	// Not committed yet, never sent: 404 saying which.
	for seq, want := range map[string]string{"3": "not committed yet", "7": "expects 4 next"} {
		rec := r.do("GET", "/v1/producers/p1/streams/clicks/seqs/"+seq, "")
		if e := decode[ErrorResponse](t, rec); rec.Code != http.StatusNotFound || e.Error != CodeNotFound || !strings.Contains(e.Message, want) {
			t.Errorf("seq %s: %d %+v, want 404 %q", seq, rec.Code, e, want)
		}
	}
	for target, code := range map[string]string{
		"/v1/producers/p1/streams/clicks/seqs/-1":  CodeInvalidID,
		"/v1/producers/p1/streams/clicks/seqs/x":   CodeInvalidID,
		"/v1/producers/p1/streams/Clicks/seqs/1":   CodeInvalidStream,
		"/v1/producers/p%20/streams/clicks/seqs/1": CodeInvalidProducer,
	} {
		rec := r.do("GET", target, "")
		if rec.Code != http.StatusBadRequest || decode[ErrorResponse](t, rec).Error != code {
			t.Errorf("%s: %d %s, want 400 %s", target, rec.Code, rec.Body, code)
		}
	}
}
