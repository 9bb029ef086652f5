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
