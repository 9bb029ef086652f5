package client_test

import (
	"errors"
	"testing"

	"github.com/eosink/eosink/client"
)

// TestStaleStateReadAnotherWriterNextSendFenced: a state read sent before
// the client's Init and answered after another writer's Init took the
// producer carries that writer's epoch, newer than the client's. The
// read is stale (an Init answered since it was sent: 9ad74a2 ignores its
// epoch, newer too), so the client misses that fence; its next Send must
// meet it at the service (producer_fenced) and fence the client: its
// batch is not written, and the other writer's batches commit once.
func TestStaleStateReadAnotherWriterNextSendFenced(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	recs, want := records("a0", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	arrived, let, read := holdStateRead(t, r, c, false) // answered after both Inits
	<-arrived
	mine, err := c.Init(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	b := r.initClient("p") // another writer takes the producer
	if b.Epoch() <= mine.Epoch {
		t.Fatalf("other writer's epoch %d, the client's %d", b.Epoch(), mine.Epoch)
	}
	let()
	if err := <-read; err != nil && !errors.Is(err, client.ErrFenced) {
		t.Fatalf("stale state read: %v", err)
	}
	recs, _ = records("a1", 1)
	if _, err := c.Send(ctx(t), "s", recs); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("send after another writer's Init, the stale read ignored: %v, want ErrFenced (I6)", err)
	}
	if err := c.Flush(ctx(t)); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("flush of the fenced client: %v, want ErrFenced", err)
	}
	recs, k := records("b0", 1)
	if _, err := b.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, b)
	r.expectOnce("s", append(want, k...))
}
