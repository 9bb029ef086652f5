package server

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// Issue 23 item 1: a state store replaced by an older copy of itself (a
// volume snapshot, a backup restored) whose reserved id block still covers
// every manifest the destination holds. The store is behind as soon as the
// destination holds a manifest newer than the store's newest committed
// checkpoint; the producers are rebuilt. Failed before: "behind" compared
// the manifests with the reserved block, the copy was believed, init
// answered committed_seq 0 and the resends were written twice.
func TestOlderStoreCopyIsDetected(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	ctx := t.Context()
	p := r.initProducer("p")
	must := map[invariant.BatchID]bool{}
	var backup []byte
	var err error
	for seq := range int64(4) {
		mustSend(t, e, p, "a", seq, 2)
		must[invariant.BatchID{Producer: "p", Stream: "a", Seq: seq}] = true
		r.commit()
		if seq == 0 {
			// The copy a volume snapshot takes of the live file, between
			// two transactions: its reserved block is the running one.
			backup = r.storeCopy()
		}
	}
	r.stop()
	r.putStore(backup)
	e = r.start(nil)
	st, err := e.InitProducer(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Streams["a"]; got.CommittedSeq != 3 || got.NextSeq != 4 {
		t.Fatalf("init after the older copy: next %d committed %d, want next 4 committed 3", got.NextSeq, got.CommittedSeq)
	}
	p.Epoch = st.Epoch
	resendFrom0(t, e, p, "a", 5, 4)
	must[invariant.BatchID{Producer: "p", Stream: "a", Seq: 4}] = true
	r.commit()
	r.check(invariant.Expect{Must: must, Exact: true})
}

// Issue 23 items 2 and 3: a producer deleted (or expired) and created
// again from seq 0, then the store lost. The rebuild must take the second
// incarnation's sequence numbers only, and restore the producer at the
// epoch the manifests show, so a fenced zombie of the first incarnation
// stays fenced. Failed before: the rebuild merged both incarnations
// (a/1 of the second was answered "duplicate, committed" and is in no
// file), and restored epoch 0, which the zombie wrote with.
func TestRebuildTellsIncarnationsApart(t *testing.T) {
	for _, how := range []string{"delete", "expire"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(t, nil)
			clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
			r.tweak = func(c *Config) { c.Now = func() time.Time { return clock }; c.ProducerExpiry = time.Hour }
			// The two incarnations reuse batch ids; counted by hand below.
			e, zombie := r.firstIncarnation()
			ctx := t.Context()
			var err error
			if how == "delete" {
				err = e.DeleteProducer(ctx, "p")
			} else {
				clock = clock.Add(2 * time.Hour)
				var n int
				if n, err = e.ExpireProducers(clock); n != 1 {
					t.Fatalf("expired %d producers, want 1", n)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.InitProducer(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			if st.Epoch <= zombie.Epoch {
				t.Fatalf("second incarnation at epoch %d, the first was at %d", st.Epoch, zombie.Epoch)
			}
			p := &Producer{ID: "p", Epoch: st.Epoch}
			mustSend(t, e, p, "a", 0, 1)
			r.commit()
			r.stopLosingStore()
			e = r.start(nil)

			if _, err := send(e, zombie, "a", 1, 1); !errors.Is(err, ErrFenced) {
				t.Fatalf("the first incarnation's zombie writes after the rebuild: %v, want fenced (I6)", err)
			}
			got, ok := e.Producer("p")
			if !ok || got.Streams["a"].CommittedSeq != 0 || got.Streams["a"].NextSeq != 1 {
				t.Fatalf("rebuilt producer: %+v, want stream a next 1 committed 0 (the second incarnation)", got)
			}
			res, err := send(e, p, "a", 1, 1)
			if err != nil || res.Duplicate {
				t.Fatalf("the second incarnation's a/1 after the rebuild: %+v %v, want accepted", res, err)
			}
			r.commit()
			rep := r.checker0(invariant.Expect{})
			want := map[int64]int{0: 2, 1: 2, 2: 1}
			for seq, n := range want {
				if got := rep.Batches[invariant.BatchID{Producer: "p", Stream: "a", Seq: seq}]; got != n {
					t.Errorf("batch p/a/%d appears %d times, want %d (one per incarnation that sent it)", seq, got, n)
				}
			}
		})
	}
}

// plant writes a manifest document as another writer of the bucket would.
func plant(t *testing.T, fs afero.Fs, name string, data []byte) {
	t.Helper()
	if err := afero.WriteFile(fs, rigDest+"/"+name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Issue 23 item 5: a manifest planted under this node's prefix by someone
// else who can write the bucket must never make the node answer
// "committed" for a batch that is in no file, nor keep it from starting.
// Failed before: the planted manifest (ids beyond the store's) made the
// store look behind, the rebuild believed its ranges, and p's next batches
// were answered "duplicate, committed"; a manifest that is not JSON made
// every rebuild fail and the node never became ready.
func TestPlantedManifestIsNotBelieved(t *testing.T) {
	cases := map[string]func(next uint64) (string, []byte){
		"ranges without files": func(next uint64) (string, []byte) {
			m := &layout.Manifest{Checkpoint: next + 5000, Node: rigNode, CommittedAt: time.Now().UTC(),
				Files: []layout.ManifestFile{{Path: "a/" + layout.PartName(rigNode, next+5000, 0, "ndjson"), Stream: "a", Bytes: 10, Records: 1,
					Producers: map[string]committer.SeqRanges{"p": {{0, 100}}}}}}
			b, _ := layout.EncodeManifest(m)
			return m.Name(), b
		},
		"not JSON": func(next uint64) (string, []byte) {
			return layout.ManifestName(rigNode, next+5000), []byte("<html>")
		},
		"id near 2^64": func(uint64) (string, []byte) {
			return layout.ManifestName(rigNode, 1<<64-10), []byte("{}")
		},
		"id at the bound": func(uint64) (string, []byte) {
			return layout.ManifestName(rigNode, layout.MaxCheckpoint), []byte("{}")
		},
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil)
			e := r.start(nil)
			p := r.initProducer("p")
			must := map[invariant.BatchID]bool{}
			mustSend(t, e, p, "a", 0, 1)
			must[invariant.BatchID{Producer: "p", Stream: "a", Seq: 0}] = true
			res := r.commit()
			r.stop()
			pn, data := make(res.ID)
			plant(t, r.fs, pn, data)
			r.broken = "a planted manifest" // the checker believes manifests
			e2, err := r.open(nil, 10*time.Second)
			if err != nil {
				t.Fatalf("not ready with a planted manifest: %v (status %+v)", err, e2.Status())
			}
			if open := e2.Status().OpenID; open <= res.ID || open > layout.MaxCheckpoint/2 {
				t.Fatalf("open checkpoint %d after the planted manifest (last committed %d)", open, res.ID)
			}
			res1, err := send(e2, p, "a", 1, 1)
			if err != nil || res1.Duplicate {
				t.Fatalf("p's next batch after a planted manifest: %+v %v, want accepted", res1, err)
			}
			if res := r.checkpoint(); res.State != recovery.Committed {
				t.Fatalf("checkpoint after the planted manifest: %+v (stuck %q)", res, e2.Status().Stuck)
			}
			if err := r.fs.Remove(rigDest + "/" + pn); err != nil {
				t.Fatal(err)
			}
			r.broken = ""
			must[invariant.BatchID{Producer: "p", Stream: "a", Seq: 1}] = true
			r.check(invariant.Expect{Must: must, Exact: true})
		})
	}
}

// Issue 23 item 5, with a node lease: a consistent planted set (a data
// file and its manifest) beyond the checkpoint ids the node reserved is
// not this node's and is ignored, though its files are there. Failed
// before: the store looked behind and the rebuild believed the ranges.
func TestPlantedManifestBeyondReservedIDs(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) {
		c.Leaser, c.LeaseTimeout = local.New(c.FS, rigDest, rigStaging), time.Hour
	}
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 1)
	res := r.commit()
	r.stop()
	id := res.ID + 1<<20
	data := []byte("{\"planted\":true}\n")
	part := "a/" + layout.PartName(rigNode, id, 0, "ndjson")
	m := &layout.Manifest{Checkpoint: id, Node: rigNode, CommittedAt: time.Now().UTC(),
		Files: []layout.ManifestFile{{Path: part, Stream: "a", Bytes: int64(len(data)), Records: 1,
			Producers: map[string]committer.SeqRanges{"p": {{0, 100}}}}}}
	b, err := layout.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	plant(t, r.fs, part, data)
	plant(t, r.fs, m.Name(), b)
	r.broken = "a planted manifest"
	e = r.start(nil)
	res1, err := send(e, p, "a", 1, 1)
	if err != nil || res1.Duplicate {
		t.Fatalf("p's next batch after a planted manifest beyond the reserved ids: %+v %v, want accepted", res1, err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.ID <= id {
		t.Fatalf("checkpoint after the planted manifest: %+v, want committed beyond the planted id %d", res, id)
	}
	for _, name := range []string{part, m.Name()} {
		if err := r.fs.Remove(rigDest + "/" + name); err != nil {
			t.Fatal(err)
		}
	}
	r.broken = ""
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 0}: true, {Producer: "p", Stream: "a", Seq: 1}: true}, Exact: true})
}

