package server

import (
	"context"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/streamconf"
)

// TestTableBecameTableStoreLost: a Parquet stream partitioned by ingest
// time becomes a table partitioned by a column (a change PUT accepts:
// the stream was no table), and the state store is lost before the
// stream's next checkpoint. The rebuild finishes the table commits of
// the stream's newest manifests, which hold only files written before it
// was a table, in partitions the table's template can't read: those are
// no table's files. Committing them failed for good and parked the
// stream, whose writes were then refused for ever: no retry lands them,
// and PUT can't make the stream a plain one again.
func TestTableBecameTableStoreLost(t *testing.T) {
	r, _ := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) {
		tw(c)
		c.Leaser, c.LeaseTimeout, c.Listen = local.New(c.FS, rigDest, rigStaging), 200*time.Millisecond, "127.0.0.1:1"
	}
	e := r.start(nil)
	plain := streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}
	if _, err := e.PutStream(context.Background(), tableStream, plain); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 3)
	r.commit()
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatalf("make the stream a table: %v", err)
	}
	r.stopLosingStore()
	time.Sleep(250 * time.Millisecond) // the crashed holder's lease expires
	e = r.start(nil)
	if st := e.Status(); st.TablesParked != 0 {
		t.Fatalf("after the rebuild: %d tables parked (%s)", st.TablesParked, st.TableParked)
	}
	mustSend(t, e, nil, tableStream, 2, 3)
	r.commit()
}
