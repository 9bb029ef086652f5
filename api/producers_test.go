package api

import (
	"net/http"
	"sync/atomic"
	"testing"

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