// Issue 23 items 1 and 2 together: the store comes back as a copy taken
// before the producer was deleted and created again. The copy holds the
// first incarnation; the destination's newest is the second, which must
// win. Failed before: the copy was believed (committed_seq 2).
func TestOlderStoreCopyBeforeProducerDeleted(t *testing.T) {
	r := newRig(t, nil)
	e, first := r.firstIncarnation()
	ctx := t.Context()
	backup, err := os.ReadFile(r.storePath) // a live snapshot
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteProducer(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	second := r.initProducer("p")
	mustSend(t, e, second, "b", 0, 1)
	r.commit()
	r.stop()
	r.putStore(backup)
	e = r.start(nil)
	if _, err := send(e, first, "a", 3, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("the first incarnation writes after the copy came back: %v, want fenced", err)
	}
	got, ok := e.Producer("p")
	if !ok || got.Epoch != second.Epoch || len(got.Streams) != 1 || got.Streams["b"].NextSeq != 1 {
		t.Fatalf("producer after the copy came back: %+v, want the second incarnation (epoch %d, only b at next 1)", got, second.Epoch)
	}
	if res, err := send(e, second, "a", 0, 1); err != nil || res.Duplicate {
		t.Fatalf("the second incarnation's a/0: %+v %v, want accepted", res, err)
	}
}

// firstIncarnation starts the engine for a test of two incarnations of
// producer p, which reuse sequence numbers (so the invariant check counts
// by hand), and commits the first one's batches 0 to 2 on stream a.
func (r *rig) firstIncarnation() (*Engine, *Producer) {
	r.t.Helper()
	r.broken = "two incarnations of p reuse sequence numbers: checked by counting"
	e := r.start(nil)
	p := r.initProducer("p")
	for seq := range int64(3) {
		mustSend(r.t, e, p, "a", seq, 1)
	}
	r.commit()
	return e, p
}

// A name planted under this node's manifest prefix, or a part file with
// this node's name, just below the id bound a start believes
// (MaxCheckpoint/2) must not carry the node's ids past it: a later start
// (after a store loss) would believe none of the node's own manifests
// beyond the bound, and rebuild its producers without them — their
// committed batches written again. Failed before for the manifest (open
// 2^61+2^40+...) and, after a11f556, for the part file of a new node.
func TestPlantedNearBoundKeepsIDsBelieved(t *testing.T) {
	near := uint64(layout.MaxCheckpoint/2 - 10)
	for name, planted := range map[string]string{
		"manifest":  layout.ManifestName(rigNode, near),
		"part file": "a/" + layout.PartName(rigNode, near, 0, "ndjson"),
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil)
			plant(t, r.fs, planted, []byte("{}"))
			r.broken = "a planted " + name
			e := r.start(nil)
			if open := e.Status().OpenID; open+1024 > layout.MaxCheckpoint/2 {
				t.Fatalf("open checkpoint %d after a planted %s at %d: beyond the bound %d a later start believes", open, name, near, uint64(layout.MaxCheckpoint/2))
			}
			p := r.initProducer("p")
			mustSend(t, e, p, "a", 0, 1)
			r.commit()
			r.stop()
			if err := os.Remove(r.storePath); err != nil {
				t.Fatal(err)
			}
			r.start(nil)
			if got := r.initState("p").Streams["a"].NextSeq; got != 1 {
				t.Fatalf("after a store loss p's next_seq on a is %d, want 1: its committed batch was not rebuilt", got)
			}
		})
	}
}

