package server

import (
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/spf13/afero"
)

// TestRebuildAfterRetention: a retention job removes an old partition
// (docs/production.md: eosink never deletes committed data, remove old
// files with your own job), then the state store is lost. A checkpoint
// that held files in the removed partition and in one still there is
// committed: the rebuild must count the batches of the file still there,
// or init answers a next_seq below them, the client resends them, and
// they are in the destination twice (I2). Found by the model test
// (retentionStep; seed 1 with EOSINK_MODEL_STEPS=2000). Failed before:
// the rebuild skipped the whole manifest ("names ..., which the
// destination does not hold"), init answered next_seq 0 for s1.
func TestRebuildAfterRetention(t *testing.T) {
	r := newLeasedRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	// Checkpoint 1: p's s1/0 and s0/0; checkpoint 2: p's s0/1.
	mustSend(t, e, p, "s1", 0, 2)
	mustSend(t, e, p, "s0", 0, 2)
	r.commit()
	mustSend(t, e, p, "s0", 1, 2)
	r.commit()
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for _, b := range []invariant.BatchID{{Producer: "p", Stream: "s1", Seq: 0}, {Producer: "p", Stream: "s0", Seq: 0}, {Producer: "p", Stream: "s0", Seq: 1}} {
		exp.Must[b] = true
	}
	r.check(exp)
	// The retention job removes checkpoint 1's s0 file.
	files, err := afero.Glob(r.fs, rigDest+"/s0/*/*/part-*")
	if err != nil || len(files) != 2 {
		t.Fatalf("s0's files: %v %v", files, err)
	}
	data, err := afero.ReadFile(r.fs, files[0])
	if err != nil {
		t.Fatal(err)
	}
	r.checker.Removed(strings.TrimPrefix(files[0], rigDest+"/"), data)
	if err := r.fs.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	r.check(exp)
	r.stop()
	r.loseStore()
	e = r.start(nil)
	ps := r.initState("p")
	p.Epoch = ps.Epoch
	for s, want := range map[string]int64{"s1": 1, "s0": 2} {
		if got := ps.Streams[s].NextSeq; got != want {
			t.Errorf("init after the retention job and the store loss: %s next_seq %d, want %d", s, got, want)
		}
	}
	// The client goes on from next_seq: what it resends is written.
	for s, next := range map[string]int64{"s1": ps.Streams["s1"].NextSeq, "s0": ps.Streams["s0"].NextSeq} {
		for seq := next; seq < map[string]int64{"s1": 1, "s0": 2}[s]; seq++ {
			mustSend(t, e, p, s, seq, 2)
		}
	}
	r.commit()
	r.check(exp)
}
