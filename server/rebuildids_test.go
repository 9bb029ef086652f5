package server

import (
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// TestRebuildSetAsideIDsKept: a node without a lease goes more than a
// block of checkpoints without data after its newest manifest (c1), then
// a commit (cx, p's batch a/1, its id named in the write's answer) is cut
// between its renames and its manifest, and the state store is lost. The
// start rebuilds (c1's manifest is held) and sets cx's file aside, but
// continued ids after the newest manifest and a block only, not beyond the
// id of the file it set aside: cx's id, named in an answer and in a file
// the destination holds, was handed out again (I8). (The ids of the empty
// checkpoints between left no trace: a documented limit without a lease,
// firstOpenID.) The first-commit look (7837753) and the unheld-manifest
// set-aside continue beyond every part file's id they see.
func TestRebuildSetAsideIDsKept(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.idBlock = 4 }
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 2)
	r.commit()
	for range 20 {
		r.checkpoint() // empty: no manifest, but the id was named
	}
	mustSend(t, e, p, "a", 1, 3)
	cx := r.commit()
	if len(cx.Files) != 1 {
		t.Fatalf("checkpoint: %+v", cx)
	}
	r.loseCommit(cx.ID, nil, leaseExpired) // no lease: nothing to damage
	r.resendCutBatch(t, p)
	if open := r.e.Status().OpenID; open <= cx.ID {
		t.Fatalf("the start after the loss set aside cx's file (checkpoint %d) and opened checkpoint %d: ids at or below it handed out again (I8)", cx.ID, open)
	}
	rep := r.checker0(invariant.Expect{})
	if len(rep.Quarantined) != 1 {
		t.Fatalf("quarantined %v, want cx's file", rep.Quarantined)
	}
}
