package tests

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// TestFencingSurvivesCrash: an init is durable before it answers, so a
// SIGKILL right after it cannot bring an older epoch back (I6); and a
// batch accepted but not prepared before the crash is forgotten, so the
// new epoch sends it again from the expected sequence number (I5).
func TestFencingSurvivesCrash(t *testing.T) {
	p := startEosink(t, "--node", "fence", "--checkpoint-interval", "0")
	dest := filepath.Join(p.cfg.DataDir, "files") // the default destination
	ctx := t.Context()
	old := mustRawProducer(ctx, t, p.URL, "zombie")
	rng, _ := testRand(t)
	k0 := batchKey{P: "zombie", S: "events", Q: 0}
	body0 := ndjson(makeRecords(rng, k0, 3, 8))
	if a := old.post(ctx, "events", &rawBatch{seq: 0, body: body0}, old.epoch, false); a.Status != http.StatusAccepted {
		t.Fatalf("old epoch seq 0: %d %s", a.Status, a.Code)
	}
	cur := mustRawProducer(ctx, t, p.URL, "zombie")
	if cur.epoch <= old.epoch {
		t.Fatalf("second init: epoch %d, first %d", cur.epoch, old.epoch)
	}
	p.Kill() // right after the init answered
	p.Restart()

	st, err := p.Producer(ctx, "zombie")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != cur.epoch {
		t.Errorf("after the crash: epoch %d, want %d (the init answered before the kill)", st.Epoch, cur.epoch)
	}
	// init is a barrier (I12): the old epoch's seq 0 was prepared before
	// the second init answered, so it survived the crash, committed.
	if ss := st.Streams["events"]; ss.NextSeq != 1 || ss.CommittedSeq != 0 {
		t.Errorf("after the crash: next_seq %d committed_seq %d, want 1 and 0 (init prepared seq 0 before answering)", ss.NextSeq, ss.CommittedSeq)
	}
	if a := old.post(ctx, "events", &rawBatch{seq: 1, body: body0}, old.epoch, false); a.Status != http.StatusConflict || a.Code != "producer_fenced" {
		t.Errorf("old epoch after the crash: %d %s, want 409 producer_fenced", a.Status, a.Code)
	}
	if a := cur.post(ctx, "events", &rawBatch{seq: 2, body: body0}, cur.epoch, false); a.Status != http.StatusConflict || a.Exp == nil || *a.Exp != 1 {
		t.Errorf("new epoch seq 2 after the crash: %d %s expected_seq %s, want 409 expected_seq 1", a.Status, a.Code, ptrStr(a.Exp))
	}
	if a := cur.post(ctx, "events", &rawBatch{seq: 0, body: body0}, cur.epoch, false); a.Status != http.StatusOK || !a.Write.Duplicate {
		t.Fatalf("new epoch resends seq 0: %d %s duplicate=%v, want 200 duplicate (committed)", a.Status, a.Code, a.Write.Duplicate)
	}
	if ck, err := p.Checkpoint(ctx); err != nil || ck.State != "committed" {
		t.Fatalf("checkpoint: %+v %v", ck, err)
	}
	if code := p.Term(); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	requireDest(t, invariant.LocalDest(dest), map[batchKey]int{k0: 3}, true)
}
