package server

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/recovery"

	bolt "go.etcd.io/bbolt"
)

// The seal's checkpoint (Since) is where unsealed documents stop being
// believed. A start that makes the key after a rebuild (the store lost)
// or after an upgrade opens far beyond the store's newest commit (past
// every id reserved), so Since is far beyond it too: until the node has
// committed two checkpoints past Since, a start whose store kept up
// applies documents after newest-1 and believes them unsealed up to
// Since. A planted document naming a live producer after the store's
// newest checkpoint minus 1 — after an upgrade, the very document
// TestPlantedForgottenDocForgetsLiveProducer plants — is then believed,
// and the producer's resend of a committed batch is written again.
func TestForgottenSealWindowAfterRebuild(t *testing.T) {
	for _, how := range []string{"rebuild", "upgrade"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(t, nil)
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 1)
			ck := r.commit().ID
			switch how {
			case "rebuild":
				r.stopLosingStore()
			case "upgrade":
				r.stop()
				dropForgottenKey(t, r.storePath)
			}
			e = r.start(nil) // makes the key
			at := ck
			if how == "rebuild" {
				// The rebuilt store commits nothing until the node does
				// (every start until then rebuilds, believing every
				// document: a rebuild's limit): one commit of another
				// producer, past the ids the lost store reserved.
				mustSend(t, e, r.initProducer("q"), "s", 0, 1)
				at = r.commit().ID - 1
			}
			r.stop()
			plantForgotten(t, r, at, "p", p.Epoch)
			e = r.start(nil)
			if _, ok := e.Producer("p"); !ok {
				t.Fatalf("after a %s, a planted unsealed document after checkpoint %d (at or below the seal's %d) made a start with a current store forget the live producer p",
					how, at, e.life.seal.Since)
			}
			res, err := send(e, p, "s", 0, 1)
			if err != nil || !res.Duplicate {
				t.Fatalf("the resend of a committed batch: %+v, %v; want a duplicate", res, err)
			}
		})
	}
}

// dropForgottenKey removes the seal from the store at path, as a store
// written by a binary older than sealing has none.
func dropForgottenKey(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta.Get([]byte("forgotten_key")) == nil {
			return fmt.Errorf("no forgotten_key in the store's meta bucket: the test's key names are stale")
		}
		if err := meta.Delete([]byte("forgotten_key")); err != nil {
			return err
		}
		return meta.Delete([]byte("forgotten_since"))
	}); err != nil {
		t.Fatal(err)
	}
}

// A store lost and rebuilt makes a new key; a forget published under it
// must still be applied by a start over an older copy of the lost store
// (its own, other key), which kept up with the destination: nothing was
// committed since the copy. Else the forgotten producer comes back as
// its old incarnation, and the new incarnation's client is answered the
// old committed_seq (it drops batches it has not had committed).
// With a lease, the ids the rebuilt store reserved show in the lease and
// the start over the older copy rebuilds (believing every document). With
// no lease (no Leaser: only tests; the binary always has one) nothing
// shows the older copy is older, the start believes only its own key's
// seals, and the forget is lost: a design limit.
func TestForgottenSealOlderCopyOfLostStore(t *testing.T) {
	for _, lease := range []bool{true, false} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			if !lease {
				t.Skip("BUG (design limit, no Leaser only): a store lost and rebuilt (a new key), a producer forgotten under it, then an older copy of the lost store put back with nothing committed since: the forget, sealed under the rebuilt store's key, is not believed under the older copy's, and the producer is back as its old incarnation (old committed_seq to the new incarnation's client). Without a lease nothing tells the copy is older; with one (the binary always has one) the start rebuilds")
			}
			r := newRig(t, nil)
			if lease {
				r = leaseRig(t, nil, 200*time.Millisecond, nil)
			}
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 3)
			r.commit()
			r.stop()
			backup, err := os.ReadFile(r.storePath)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(r.storePath); err != nil {
				t.Fatal(err)
			}
			e = r.start(nil) // rebuilds: a new key
			if err := e.DeleteProducer(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			p2 := r.initProducer("p") // the new incarnation
			mustSend(t, e, p2, "s", 0, 1)
			r.stop() // before its batch commits
			if err := os.WriteFile(r.storePath, backup, 0o600); err != nil {
				t.Fatal(err)
			}
			e = r.start(nil)
			if st, ok := e.Producer("p"); ok && st.Epoch <= p.Epoch {
				t.Fatalf("over an older copy of the lost store, p is back as its forgotten incarnation (%+v): its forget, published under the rebuilt store's key, was not believed", st)
			}
		})
	}
}

