package server

import (
	"testing"
	"time"

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
	for _, lease := range []bool{false, true} {
		name := "lease=false"
		if lease {
			name = "lease=true"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil)
			if lease {
				r = leaseRig(t, nil, 200*time.Millisecond, nil)
			}
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 1)
			ck := r.commit().ID
			next := e.Status().OpenID
			r.stop()
			plant(t, r.fs, layout.ManifestName(rigNode, next), []byte("<html>"))
			plantForgotten(t, r, ck, "p", p.Epoch)
			r.broken = "a planted manifest" // the checker believes manifests
			e = r.start(nil)
			if _, ok := e.Producer("p"); !ok {
				t.Fatal("a file with a manifest's name that is not a manifest made a start whose store kept up rebuild, and believe a planted document forgetting the live producer p")
			}
			res, err := send(e, p, "s", 0, 1)
			if err != nil || !res.Duplicate || !res.Committed {
				t.Fatalf("the resend of a committed batch: %+v, %v; want a committed duplicate", res, err)
			}
		})
	}
}
