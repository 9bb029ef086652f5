package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckerCatches makes sure the destination checker the end-to-end
// tests rely on sees each kind of broken promise: a checker that passes
// everything would make every other test here pass too.
func TestCheckerCatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const dir1 = "clicks/dt=2026-11-29/hour=09"
	batch := func(p string, q int64, n int) []byte {
		return ndjson(makeRecords(rng, batchKey{p, "clicks", q}, n, 8))
	}
	type file struct {
		path string
		data []byte
	}
	// A valid destination: checkpoint 1 holds p/0 and p/1, checkpoint 2 p/2.
	base := func() ([]file, map[batchKey]int) {
		f1 := append(batch("p", 0, 3), batch("p", 1, 2)...)
		f2 := batch("p", 2, 4)
		files := []file{
			{dir1 + "/part-n-00000000000000000001-0000.ndjson", f1},
			{dir1 + "/part-n-00000000000000000002-0000.ndjson", f2},
		}
		want := map[batchKey]int{{"p", "clicks", 0}: 3, {"p", "clicks", 1}: 2, {"p", "clicks", 2}: 4}
		return files, want
	}
	write := func(t *testing.T, files []file, manifests map[uint64][]file, ranges map[string][][2]int64) string {
		root := t.TempDir()
		for _, f := range files {
			p := filepath.Join(root, filepath.FromSlash(f.path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for id, fs := range manifests {
			var m manifestFile
			m.Checkpoint, m.Node = id, "n"
			for _, f := range fs {
				m.Files = append(m.Files, struct {
					Path      string                `json:"path"`
					Stream    string                `json:"stream"`
					Bytes     int64                 `json:"bytes"`
					Records   int64                 `json:"records"`
					CRC32C    string                `json:"crc32c"`
					Producers map[string][][2]int64 `json:"producers"`
				}{Path: f.path, Stream: "clicks", Bytes: int64(len(f.data)), Records: int64(strings.Count(string(f.data), "\n")),
					Producers: map[string][][2]int64{"p": ranges[f.path]}})
			}
			data, _ := json.Marshal(m)
			p := filepath.Join(root, "_manifests", "n", fmt.Sprintf("%020d.json", id))
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	ranges := map[string][][2]int64{
		dir1 + "/part-n-00000000000000000001-0000.ndjson": {{0, 1}},
		dir1 + "/part-n-00000000000000000002-0000.ndjson": {{2, 2}},
	}

	t.Run("valid", func(t *testing.T) {
		files, want := base()
		root := write(t, files, map[uint64][]file{1: files[:1], 2: files[1:]}, ranges)
		if r := checkDest(t.Context(), localDest{root}, want, true); len(r.Problems) > 0 || r.Batches != 3 || r.Records != 9 {
			t.Fatalf("valid destination: %d batches, %d records, problems %q", r.Batches, r.Records, r.Problems)
		}
	})

	for _, tc := range []struct {
		name   string
		mutate func(files []file, want map[batchKey]int) ([]file, map[uint64][]file)
		exact  bool
		expect string
	}{
		{"missing batch", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			want[batchKey{"p", "clicks", 3}] = 1
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "sent but not committed"},
		{"extra batch", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			delete(want, batchKey{"p", "clicks", 2})
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "no producer sent"},
		{"duplicate batch", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			files[1].data = append(batch("p", 1, 2), files[1].data...)
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "more than once"},
		{"partial file", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			m := map[uint64][]file{1: {files[0]}, 2: files[1:]}
			files[0].data = files[0].data[:len(files[0].data)-10]
			return files, m
		}, true, "I1"},
		{"temp file", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			return append(files, file{dir1 + "/part-n-00000000000000000003-0000.ndjson.inprogress", batch("q", 0, 1)}), map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "temp file"},
		{"unnamed file", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			return files, map[uint64][]file{1: files[:1]}
		}, true, "named by 0 manifests"},
		{"split batch", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			lines := strings.SplitAfter(string(files[0].data), "\n")
			files[0].data = []byte(lines[0] + lines[3] + lines[1] + lines[2] + lines[4])
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "cut after"},
		{"out of order", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			files[0].data, files[1].data = files[1].data, files[0].data
			ranges[files[0].path], ranges[files[1].path] = [][2]int64{{2, 2}}, [][2]int64{{0, 1}}
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "later checkpoint"},
		{"over-claiming range", func(files []file, want map[batchKey]int) ([]file, map[uint64][]file) {
			ranges[files[0].path] = [][2]int64{{0, 2}}
			return files, map[uint64][]file{1: files[:1], 2: files[1:]}
		}, true, "producer p seqs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := map[string][][2]int64{}
			for k, v := range ranges {
				saved[k] = v
			}
			defer func() { ranges = saved }()
			files, want := base()
			files, manifests := tc.mutate(files, want)
			root := write(t, files, manifests, ranges)
			r := checkDest(t.Context(), localDest{root}, want, tc.exact)
			for _, p := range r.Problems {
				if strings.Contains(p, tc.expect) {
					return
				}
			}
			t.Fatalf("no problem containing %q; problems: %q", tc.expect, r.Problems)
		})
	}
}
