package server

import (
	"errors"
	"os"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// A producer is deleted and created again; its new incarnation accepts a
// batch but commits nothing; then the state store is lost, or an older
// copy of it (from before the DELETE) comes back. Nothing in the manifests
// shows the new incarnation, so the store would come back with the
// forgotten one's sequence numbers, and init would answer its
// committed_seq to the client of the new one — which then drops its own
// uncommitted batches as committed (the Go client trims by it). The
// forget is published (_forgotten/) before the store forgets, and every
// start applies it: init must answer nothing committed on the stream.
// "committed": the new incarnation did commit before the loss: the
// rebuild must keep it. "copy-after-delete": the older copy is from after
// the DELETE and two commits more, so it reflects the forget, but is
// behind the destination: the rebuild brings the producer back from its
// manifests, and the document (older than the copy's newest commit) must
// still be applied.
func TestForgottenProducerStaysForgotten(t *testing.T) {
	for _, how := range []string{"lost", "older", "committed", "copy-after-delete"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(t, nil)
			e := r.start(nil)
			must := map[invariant.BatchID]bool{}
			ps, err := e.InitProducer(t.Context(), "p")
			if err != nil {
				t.Fatal(err)
			}
			old := &Producer{ID: "p~1", Epoch: ps.Epoch}
			for q := range int64(3) {
				if _, err := send(e, old, "s", q, 2); err != nil {
					t.Fatal(err)
				}
				must[invariant.BatchID{Producer: "p~1", Stream: "s", Seq: q}] = true
			}
			if res := r.checkpoint(); res.State != recovery.Committed {
				t.Fatalf("checkpoint: %+v", res)
			}
			var copyOf []byte
			if how == "older" {
				r.stop()
				if copyOf, err = os.ReadFile(r.storePath); err != nil {
					t.Fatal(err)
				}
				e = r.start(nil)
			}
			if err := e.DeleteProducer(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			if how == "copy-after-delete" {
				for q := range int64(3) {
					if q == 2 {
						r.stop()
						if copyOf, err = os.ReadFile(r.storePath); err != nil {
							t.Fatal(err)
						}
						e = r.start(nil)
					}
					if _, err := send(e, nil, "s", 100+q, 1); err != nil {
						t.Fatal(err)
					}
					must[invariant.BatchID{Stream: "s", Seq: 100 + q}] = true
					if res := r.checkpoint(); res.State != recovery.Committed {
						t.Fatalf("checkpoint: %+v", res)
					}
				}
			}
			ps = r.initState("p")
			if ps.Streams["s"].NextSeq != 0 {
				t.Fatalf("a producer created again starts at %+v", ps.Streams["s"])
			}
			cur := &Producer{ID: "p~2", Epoch: ps.Epoch}
			if _, err := send(e, cur, "s", 0, 2); err != nil {
				t.Fatal(err)
			}
			want := int64(0) // what init must answer as next_seq after the loss
			if how == "committed" {
				must[invariant.BatchID{Producer: "p~2", Stream: "s", Seq: 0}] = true
				if res := r.checkpoint(); res.State != recovery.Committed {
					t.Fatalf("checkpoint: %+v", res)
				}
				want = 1
			}
			r.stopLosingStore() // a crash: the new incarnation's batch 0 is not prepared
			if copyOf != nil {
				if err := os.WriteFile(r.storePath, copyOf, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e = r.start(nil)
			// The new incarnation's client writes on. Its batch 0 is
			// committed (a duplicate) or unknown to the node, which must
			// then have it init again.
			wr, err := send(e, cur, "s", 0, 2)
			switch {
			case how == "committed":
				if err != nil || !wr.Duplicate || !wr.Committed {
					t.Fatalf("the new incarnation's committed batch after the loss: %+v, %v; want a committed duplicate", wr, err)
				}
			case !errors.Is(err, ErrUnknownProducer) && !errors.Is(err, ErrInvalidEpoch):
				t.Fatalf("the new incarnation's client after the loss: %+v, %v; want to be told to init", wr, err)
			}
			ps = r.initState("p")
			got, ok := ps.Streams["s"]
			if !ok {
				got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
			}
			if got.NextSeq != want || got.CommittedSeq != want-1 {
				t.Fatalf("init after the loss: next_seq %d committed_seq %d; the current incarnation committed up to %d",
					got.NextSeq, got.CommittedSeq, want-1)
			}
			// It resends what it was never told is committed, and it lands.
			cur.Epoch = ps.Epoch
			for q := want; q < 2; q++ {
				if _, err := send(e, cur, "s", q, 2); err != nil {
					t.Fatal(err)
				}
				must[invariant.BatchID{Producer: "p~2", Stream: "s", Seq: q}] = true
			}
			if res := r.checkpoint(); res.State != recovery.Committed {
				t.Fatalf("checkpoint: %+v", res)
			}
			r.check(invariant.Expect{Must: must, Exact: true})
		})
	}
}
