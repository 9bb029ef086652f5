package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// TestStreamDocPlantedRefusedChange: a document under _streams/ with a
// version above the store's is restored at start, but one that is a
// change PUT refuses for the stream (a table stream with a required
// column dropped, or no longer a table) must not be: believed, the
// column drop refused every write of the stream's records (a field not
// in the schema) and PUT could not put the table's schema back (a new
// required field), so the stream stayed wedged by a file this node
// never wrote (I13); the table drop left the stream's next files out of
// its table. Failed before: the start put version 7 in force and the
// PUT of the original configuration was refused.
func TestStreamDocPlantedRefusedChange(t *testing.T) {
	dropColumn := tableConf
	dropColumn.Schema = &streamconf.Schema{Fields: testSchema.Fields[:len(testSchema.Fields)-1]}
	noTable := tableConf
	noTable.Table = streamconf.TableNone
	for name, planted := range map[string]streamconf.Config{"drop column": dropColumn, "no table": noTable} {
		t.Run(name, func(t *testing.T) {
			r := plantedStreamDocRig(t, time.Hour, planted)
			e := r.start(nil)
			if st := e.Stream(tableStream); st.Config.Version != 1 || !st.Config.IsTable() || len(st.Config.Schema.Fields) != len(testSchema.Fields) {
				t.Fatalf("after the start: version %d, table %v, %d fields in force; want the store's version 1", st.Config.Version, st.Config.IsTable(), len(st.Config.Schema.Fields))
			}
			if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
				t.Fatalf("PUT of the stream's configuration: %v", err)
			}
			mustSend(t, e, nil, tableStream, 2, 3)
			r.commit()
			r.broken = "a planted document under _streams/"
		})
	}
}

// plantedStreamDocRig starts a table stream (tableConf) on a rig with a
// node lease of timeout, commits a batch, stops, and plants planted as the
// stream's document at version 7, above the store's 1.
func plantedStreamDocRig(t *testing.T, timeout time.Duration, planted streamconf.Config) *rig {
	t.Helper()
	r, _ := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) {
		tw(c)
		c.Leaser, c.LeaseTimeout, c.Listen = local.New(c.FS, rigDest, rigStaging), timeout, "127.0.0.1:1"
	}
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 3)
	r.commit()
	r.stop()
	planted.Version = 7
	data, err := json.Marshal(recovery.StreamConfig{Stream: tableStream, Config: planted, UpdatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.StreamConfName(tableStream), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}
