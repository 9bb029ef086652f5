package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
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

// A start after a state-store loss over a destination whose manifests
// name many producers, all of them forgotten since: the store it rebuilds
// holds none of them, and its file must not have held them on the way
// (bbolt never gives pages back: a store that took every producer the
// manifests ever named and then forgot them keeps their size, which
// grows with how many producers ever existed, against I11).
func TestRebuildStoreSizeOfForgottenProducers(t *testing.T) {
	const manifests, per = 20, 500 // 10,000 producers
	fs := afero.NewMemMapFs()
	write := func(name string, data []byte) {
		full := path.Join(rigDest, name)
		if err := fs.MkdirAll(path.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := afero.WriteFile(fs, full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	forgot := layout.Forgotten{Node: rigNode, Producers: map[string]int64{}}
	n := 0
	flush := func() {
		if len(forgot.Producers) == 0 {
			return
		}
		body, err := json.Marshal(&forgot)
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ForgottenName(rigNode, forgot.After, n), body)
		n++
		forgot.Producers = map[string]int64{}
	}
	for c := uint64(1); c <= manifests; c++ {
		f := committer.File{Stream: "s", Final: "s/dt=2026-11-29/hour=09/" + layout.PartName(rigNode, c, 0, "ndjson"),
			Records: 1, CRC32C: "00000000", Producers: map[string]committer.SeqRanges{}, Epochs: map[string]committer.ProducerEpoch{}}
		for j := range per {
			id := fmt.Sprintf("producer-%07d", int(c-1)*per+j)
			f.Producers[id] = committer.SeqRanges{{0, 0}}
			f.Epochs[id] = committer.ProducerEpoch{Epoch: 1, Incarnation: 1}
			forgot.Producers[id] = 1
		}
		body := []byte("{\"x\":1}\n")
		f.Bytes = int64(len(body))
		write(f.Final, body)
		doc, err := layout.EncodeManifest(layout.NewManifest(rigNode, c, at, []committer.File{f}))
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ManifestName(rigNode, c), doc)
		forgot.After = c
		if len(forgot.Producers) >= layout.MaxForgotten-per {
			flush()
		}
	}
	forgot.After = manifests
	flush()

	empty := newRig(t, nil)
	empty.start(nil)
	empty.stop()
	base := fileSize(t, empty.storePath)

	r := newRig(t, fs)
	r.broken = "a synthetic destination"
	e := r.start(nil)
	if c := e.ProducerCount(); c != 0 {
		t.Fatalf("the rebuild kept %d producers, all forgotten", c)
	}
	r.stop()
	got := fileSize(t, r.storePath)
	t.Logf("state.db: %d bytes after rebuilding %d forgotten producers; %d for an empty destination", got, manifests*per, base)
	if got > base+1<<20 {
		t.Fatalf("state.db is %d bytes after a rebuild whose producers were all forgotten, %d for an empty destination: it held them on the way", got, base)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

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
