package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
)

// TestRestartedProducerGoesOn (I12): a producer process dies with batches
// accepted but not prepared; its next incarnation (a new Client with the
// same id) inits, sends from the returned next_seq, and then the service
// crashes, or a checkpoint aborts. The new incarnation goes on without
// help, and every batch either incarnation was answered for is committed
// once.
func TestRestartedProducerGoesOn(t *testing.T) {
	for _, then := range []string{"crash", "abort"} {
		t.Run(then, func(t *testing.T) {
			var failing atomic.Bool
			r := newRig(t, 0)
			r.failPreCommitsWhile(&failing)
			r.start()
			var keys []string
			send := func(c *client.Client, tag string) client.Result {
				t.Helper()
				recs, k := records(tag, 2)
				keys = append(keys, k...)
				res, err := c.Send(ctx(t), "s", recs)
				if err != nil {
					t.Fatalf("send %s: %v", tag, err)
				}
				return res
			}
			first := r.initClient("p")
			for i := range 3 {
				send(first, fmt.Sprintf("first%d", i))
			}
			// The first process dies here; the second takes over.
			second := r.client("p")
			ps, err := second.Init(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := ps.Streams["s"]; got != (client.StreamState{NextSeq: 3, CommittedSeq: 2}) {
				t.Errorf("init: %+v, want next_seq 3 and committed_seq 2: the first incarnation's batches prepared", got)
			}
			for i := range 2 {
				if res := send(second, fmt.Sprintf("second%d", i)); res.Seq != ps.Streams["s"].NextSeq+int64(i) {
					t.Errorf("second%d sent as seq %d", i, res.Seq)
				}
			}
			switch then {
			case "crash":
				r.crash() // a new engine recovers meanwhile
			case "abort":
				failing.Store(true)
				res, err := r.engine0().Checkpoint(ctx(t))
				failing.Store(false)
				if err != nil || res.State != "aborted" {
					t.Fatalf("checkpoint: %+v %v", res, err)
				}
			}
			send(second, "second2") // told to resend the lost ones first
			r.checkpoint()
			flush(t, second)
			r.expectOnce("s", keys)
		})
	}
}

// TestRecoversFromLostSequence: a service that lost batches it had
// confirmed expects a sequence number below every batch the client keeps
// (a state store restored from an older copy; an eosink whose init was
// not yet a barrier). The client re-inits by itself and goes on from the
// next_seq it gets. A stream that is broken for another reason (the
// service is ahead: another writer) is usable again after an Init.
func TestRecoversFromLostSequence(t *testing.T) {
	t.Run("service behind", func(t *testing.T) {
		r := newRig(t, 20*time.Millisecond).start()
		c := r.initClient("p")
		keys := sendBatches(t, c, "a", 3)
		if err := c.Flush(ctx(t)); err != nil { // 0..2 committed: no longer kept
			t.Fatal(err)
		}
		var lied atomic.Bool
		r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
			if !isWrite(req) || !lied.CompareAndSwap(false, true) {
				return false
			}
			answerOutOfOrder(w, 0)
			return true
		})
		recs, k := records("b", 1)
		keys = append(keys, k...)
		res, err := c.Send(ctx(t), "s", recs)
		if err != nil {
			t.Fatalf("send after the service lost what it confirmed: %v", err)
		}
		if c.Epoch() != 1 || res.Seq != 3 {
			t.Errorf("epoch %d, seq %d: want a re-init (epoch 1) and seq 3, the service's next_seq", c.Epoch(), res.Seq)
		}
		flush(t, c)
		r.expectOnce("s", keys)
	})
	t.Run("broken, then Init", func(t *testing.T) {
		r := newRig(t, 20*time.Millisecond).start()
		c := r.initClient("p")
		var ahead atomic.Bool
		ahead.Store(true)
		r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
			if !isWrite(req) || !ahead.Load() {
				return false
			}
			answerOutOfOrder(w, 9)
			return true
		})
		recs, _ := records("lost", 1)
		if _, err := c.Send(ctx(t), "s", recs); !errors.Is(err, client.ErrSequenceLost) {
			t.Fatalf("service ahead: %v, want ErrSequenceLost", err)
		}
		ahead.Store(false)
		if _, err := c.Init(ctx(t)); err != nil {
			t.Fatal(err)
		}
		recs, keys := records("after", 2)
		if _, err := c.SendWait(ctx(t), "s", recs); err != nil {
			t.Fatalf("send after Init: %v", err)
		}
		flush(t, c)
		r.expectOnce("s", keys) // "lost" was refused, not kept: the Send said so
	})
}

