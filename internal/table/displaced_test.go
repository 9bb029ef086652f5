package table_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
)

// TestCommitDisplacedFile: a part file the commit displaced
// (<stream>/_displaced/<part>: its partition path refused by the
// destination) joins the table where it is, with the partition its
// prepared name gave it (File.DisplacedFrom), so that a reader filtering
// on the partition finds it, and one filtering on another value does not.
// Before, the table commit parsed the partition from the displaced name,
// which has none: ErrIncompatible, and the checkpoint was stuck.
func TestCommitDisplacedFile(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	f, to := r.displacedFile()
	ice := r.iceberg()
	if err := ice.Commit(ctx, "n1", 1, []committer.File{f}); err != nil {
		t.Fatalf("commit of a displaced file: %v", err)
	}
	checkDisplacedScan(t, r, to)
}

// TestCommitDisplacedFileFromManifest: the table commit a start finishes
// from a published manifest (recovery.ManifestTableFiles, after a lost
// state store) places a displaced file in the partition of the name it
// was prepared with, which the manifest keeps (displaced_from): without
// it the displaced name has no partition and the commit is refused.
func TestCommitDisplacedFileFromManifest(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	f, to := r.displacedFile()
	body, err := layout.EncodeManifest(layout.NewManifest("n1", 1, time.Now(), []committer.File{f}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.DecodeManifest(layout.ManifestName("n1", 1), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got := recovery.ManifestTableFiles(m, func(s string) bool { return s == "orders" })
	if len(got) != 1 || got[0].DisplacedFrom != f.DisplacedFrom || got[0].Table != streamconf.TableIceberg {
		t.Fatalf("files from the manifest: %+v", got)
	}
	if none := recovery.ManifestTableFiles(m, func(string) bool { return false }); len(none) != 0 {
		t.Fatalf("files of a stream that is no table: %+v", none)
	}
	if err := recovery.FinishTables(ctx, r.iceberg(), m, func(s string) bool { return s == "orders" }); err != nil {
		t.Fatalf("table commit from the manifest: %v", err)
	}
	checkDisplacedScan(t, r, to)
}

// displacedFile writes n1's checkpoint 1 of one record of orders (region
// r0) as one part file, moves it to its displaced name, and returns the
// file as the commit displaced it and its path.
func (r *rig) displacedFile() (committer.File, string) {
	r.t.Helper()
	files := r.files("orders", "n1", 1, recs(0, 1))
	if len(files) != 1 {
		r.t.Fatalf("%d files, want 1", len(files))
	}
	f := files[0]
	f.DisplacedFrom, f.Final = f.Final, layout.DisplacedName(f.Final)
	to := filepath.Join(r.dest.Dest, f.Final)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(r.dest.Dest, f.DisplacedFrom), to); err != nil {
		r.t.Fatal(err)
	}
	return f, to
}

// checkDisplacedScan checks that orders' table plans the displaced file
// to for a scan of its region r0, and none for r1.
func checkDisplacedScan(t *testing.T, r *rig, to string) {
	t.Helper()
	ctx := context.Background()
	_, cur := r.read("orders")
	loc := "file://" + filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version))
	tbl, err := icetable.NewFromLocation(ctx, []string{"t"}, loc, func(context.Context) (iceio.IO, error) { return iceio.LocalFS{}, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for region, want := range map[string]int{"r0": 1, "r1": 0} {
		tasks, err := tbl.Scan(icetable.WithRowFilter(iceberg.EqualTo(iceberg.Reference("region"), region))).PlanFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != want {
			t.Fatalf("a scan of region %s plans %d files, want %d", region, len(tasks), want)
		}
		if want == 1 && tasks[0].File.FilePath() != "file://"+to {
			t.Fatalf("planned %s, want the displaced file %s", tasks[0].File.FilePath(), to)
		}
	}
}
