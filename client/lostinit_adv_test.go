package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
)

// TestFlushAfterServiceLostInit: the service loses its state store after
// the client's second Init, which no manifest records: rebuilt from the
// manifests, it answers the producer's older epoch, legitimately (DESIGN:
// epochs handed out after a producer's last commit are not rebuilt). A
// state read after the client's Init answered, with a lower epoch, is not
// a stale read: Flush must end (ErrInvalidEpoch: call Init), not poll
// until its ctx ends; after the Init the kept batch lands once.
func TestFlushAfterServiceLostInit(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	recs, want := records("a", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	if _, err := c.Init(ctx(t)); err != nil { // an epoch no manifest records
		t.Fatal(err)
	}
	recs, keys := records("b", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	// The state store is lost; the node rebuilds from the destination.
	r.er.StorePath = filepath.Join(t.TempDir(), "state.db")
	r.crash()
	r.er.WaitReady()
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
	recs, keys = records("c", 1) // delivered after the kept b
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
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
	r := newRig(t, 0).start()
	c := r.initClient("p")
	recs, want := records("a", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	for range 2 { // epochs no manifest records
		if _, err := c.Init(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	recs, keys := records("b", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.er.StorePath = filepath.Join(t.TempDir(), "state.db")
	r.crash()
	r.er.WaitReady()
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	recs, keys = records("c", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatalf("send after the Init: %v", err)
	}
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", want)
}
