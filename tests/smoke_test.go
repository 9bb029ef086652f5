package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// TestSmoke is the short path through the binary: a producer's batches, a
// duplicate, a checkpoint, the files on disk, a clean stop, and `eosink
// verify` passing on the destination and failing once a file is tampered
// with.
func TestSmoke(t *testing.T) {
	dir := workDir(t)
	dest := filepath.Join(dir, "dest")
	p := newProc(t, dir, procConfig{Args: []string{"--dest", "file://" + dest, "--node", "smoke", "--checkpoint-interval", "0"}})
	d := p.StartReady()
	ctx := t.Context()
	prod := mustRawProducer(ctx, t, p.URL, "smoke")
	rng, _ := testRand(t)
	want := map[batchKey]int{}
	var bodies [][]byte
	for q := range int64(3) {
		k := batchKey{P: "smoke", S: "events", Q: q}
		recs := makeRecords(rng, k, 2+int(q), 16)
		want[k] = len(recs)
		bodies = append(bodies, ndjson(recs))
		a, err := prod.SendBody(ctx, "events", q, bodies[q], false)
		if err != nil || a.Status != http.StatusAccepted || a.Write.Duplicate {
			t.Fatalf("send %s: %d %s duplicate=%v %v", k, a.Status, a.Code, a.Write.Duplicate, err)
		}
	}
	// A retry of an accepted batch is a duplicate, nothing written twice:
	// 202 while its checkpoint is open (I9), 200 once committed.
	dup := prod.post(ctx, "events", &rawBatch{seq: 1, body: bodies[1]}, prod.epoch, false)
	if dup.Status != http.StatusAccepted || !dup.Write.Duplicate || dup.Write.Committed {
		t.Fatalf("resend of seq 1 before the checkpoint: %d %s duplicate=%v committed=%v, want 202 duplicate", dup.Status, dup.Code, dup.Write.Duplicate, dup.Write.Committed)
	}
	ck, err := p.Checkpoint(ctx)
	if err != nil || ck.State != "committed" || len(ck.Files) != 1 {
		t.Fatalf("checkpoint: %+v, %v; want committed with 1 file", ck, err)
	}
	dup = prod.post(ctx, "events", &rawBatch{seq: 1, body: bodies[1]}, prod.epoch, false)
	if dup.Status != http.StatusOK || !dup.Write.Duplicate || !dup.Write.Committed {
		t.Fatalf("resend of seq 1 after the checkpoint: %d %s duplicate=%v committed=%v, want 200 duplicate", dup.Status, dup.Code, dup.Write.Duplicate, dup.Write.Committed)
	}
	st, err := p.Producer(ctx, "smoke")
	if err != nil || st.Streams["events"].CommittedSeq != 2 || st.Streams["events"].NextSeq != 3 {
		t.Fatalf("producer after the checkpoint: %+v, %v; want committed_seq 2, next_seq 3", st, err)
	}
	if code := p.Term(); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	requireDest(t, invariant.LocalDest(dest), want, true)
	requireVerify(t, nil, "--dest", "file://"+dest)

	// Tamper with the committed file: verify must exit 1.
	f, err := os.OpenFile(filepath.Join(dest, filepath.FromSlash(ck.Files[0].Path)), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"tampered":true}` + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out := runVerify(t, nil, "--dest", "file://"+dest); code != 1 {
		t.Errorf("eosink verify of a tampered destination: exit %d, want 1:\n%s", code, out)
	}
	t.Logf("ready %s after start", d)
}
