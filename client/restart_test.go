package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/testing/faultfs"
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
			r.inject = faultfs.InjectorFunc(func(op faultfs.Op) error {
				if failing.Load() && op.Kind == faultfs.OpSync && strings.HasSuffix(op.Path, ".inprogress") {
					return syscall.EIO
				}
				return nil
			})
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