// TestFlushAfterServiceLostInit: the service loses its state store after
// the client's second Init, which no manifest records: rebuilt from the
// manifests, it answers the producer's older epoch, legitimately (DESIGN:
// epochs handed out after a producer's last commit are not rebuilt). A
// state read after the client's Init answered, with a lower epoch, is not
// a stale read: Flush must end (ErrInvalidEpoch: call Init), not poll
// until its ctx ends; after the Init the kept batch lands once.
func TestFlushAfterServiceLostInit(t *testing.T) {
	r, c, want := afterLostInits(t, 1)
	fctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := c.Flush(fctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush polled until its ctx ended: %v; want ErrInvalidEpoch (the service lost the Init)", err)
	}
	if err != nil && !errors.Is(err, client.ErrInvalidEpoch) {
		t.Fatalf("flush: %v, want ErrInvalidEpoch", err)
	}
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	want = append(want, sendBatches(t, c, "c", 1)...) // delivered after the kept b
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", want)
}

// TestInitAfterServiceLostSeveralInits: the service lost two Inits (its
// store rebuilt from manifests that record neither epoch): the client's
// next Init is answered with an epoch below the client's, and that answer
// is the service's state, not an older Init of this client answering
// late: it must be taken up, so that the kept batch is delivered. Failed
// before: the answer was passed over as a late one, the client went on
// with its lost epoch and the Send after it failed (invalid_epoch).
func TestInitAfterServiceLostSeveralInits(t *testing.T) {
	r, c, want := afterLostInits(t, 2)
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	want = append(want, sendBatches(t, c, "c", 1)...) // fails the test if the Send does (invalid_epoch)
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", want)
}

// afterLostInits: a producer's batch committed, then inits more Inits of
// its client that no manifest records, a batch sent and kept, and the
// service's state store lost (the node rebuilds from the destination).
// It returns the rig, the client and the keys of the records sent.
func afterLostInits(t *testing.T, inits int) (*rig, *client.Client, []string) {
	t.Helper()
	r := newRig(t, 0).start()
	c := r.initClient("p")
	want := sendBatches(t, c, "a", 1)
	r.checkpoint()
	flush(t, c)
	for range inits {
		if _, err := c.Init(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, sendBatches(t, c, "b", 1)...)
	r.er.StorePath = filepath.Join(t.TempDir(), "state.db")
	r.crash()
	r.er.WaitReady()
	return r, c, want
}

// TestStaleStateAfterReinit: a producer state read before the producer
// was forgotten (an admin's DELETE) and the client's Init that followed,
// answered after both, must not drop the batches the client sent since:
// its committed_seq counts the forgotten incarnation's batches, not the
// new ones that reuse their numbers. Failed before: the stale state
// dropped batch 0 of the new incarnation from the client's memory
// (kept 0 batches), and after a crash it was never resent (record
// new0-0 committed 0 times).
func TestStaleStateAfterReinit(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	var want []string
	for i := range 3 {
		recs, keys := records(fmt.Sprintf("old%d", i), 2)
		want = append(want, keys...)
		if _, err := c.Send(ctx(t), "s", recs); err != nil {
			t.Fatal(err)
		}
	}
	r.checkpoint()
	flush(t, c)
	// The next GET of the producer is answered now but delivered late.
	held, release := make(chan struct{}), make(chan struct{})
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Method != http.MethodGet || req.URL.Path != "/v1/producers/p" {
			return false
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, req)
		r.intercept(nil)
		close(held)
		<-release
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	stale := make(chan error, 1)
	go func() { _, err := c.State(ctx(t)); stale <- err }()
	<-held
	req, _ := http.NewRequest(http.MethodDelete, r.ts.URL+"/v1/producers/p", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE producer: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	recs, keys := records("new0", 1)
	want = append(want, keys...)
	res, err := c.Send(ctx(t), "s", recs)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-stale:
		if err != nil {
			t.Fatalf("the stale State: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("State never returned")
	}
	if st := c.Stats(); st.Batches != 1 {
		t.Errorf("kept after the stale state: %+v, want the uncommitted batch %d kept", st, res.Seq)
	}
	// The service loses the uncommitted batch; the client's next batch
	// finds out, and the kept one is resent before it.
	r.crash()
	recs, keys = records("new1", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", want)
}
