package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
)

// TestStreamDocRefusedShadowsLaterPuts: a planted document under
// _streams/ that the start refuses (a change PUT refuses: a table's
// column dropped) with a version above the store's stays in the
// destination, and every later PUT of this node, numbered below it, is
// not written there (writeStreamDoc skips a newer document). The store
// lost, the start restores the planted document after all: the column
// drop is in force, the stream's records are refused and PUT cannot put
// the column back (a new required field) — the wedge TestStreamDocPlanted
// RefusedChange was about, one store loss later (I13). Failed before
// (after a lost store: version 7 with 4 fields in force); the start now
// replaces the refused document with the store's configuration.
func TestStreamDocRefusedShadowsLaterPuts(t *testing.T) {
	dropColumn := tableConf
	dropColumn.Schema = &streamconf.Schema{Fields: testSchema.Fields[:len(testSchema.Fields)-1]}
	r := plantedStreamDocRig(t, time.Second, dropColumn)
	e := r.start(nil) // refuses the planted document
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatalf("PUT: %v", err)
	}
	mustSend(t, e, nil, tableStream, 2, 3)
	r.commit()
	r.stop()
	r.storePath = filepath.Join(filepath.Dir(r.storePath), "lost.db") // the store is lost
	e, err := r.open(nil, 8*time.Second)
	if err != nil {
		t.Fatalf("start after the store loss: %v; status %+v", err, e.Status())
	}
	if st := e.Stream(tableStream); len(st.Config.Schema.Fields) != len(testSchema.Fields) {
		t.Errorf("after a lost store: version %d with %d fields in force, want the %d fields PUT last accepted", st.Config.Version, len(st.Config.Schema.Fields), len(testSchema.Fields))
	}
	r.broken = "a planted document under _streams/"
}
