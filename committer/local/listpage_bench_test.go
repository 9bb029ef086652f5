package local

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/afero"
)

// benchFiles is the size of the folder BenchmarkListPage100k pages.
const benchFiles = 100_000

// BenchmarkListPage100k takes pages of 1,000 files from a real directory
// of 100,000 files on disk (OsFs): the first page, a page deep in (by
// cursor), and a page of 10; "cold" takes each page with a new committer
// (nothing cached). The cost of a page should follow the page, not the
// folder.
func BenchmarkListPage100k(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(root, "dest", "clicks", "dt=2026-11-29", "hour=09")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range benchFiles {
		name := fmt.Sprintf("part-n1-%020d-%04d.ndjson", i/1000+1, i%1000)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour) // as a folder of an earlier hour
	if err := os.Chtimes(dir, old, old); err != nil {
		b.Fatal(err)
	}
	newLocal := func() *Local {
		return New(afero.NewOsFs(), filepath.Join(root, "dest"), filepath.Join(root, "staging"))
	}
	l := newLocal()
	deep := fmt.Sprintf("clicks/dt=2026-11-29/hour=09/part-n1-%020d-%04d.ndjson", 71, 499)
	for _, tc := range []struct {
		name, after string
		limit       int
		cold        bool
	}{{"cold-deep-1000", deep, 1000, true}, {"first-1000", "", 1000, false}, {"deep-1000", deep, 1000, false}, {"deep-10", deep, 10, false}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if tc.cold {
					l = newLocal()
				}
				page, err := l.ListPage(b.Context(), "clicks/", tc.after, tc.limit)
				if err != nil || len(page) != tc.limit {
					b.Fatalf("%d files, %v", len(page), err)
				}
			}
		})
	}
}