// After a planted name near the bound moved the node's ids up to where a
// start continues (TestPlantedNearBoundKeepsIDsBelieved), a later loss of
// the state store (and of the lease, where there is one) must not open an
// id the node committed there (I8): the planted name still there is cut to
// the same place again, below the node's own manifests.
func TestPlantedNearBoundNoReuse(t *testing.T) {
	near := uint64(layout.MaxCheckpoint/2 - 10)
	for _, leased := range []bool{false, true} {
		for name, planted := range map[string]string{
			"manifest":  layout.ManifestName(rigNode, near),
			"part file": "a/" + layout.PartName(rigNode, near, 0, "ndjson"),
		} {
			t.Run(fmt.Sprintf("%s/leased=%v", name, leased), func(t *testing.T) {
				r := newRig(t, nil)
				if leased {
					r = newLeasedRig(t, nil)
				}
				plant(t, r.fs, planted, []byte("{}"))
				r.broken = "a planted " + name
				e := r.start(nil)
				p := r.initProducer("p")
				mustSend(t, e, p, "a", 0, 1)
				res := r.commit()
				r.stop()
				if err := os.Remove(r.storePath); err != nil {
					t.Fatal(err)
				}
				if leased {
					damageLease(r.fs, leaseDeleted, t.Fatalf)
				}
				e = r.start(nil)
				if open := e.Status().OpenID; open <= res.ID || open+1024 > layout.MaxCheckpoint/2 {
					t.Fatalf("after the loss the open checkpoint is %d; the node committed %d before it (I8), the bound is %d", open, res.ID, uint64(layout.MaxCheckpoint/2))
				}
				if got := r.initState("p").Streams["a"].NextSeq; got != 1 {
					t.Fatalf("after a store loss p's next_seq on a is %d, want 1: its committed batch was not rebuilt", got)
				}
			})
		}
	}
}
