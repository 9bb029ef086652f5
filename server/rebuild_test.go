package server

import (
	"errors"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// resendFrom0 sends p's batches 0 to n-1 of stream (2 records each) again,
// as a client that trusts nothing, and fails the test unless exactly those
// below committed are answered as duplicates.
func resendFrom0(t *testing.T, e *Engine, p *Producer, stream string, n, committed int64) {
	t.Helper()
	for seq := range n {
		res, err := send(e, p, stream, seq, 2)
		if err != nil {
			t.Fatalf("resend %s/%d: %v", stream, seq, err)
		}
		if dup := seq < committed; res.Duplicate != dup {
			t.Fatalf("resend %s/%d: duplicate %v, want %v", stream, seq, res.Duplicate, dup)
		}
	}
}

// Recovery step 5 for producers: after the state store is lost, a node
// rebuilt from the destination restores each producer's committed
// sequence numbers from its manifests, so a client that inits again and
// resends is deduplicated: every batch once. Fails before: init after the
// loss answered next_seq 0 and the resent batches were written twice.
func TestRebuildProducersAfterStoreLoss(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	ctx := t.Context()
	if _, err := e.InitProducer(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	st, err := e.InitProducer(ctx, "p") // epoch 1
	if err != nil {
		t.Fatal(err)
	}
	p := &Producer{ID: "p", Epoch: st.Epoch}
	must := map[invariant.BatchID]bool{}
	for seq := range int64(5) {
		for _, stream := range []string{"a", "b"} {
			if stream == "b" && seq > 2 {
				continue
			}
			mustSend(t, e, p, stream, seq, 2)
			must[invariant.BatchID{Producer: "p", Stream: stream, Seq: seq}] = true
		}
		r.commit()
	}
	// Accepted, never committed: lost with the store, as documented.
	mustSend(t, e, p, "a", 5, 2)
	r.stopLosingStore()
	e = r.start(nil)

	// Restored at the epoch the manifests record (issue 23 item 3): the
	// first init's epoch stays fenced (I6), a newer one must init again.
	if got, ok := e.Producer("p"); !ok || got.Epoch != p.Epoch {
		t.Fatalf("rebuilt producer: %+v, want epoch %d (the manifests')", got, p.Epoch)
	}
	if _, err := send(e, &Producer{ID: "p", Epoch: p.Epoch - 1}, "a", 5, 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("write with the fenced epoch before the loss: %v, want producer_fenced", err)
	}
	if _, err := send(e, &Producer{ID: "p", Epoch: p.Epoch + 1}, "a", 5, 2); !errors.Is(err, ErrInvalidEpoch) {
		t.Fatalf("write with an epoch the manifests do not show: %v, want invalid_epoch (init again)", err)
	}
	st, err = e.InitProducer(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]recovery.StreamSeq{"a": {NextSeq: 5, CommittedSeq: 4}, "b": {NextSeq: 3, CommittedSeq: 2}}
	for s, w := range want {
		if got := st.Streams[s]; got.NextSeq != w.NextSeq || got.CommittedSeq != w.CommittedSeq {
			t.Fatalf("init after the loss, stream %s: next %d committed %d, want next %d committed %d",
				s, got.NextSeq, got.CommittedSeq, w.NextSeq, w.CommittedSeq)
		}
	}
	p.Epoch = st.Epoch
	// A client that resends everything from 0 (it trusts nothing).
	resendFrom0(t, e, p, "a", 6, 5)
	must[invariant.BatchID{Producer: "p", Stream: "a", Seq: 5}] = true
	r.commit()
	r.check(invariant.Expect{Must: must, Exact: true})

	// Restarting again (the store now keeps up) does not rebuild, and
	// keeps the state.
	r.stop()
	e = r.start(nil)
	if got, _ := e.Producer("p"); got.Streams["a"].CommittedSeq != 5 || got.Epoch != st.Epoch {
		t.Fatalf("after a normal restart: %+v", got)
	}
}
