package server

import (
	"fmt"
	"path"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
)

// TestForgottenPlantedBeforeFirstCommit: a node whose state store has
// committed no checkpoint with data (new, or lost with no manifest in the
// destination) believes every forgotten-producers document at its next
// start, a planted one too: kept (the store's newest commit, or the one a
// rebuild went through) is 0, so loadForgotten takes every document
// without checking seals, and a live producer is forgotten; its client,
// which did everything right, is answered unknown_producer (I12, I13).
// Found by the model test without a lease (seed 86,
// EOSINK_MODEL_LEASE=off, 3000 steps: a store lost while the first commit
// with data committed, then a forgotten document planted: "write p3/s2/0:
// producer error for a correct batch (I12: the client is wedged):
// producer p3: unknown producer"). The same test with a lease (leaseRig)
// fails the same way: the lease does not enter into it.
// Not fixed yet: skipped.
func TestForgottenPlantedBeforeFirstCommit(t *testing.T) {
	t.Skip("BUG (open, h9-nolease): a start over a store with no commit believes a planted forgotten-producers document (loadForgotten with newest 0 checks no seal)")
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	r.checkpoint() // empty: no manifest, nothing committed
	open := e.Status().OpenID
	name := rigDest + "/" + layout.ForgottenName(rigNode, open-1, 7)
	body := fmt.Appendf(nil, `{"node":%q,"after_checkpoint":%d,"producers":{%q:%d}}`, rigNode, open-1, p.ID, p.Epoch)
	if err := r.fs.MkdirAll(path.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := durable.ReplaceFile(r.fs, name+".plant", name, body); err != nil {
		t.Fatal(err)
	}
	r.stop()
	e = r.start(nil)
	if _, ok := e.Producer(p.ID); !ok {
		t.Fatalf("producer %s, live and inited, forgotten at the restart by a planted document %s (I12, I13)", p.ID, name)
	}
	mustSend(t, e, p, "a", 0, 1)
}
