package table_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/internal/layout"
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
	files := r.files("orders", "n1", 1, recs(0, 1)) // region r0
	if len(files) != 1 {
		t.Fatalf("%d files, want 1", len(files))
	}
	f := files[0]
	f.DisplacedFrom, f.Final = f.Final, layout.DisplacedName(f.Final)
	to := filepath.Join(r.dest.Dest, f.Final)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(r.dest.Dest, f.DisplacedFrom), to); err != nil {
		t.Fatal(err)
	}
	ice := r.iceberg()
	if err := ice.Commit(ctx, "n1", 1, append(files[:0:0], f)); err != nil {
		t.Fatalf("commit of a displaced file: %v", err)
	}
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
