package api

import (
	"net/http"
	"strconv"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/testing/faultfs"
)

// TestDuplicateAnswers (I9): a duplicate of a batch whose checkpoint has
// not committed is 202 with the checkpoint it rides in — that checkpoint
// may still abort, and the batch with it — and only a duplicate of a
// committed batch is 200.
func TestDuplicateAnswers(t *testing.T) {
	failing := &faultfs.SwapInjector{}
	r := newRig(t, rigOpts{inject: failing})
	epoch := strconv.FormatInt(r.initProducer("d"), 10)
	post := func(seq string) (*WriteResponse, int, string) {
		t.Helper()
		rec := r.do("POST", "/v1/streams/s/records", `{"d":`+seq+`}`, "Content-Type", "application/x-ndjson",
			"Producer-Id", "d", "Producer-Epoch", epoch, "Producer-Seq", seq)
		if rec.Code != http.StatusOK && rec.Code != http.StatusAccepted {
			t.Fatalf("seq %s: %d %s", seq, rec.Code, rec.Body.String())
		}
		w := decode[WriteResponse](t, rec)
		return &w, rec.Code, rec.Header().Get(CheckpointHeader)
	}
	first, _, _ := post("0")
	dup, status, hdr := post("0")
	if status != http.StatusAccepted || !dup.Duplicate || dup.Committed || dup.Checkpoint != first.Checkpoint || hdr != strconv.FormatUint(first.Checkpoint, 10) {
		t.Fatalf("duplicate of an uncommitted batch: %d %+v (header %s), want 202 duplicate in checkpoint %d", status, dup, hdr, first.Checkpoint)
	}
	// Its checkpoint aborts: the batch is gone, as a 202 allowed.
	failing.Set(failStaging(faultfs.OpSync, syscall.EIO))
	rec := r.admin("POST", "/v1/checkpoints", "")
	failing.Set(nil)
	expectStatus(t, rec, http.StatusOK)
	if c := decode[Checkpoint](t, rec); c.State != "aborted" {
		t.Fatalf("checkpoint %+v, want aborted", c)
	}
	again, status, _ := post("0")
	if status != http.StatusAccepted || again.Duplicate {
		t.Fatalf("resend after the abort: %d %+v, want a new 202", status, again)
	}
	c := r.checkpoint()
	dup, status, hdr = post("0")
	if status != http.StatusOK || !dup.Duplicate || !dup.Committed || dup.Checkpoint != c.ID || hdr != strconv.FormatUint(c.ID, 10) {
		t.Fatalf("duplicate of a committed batch: %d %+v (header %s), want 200 committed in checkpoint %d", status, dup, hdr, c.ID)
	}
	if hits := grep(t, r.base, `{"d":0}`); len(hits) != 1 {
		t.Fatalf("batch stored in %v", hits)
	}
}
