package server

import (
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// A start whose store kept up believes, after its newest commit minus 1,
// only forgotten-producers documents its key sealed
// (TestPlantedForgottenDocForgetsLiveProducer). A file planted under the
// node's manifest prefix with a manifest's name beyond the store's newest
// commit — not JSON, so never believed as a manifest
// (TestPlantedManifestIsNotBelieved) — made the start think the store
// behind and rebuild, and a rebuild believes every document: the planted
// forgotten-producers document beside it then forgot the live producer p,
// whose resend of a committed batch was refused unknown_producer (and
// after an init written again, I2). "lease=true": the planted name within
// the ids the lease shows reserved (the node's own next id).
func TestPlantedManifestNameMakesPlantedForgetBelieved(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		e, p, ck := r.startCommitted(t)
		next := e.Status().OpenID
		r.stop()
		plant(t, r.fs, layout.ManifestName(rigNode, next), []byte("<html>"))
		plantForgotten(t, r, ck, "p", p.Epoch)
		r.broken = "a planted manifest" // the checker believes manifests
		wantProducerKept(t, r.start(nil), p, "a file with a manifest's name that is not a manifest made a start whose store kept up rebuild")
	})
}

// After a store loss and its rebuild (the mark: rebuilt through ck), an
// operator removes the node's manifests (rebuilt_through is then beyond
// the newest manifest). A start over the rebuilt store, before its first
// commit, is not another rebuild: a document planted at ck naming the
// live producer p is not believed, p's resend of its committed batch is
// a committed duplicate, and p goes on; the ids go on beyond every id
// answered.
func TestRebuiltThroughBeyondManifests(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		e, p, ck := r.startCommitted(t)
		r.stopLosingStore()
		e = r.start(nil) // rebuilds, marks ck
		open := e.Status().OpenID
		r.stop()
		if through, err := rebuiltThrough(t, r.storePath); err != nil || through != ck {
			t.Fatalf("the mark: %d %v, want %d", through, err, ck)
		}
		if err := r.fs.RemoveAll(rigDest + "/_manifests"); err != nil {
			t.Fatal(err)
		}
		r.broken = "the manifests removed by hand"
		plantForgotten(t, r, ck, "p", p.Epoch)
		e = r.start(nil)
		wantProducerKept(t, e, p, "manifests removed after a rebuild")
		if got := e.Status().OpenID; got <= open {
			t.Fatalf("open checkpoint %d after the restart, %d was open before (I8)", got, open)
		}
		mustSend(t, e, p, "s", 1, 1)
		r.commit()
	})
}

// A manifest planted beyond the store's newest commit that is well formed
// but whose files the destination does not hold (the rebuild skips it:
// TestPlantedManifestIsNotBelieved "ranges without files") made a start
// whose store kept up rebuild all the same, and the rebuild believed a
// planted forgotten-producers document beside it: p forgotten, its resend
// of a committed batch refused (and written again after an init, I2).
func TestPlantedManifestGoneFilesMakesPlantedForgetBelieved(t *testing.T) {
	r := newRig(t, nil)
	e, p, ck := r.startCommitted(t)
	next := e.Status().OpenID
	r.stop()
	m := &layout.Manifest{Checkpoint: next, Node: rigNode, CommittedAt: time.Now().UTC(),
		Files: []layout.ManifestFile{{Path: "a/" + layout.PartName(rigNode, next, 0, "ndjson"), Stream: "a", Bytes: 10, Records: 1,
			Producers: map[string]committer.SeqRanges{"z": {{0, 1}}}}}}
	b, err := layout.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	plant(t, r.fs, m.Name(), b)
	plantForgotten(t, r, ck, "p", p.Epoch)
	r.broken = "a planted manifest" // the checker believes manifests
	wantProducerKept(t, r.start(nil), p, "a planted manifest whose files the destination does not hold made a start whose store kept up rebuild")
}
