package server

import (
	"fmt"
	"testing"

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
