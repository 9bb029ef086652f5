package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/spf13/afero"
)

// TestTableSnapshots: a table stream's folder shows its snapshots, newest
// first, with the node and checkpoint of each.
func TestTableSnapshots(t *testing.T) {
	fs := afero.NewMemMapFs()
	dest := local.New(fs, "/dest", "/staging")
	conf := streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Partition: "r={field:r}",
		Schema: &streamconf.Schema{Fields: []streamconf.Field{{Name: "r", Type: streamconf.TypeString, Required: true}}}}
	ice := &table.Iceberg{Dest: dest, Location: "file:///dest", Config: func(string) (streamconf.Config, bool) { return conf, true }}
	for c := uint64(1); c <= 2; c++ {
		name := "tb/r=a/" + layout.PartName("n1", c, 0, "parquet")
		if err := afero.WriteFile(fs, "/dest/"+name, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ice.Commit(t.Context(), "n1", c, []committer.File{{Stream: "tb", Final: name, Bytes: 1, Records: 5, Table: streamconf.TableIceberg}}); err != nil {
			t.Fatal(err)
		}
	}
	h := newFakeUI(t, dest, nil, nil, nil)
	rec := serveH(h, req("GET", "/ui/files/tb/", ""))
	expectCode(t, rec, http.StatusOK)
	expectContains(t, rec.Body.String(), `id="table-snapshots"`, "Metadata version 2", "2 snapshots kept", "10 records in the current one", "(current)")
	// A plain folder has no such section.
	rec = serveH(h, req("GET", "/ui/files/tb/r=a/", ""))
	expectCode(t, rec, http.StatusOK)
	if strings.Contains(rec.Body.String(), `id="table-snapshots"`) {
		t.Fatal("a partition folder shows the table")
	}
}
