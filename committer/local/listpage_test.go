package local

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/spf13/afero"
)

// osDest makes a destination on disk with files at the given paths, every
// directory's modification time an hour ago (so listings are cached).
func osDest(t *testing.T, paths []string) (*Local, string) {
	t.Helper()
	root := t.TempDir()
	dest := filepath.Join(root, "dest")
	for _, p := range paths {
		full := filepath.Join(dest, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	age(t, dest)
	return New(afero.NewOsFs(), dest, filepath.Join(root, "staging")), dest
}

// age sets every directory under dest an hour into the past.
func age(t *testing.T, dest string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func paths(es []committer.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return out
}

// TestListPageMatchesList: on disk, with the directory listings cached,
// paging any prefix from any cursor gives List's files in List's order,
// each once, and a file added later shows on the next page taken.
func TestListPageMatchesList(t *testing.T) {
	var files []string
	for _, s := range []string{"a", "a.b", "ab", "b"} {
		for h := range 3 {
			for i := range 7 {
				files = append(files, fmt.Sprintf("%s/hour=%02d/part-n1-%020d-%04d.ndjson", s, h, i, i))
			}
		}
	}
	files = append(files, "top.txt", "a/x", "a/hour=00/part")
	l, dest := osDest(t, files)
	ctx := t.Context()
	for _, prefix := range []string{"", "a", "a/", "a/hour=01/", "a/hour=01/part-n1-0000", "ab/", "zzz"} {
		all, err := l.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 3, 1000} {
			for round := range 2 { // cold, then warm cache
				var got []string
				after := ""
				for {
					page, err := l.ListPage(ctx, prefix, after, limit)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, paths(page)...)
					if len(page) < limit {
						break
					}
					after = page[len(page)-1].Path
				}
				if !slices.Equal(got, paths(all)) {
					t.Fatalf("prefix %q limit %d round %d: paged %v, list %v", prefix, limit, round, got, paths(all))
				}
			}
		}
		// From a cursor in the middle, too, and one not naming a file.
		for _, after := range []string{"a/hour=01/part-n1-00000000000000000003-0003.ndjson", "a/hour=01/", "a/hour=01/p", "a0"} {
			page, err := l.ListPage(ctx, prefix, after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, e := range all {
				if e.Path > after {
					want = append(want, e.Path)
				}
			}
			if !slices.Equal(paths(page), want) {
				t.Fatalf("prefix %q after %q: %v, want %v", prefix, after, paths(page), want)
			}
		}
	}

	// The listings are cached now; a file added (which moves its
	// directory's modification time) and one removed show at once.
	added := "a/hour=01/part-n1-00000000000000000003-0003.ndjson.new"
	if err := os.WriteFile(filepath.Join(dest, added), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed := "a/hour=01/part-n1-00000000000000000004-0004.ndjson"
	if err := os.Remove(filepath.Join(dest, removed)); err != nil {
		t.Fatal(err)
	}
	page, err := l.ListPage(ctx, "a/hour=01/", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(page); !slices.Contains(got, added) || slices.Contains(got, removed) || len(got) != 7 {
		t.Fatalf("after adding %s and removing %s: %v", added, removed, got)
	}
}

// TestNameCacheBounded: the directory cache holds at most its bound of
// names, the least recently used directory going first, and never a
// directory larger than the bound.
func TestNameCacheBounded(t *testing.T) {
	c := newNameCache(10)
	mod := time.Unix(1, 0)
	c.put("/a", mod, make([]string, 4))
	c.put("/b", mod, make([]string, 4))
	if _, ok := c.get("/a", mod); !ok {
		t.Fatal("a not cached")
	}
	c.put("/c", mod, make([]string, 4)) // 12 > 10: b, the least recently used, goes
	if _, ok := c.get("/b", mod); ok || c.names != 8 {
		t.Fatalf("b kept, %d names", c.names)
	}
	c.put("/big", mod, make([]string, 11))
	if _, ok := c.get("/big", mod); ok || c.names != 8 {
		t.Fatalf("a directory over the bound was cached, %d names", c.names)
	}
	if _, ok := c.get("/a", mod.Add(time.Second)); ok || c.names != 4 {
		t.Fatalf("a changed directory was served from the cache, %d names", c.names)
	}
}

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
