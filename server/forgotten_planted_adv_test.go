package server

import (
	"fmt"
	"testing"

	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// TestPlantedForgottenDocForgetsLiveProducer: a document under this
// node's _forgotten/ prefix that it never wrote, naming a live producer
// at its epoch and the store's newest checkpoint, must not make a start
// whose store is current forget the producer: forgotten, its client's
// retry of a committed batch is refused unknown_producer, and after the
// client's Init the retry is written again under a new incarnation (I2).
func TestPlantedForgottenDocForgetsLiveProducer(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	ps, err := e.InitProducer(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	p := &Producer{ID: "p", Epoch: ps.Epoch}
	mustSend(t, e, p, "s", 0, 1)
	ck := r.commit().ID
	doc := fmt.Sprintf(`{"node":%q,"after_checkpoint":%d,"producers":{"p":%d}}`, rigNode, ck, ps.Epoch)
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.ForgottenName(rigNode, ck, 0), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r.stop()
	e = r.start(nil)
	if _, ok := e.Producer("p"); !ok {
		t.Fatal("a planted _forgotten document (this node's name, the store's newest checkpoint, the producer's epoch) made a start with a current store forget a live producer")
	}
	res, err := send(e, p, "s", 0, 1)
	if err != nil || !res.Duplicate {
		t.Fatalf("the resend of a committed batch: %+v, %v; want a duplicate", res, err)
	}
}
