package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
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
	r, _ := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) {
		tw(c)
		c.Leaser, c.LeaseTimeout, c.Listen = local.New(c.FS, rigDest, rigStaging), time.Second, "127.0.0.1:1"
	}
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 3)
	r.commit()
	r.stop()
	dropColumn.Version = 7
	data, err := json.Marshal(recovery.StreamConfig{Stream: tableStream, Config: dropColumn, UpdatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.StreamConfName(tableStream), data, 0o644); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil) // refuses the planted document
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatalf("PUT: %v", err)
	}
	mustSend(t, e, nil, tableStream, 2, 3)
	r.commit()
	r.stop()
	r.storePath = filepath.Join(filepath.Dir(r.storePath), "lost.db") // the store is lost
	e, err = r.open(nil, 8*time.Second)
	if err != nil {
		t.Fatalf("start after the store loss: %v; status %+v", err, e.Status())
	}
	if st := e.Stream(tableStream); len(st.Config.Schema.Fields) != len(testSchema.Fields) {
		t.Errorf("after a lost store: version %d with %d fields in force, want the %d fields PUT last accepted", st.Config.Version, len(st.Config.Schema.Fields), len(testSchema.Fields))
	}
	r.broken = "a planted document under _streams/"
}
