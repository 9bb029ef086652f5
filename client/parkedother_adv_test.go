package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
)

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
