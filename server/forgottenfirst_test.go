package server

import "testing"

// TestForgottenPlantedBeforeFirstCommit: a node whose state store has
// committed no checkpoint with data (new, or lost with no manifest in the
// destination) believed every forgotten-producers document at its next
// start, a planted one too: loadForgotten took "newest 0" for a rebuild
// and checked no seal, so a live producer was forgotten and its client,
// which did everything right, was answered unknown_producer (I12, I13).
// Found by the model test without a lease (seed 86,
// EOSINK_MODEL_LEASE=off, 3000 steps: a store lost while the first commit
// with data committed, then a forgotten document planted: "write p3/s2/0:
// producer error for a correct batch (I12: the client is wedged):
// producer p3: unknown producer"); a lease does not enter into it.
func TestForgottenPlantedBeforeFirstCommit(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		e := r.start(nil)
		p := r.initProducer("p")
		r.checkpoint() // empty: no manifest, nothing committed
		name := plantForgotten(t, r, e.Status().OpenID-1, p.ID, p.Epoch)
		r.stop()
		e = r.start(nil)
		if _, ok := e.Producer(p.ID); !ok {
			t.Fatalf("producer %s, live and inited, forgotten at the restart by a planted document %s (I12, I13)", p.ID, name)
		}
		mustSend(t, e, p, "a", 0, 1)
	})
}