// The start's one new write, the seal's key: a full disk refusing it
// makes the start wait and go on once space is back (the same key from
// then on); a failed fdatasync after it stops the engine (the key may or
// may not be there), and the next start makes or reads it and seals its
// forgets, which the start after believes.
func TestForgottenSealStartWriteFaults(t *testing.T) {
	t.Run("disk full", func(t *testing.T) {
		r, f := storeRig(t)
		f.set(failOp("make forgotten seal", recovery.BeforeCommit, errPageENOSPC, 3))
		e := r.start(nil)
		if e.Err() != nil || len(f.fired) != 3 || e.life.seal.Key == nil {
			t.Fatalf("engine error %v, faults fired %v, key made %v", e.Err(), f.fired, e.life.seal.Key != nil)
		}
		r.stop()
		// While the disk stays full the start says so, as it does for
		// the id reservation just before.
		f.set(failOp("make forgotten seal", recovery.BeforeCommit, errPageENOSPC, 1<<30))
		dropForgottenKey(t, r.storePath)
		e, err := r.open(nil, 300*time.Millisecond)
		if err == nil {
			t.Fatal("ready with the seal's key refused for space")
		}
		if st := e.Status(); st.DiskFull == "" || !strings.Contains(st.Recovering, "seal") {
			t.Fatalf("a start waiting on a full disk for the seal's key: status disk full %q, recovering %q; want both to say so", st.DiskFull, st.Recovering)
		}
		f.set(nil)
		if err := e.WaitReady(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.stop()
		key := e.life.seal.Key
		if e = r.start(nil); !bytes.Equal(e.life.seal.Key, key) {
			t.Fatal("the next start has another key")
		}
	})
	for _, cut := range []error{errPageEIO, syscall.EIO} {
		t.Run(cut.Error(), func(t *testing.T) {
			r, f := storeRig(t)
			phase := recovery.BeforeCommit
			if cut == syscall.EIO {
				phase = recovery.AfterCommit
			}
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 1)
			r.commit()
			r.stop()
			dropForgottenKey(t, r.storePath) // the first start of a sealing binary makes the key
			f.set(failOp("make forgotten seal", phase, cut, 1))
			e, err := r.open(nil, 5*time.Second)
			if err == nil || !waitFailed(t, e, 5*time.Second) {
				t.Fatalf("a failed write of the seal's key: ready %v, engine error %v", err, e.Err())
			}
			f.set(nil)
			r.stop()
			e = r.start(nil)
			if err := e.DeleteProducer(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			// The delete's own forget, cut short: the store still holds p.
			q := r.initProducer("q")
			mustSend(t, e, q, "s", 0, 1)
			r.commit()
			if err := e.life.recordForgotten(t.Context(), []string{"q"}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			r.stop()
			e = r.start(nil)
			if _, ok := e.Producer("q"); ok {
				t.Fatal("the node's own forget, sealed after a start failed writing the key, was not believed")
			}
			if _, ok := e.Producer("p"); ok {
				t.Fatal("p, deleted, is known again")
			}
		})
	}
}

// After a store loss the documents sealed under the lost store's key can't
// be checked; the rebuilt store's key must still let the compaction adopt
// them (they are before every checkpoint the rebuilt store will commit,
// so no later start whose store kept up reads them), or every store loss
// leaves its documents uncompacted for good.
func TestForgottenSealCompactionAdoptsLostKeyDocuments(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	mustSend(t, e, r.initProducer("keep"), "s", 0, 1)
	r.commit()
	for _, id := range []string{"gone1", "gone2"} {
		r.initProducer(id)
		if err := e.DeleteProducer(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	r.stopLosingStore()
	e = r.start(nil) // rebuilds: a new key
	mustSend(t, e, r.initProducer("q"), "s", 0, 1)
	r.commit()
	res, err := e.CompactForgotten(t.Context())
	if err != nil || res.Read != 2 || res.Removed != 2 {
		t.Fatalf("compaction after a store loss: %+v, %v; want the lost key's 2 documents merged under the new key", res, err)
	}
	r.stop()
	e = r.start(nil)
	for _, id := range []string{"gone1", "gone2"} {
		if _, ok := e.Producer(id); ok {
			t.Fatalf("%s, forgotten, is known again", id)
		}
	}
}

// After a store loss the rebuilt store commits nothing until the node
// does, so every start until then finds it behind the destination and
// rebuilds again, believing every document (a lost store's key can't be
// checked): a document planted then, naming a live producer, forgets it,
// though this store holds the key of every document published since it
// was rebuilt. The seal can't help: the rebuild must believe documents
// sealed under keys it does not hold (TestForgottenSealOlderCopyOfLostStore).
func TestForgottenPlantedAfterLossBeforeFirstCommit(t *testing.T) {
	t.Skip("BUG (design limit of the rebuild, not of the seal): after a store loss and before the rebuilt store's first commit, a restart rebuilds again and believes a planted forgotten-producers document, forgetting a live producer whose resend of a committed batch is then written again. A fix would have the rebuild record the newest commit it rebuilt through, so the next start is not a rebuild")
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 1)
	ck := r.commit().ID
	r.stopLosingStore()
	r.start(nil) // rebuilds
	r.stop()
	plantForgotten(t, r, ck, "p", p.Epoch)
	e = r.start(nil)
	if _, ok := e.Producer("p"); !ok {
		t.Fatal("after a store loss, before the rebuilt store's first commit, a planted document made a start forget the live producer p")
	}
}

// An older copy of the store, taken after its key was made, holds the
// same key: a forget published since the copy (sealed) is believed by a
// start over the copy, with or without commits since (none: the copy
// kept up; some: a rebuild, believing every document), and the producer
// does not come back as its forgotten incarnation.
func TestForgottenSealOlderCopySameKey(t *testing.T) {
	for _, commitAfter := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit-after=%v", commitAfter), func(t *testing.T) {
			r := newRig(t, nil)
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 3)
			r.commit()
			r.stop()
			backup, err := os.ReadFile(r.storePath)
			if err != nil {
				t.Fatal(err)
			}
			e = r.start(nil)
			if err := e.DeleteProducer(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			p2 := r.initProducer("p") // the new incarnation, its batch not committed
			mustSend(t, e, p2, "s", 0, 1)
			if commitAfter {
				r.broken = "p deleted and created again: its new incarnation's seqs start at 0 again"
				mustSend(t, e, r.initProducer("q"), "s", 0, 1)
				mustSend(t, e, p2, "s", 1, 1)
				r.commit()
			}
			r.stop()
			if err := os.WriteFile(r.storePath, backup, 0o600); err != nil {
				t.Fatal(err)
			}
			e = r.start(nil)
			if st, ok := e.Producer("p"); ok && st.Epoch <= p.Epoch {
				t.Fatalf("over an older copy of the store (the same key), p is back as its forgotten incarnation (%+v)", st)
			}
		})
	}
}
