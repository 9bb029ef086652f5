package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
	bolt "go.etcd.io/bbolt"
)

// plantForgotten writes, under this node's _forgotten/ prefix, a document
// the node never wrote: it names p at epoch after checkpoint after.
func plantForgotten(t *testing.T, r *rig, after uint64, p string, epoch int64) string {
	t.Helper()
	name := layout.ForgottenName(rigNode, after, 7)
	doc := fmt.Sprintf(`{"node":%q,"after_checkpoint":%d,"producers":{%q:%d}}`, rigNode, after, p, epoch)
	if err := afero.WriteFile(r.fs, rigDest+"/"+name, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// The node's own forget, published and then cut short before its store
// forgot the producer (a crash between the two), is sealed and applied by
// the next start whose store is current: the seal keeps out only
// documents the node did not write.
func TestForgottenSealOwnForgetCutShortApplied(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 1)
	r.commit()
	if err := e.life.recordForgotten(t.Context(), []string{"p"}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	r.stop() // the store still holds p
	e = r.start(nil)
	if st, ok := e.Producer("p"); ok {
		t.Fatalf("the node's own forget, cut short before the store's: p still known after the start (%+v)", st)
	}
}

// A compaction reads every document under the node's prefix and publishes
// a sealed merged one: a planted document merged into it would be sealed
// by the node and believed by every later start. The compaction must leave
// it out (and in place), and a start after it must still know the live
// producer the planted document names.
func TestForgottenSealCompactionLeavesPlanted(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 1)
	ck := r.commit().ID
	for _, id := range []string{"gone1", "gone2"} { // the node's own forgets, to merge
		r.initProducer(id)
		if err := e.DeleteProducer(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	planted := plantForgotten(t, r, ck, "p", p.Epoch)
	res, err := e.CompactForgotten(t.Context())
	if err != nil || res.Read != 2 || res.Written != 1 || res.Removed != 2 {
		t.Fatalf("compaction: %+v, %v; want the node's 2 documents merged into 1, the planted one left", res, err)
	}
	if ok, _ := afero.Exists(r.fs, rigDest+"/"+planted); !ok {
		t.Fatal("the compaction removed the planted document (it can't be merged: it would be sealed)")
	}
	r.stop()
	e = r.start(nil)
	if _, ok := e.Producer("p"); !ok {
		t.Fatal("after a compaction, a planted document made a start forget the live producer p")
	}
	for _, id := range []string{"gone1", "gone2"} {
		if _, ok := e.Producer(id); ok {
			t.Fatalf("%s, forgotten, is known again after the compaction and a start", id)
		}
	}
}

// A store made before documents were sealed has no key: its documents,
// written unsealed by the older binary, are applied by the start that
// makes the key (it reads them before, believing every one). Documents
// published after the key was made must be sealed.
func TestForgottenSealUpgradeBelievesOlderDocuments(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 1)
	ck := r.commit().ID
	// The older binary published p's forget and crashed before its store
	// forgot p: an unsealed document, and no key in the store.
	plantForgotten(t, r, ck, "p", p.Epoch)
	r.stop()
	db, err := bolt.Open(r.storePath, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	if _, ok := e.Producer("p"); ok {
		t.Fatal("the older binary's unsealed forget of p, cut short, was not applied by the upgraded start")
	}
	// It applied every document there was before making the key, so the
	// key believes unsealed only what a later start skips anyway
	// (TestForgottenSealWindowAfterRebuild).
	if e.life.seal.Key == nil || e.life.seal.Since+2 > max(ck, 2) {
		t.Fatalf("the upgraded start's seal: since %d, key %v; want a key, since at most %d (the newest commit minus 2)", e.life.seal.Since, e.life.seal.Key != nil, max(ck, 2)-2)
	}
	// From now on a document after the seal's checkpoint must be sealed.
	q := r.initProducer("q")
	mustSend(t, e, q, "s", 0, 1)
	ck = r.commit().ID
	plantForgotten(t, r, ck, "q", q.Epoch)
	r.stop()
	e = r.start(nil)
	if _, ok := e.Producer("q"); !ok {
		t.Fatal("after the upgrade, a planted unsealed document made a start forget the live producer q")
	}
}
