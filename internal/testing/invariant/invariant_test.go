package invariant

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

const dir1 = "clicks/dt=2026-11-29/hour=09"

type file struct {
	path string
	data []byte
}

func part(ckpt uint64) string { return dir1 + "/" + layout.PartName("n", ckpt, 0, "ndjson") }

// valid is a destination that holds every promise: checkpoint 1 holds p/0
// and p/1, checkpoint 2 holds p/2.
func valid() (files []file, manifests map[uint64][]int, ranges map[string]committer.SeqRanges, must map[BatchID]bool) {
	files = []file{
		{part(1), append(Batch(BatchID{"p", "clicks", 0}, 3), Batch(BatchID{"p", "clicks", 1}, 2)...)},
		{part(2), Batch(BatchID{"p", "clicks", 2}, 4)},
	}
	manifests = map[uint64][]int{1: {0}, 2: {1}}
	ranges = map[string]committer.SeqRanges{part(1): {{0, 1}}, part(2): {{2, 2}}}
	must = map[BatchID]bool{{"p", "clicks", 0}: true, {"p", "clicks", 1}: true, {"p", "clicks", 2}: true}
	return files, manifests, ranges, must
}

// write lays files and their manifests out under /dest; manifests maps a
// checkpoint to indexes into files; ranges are the manifests' ranges. A
// file with nil data is only in its manifest; records, when given,
// overrides a file's record count (compressed files).
func write(t *testing.T, files []file, manifests map[uint64][]int, ranges map[string]committer.SeqRanges, records ...map[string]int) afero.Fs {
	t.Helper()
	fs := afero.NewMemMapFs()
	for _, f := range files {
		if f.data == nil {
			continue // named by its manifest, missing from the destination
		}
		if err := afero.WriteFile(fs, path.Join("/dest", f.path), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for id, idx := range manifests {
		var m manifest
		m.Checkpoint, m.Node = id, "n"
		m.Files = make([]manifestEntry, len(idx))
		for i, j := range idx {
			f := files[j]
			e := &m.Files[i]
			e.Path, e.Stream, e.Bytes = f.path, "clicks", int64(len(f.data))
			e.Records = int64(strings.Count(string(f.data), "\n"))
			if len(records) > 0 {
				if n, ok := records[0][f.path]; ok {
					e.Records = int64(n) // of the decoded file
				}
			}
			e.CRC32C = fmt.Sprintf("%08x", crc32.Checksum(f.data, castagnoli))
			if rg, ok := ranges[f.path]; ok {
				e.Producers = map[string]committer.SeqRanges{"p": rg}
			}
		}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := afero.WriteFile(fs, path.Join("/dest", layout.ManifestName("n", id)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fs
}

func TestCheckValid(t *testing.T) {
	files, manifests, ranges, must := valid()
	files = append(files, file{"_staging/upload-1", []byte("x")}, file{"_nodes/n.json", []byte("{}")})
	c := &Checker{FS: write(t, files, manifests, ranges), Dest: "/dest"}
	r := c.Check(Expect{Must: must, Exact: true})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if len(r.Batches) != 3 || r.Records != 9 || r.Files != 2 || r.Manifests != 2 || r.Nodes["n"] != 2 || len(r.Staging) != 1 {
		t.Fatalf("report: %d batches, %d records, %d files, %d manifests, nodes %v, staging %v", len(r.Batches), r.Records, r.Files, r.Manifests, r.Nodes, r.Staging)
	}
}

// TestCheckCatches seeds one broken promise at a time into a valid
// destination: a checker that passes everything would make every test
// that relies on it pass too.
func TestCheckCatches(t *testing.T) {
	type dest struct {
		files     []file
		manifests map[uint64][]int
		ranges    map[string]committer.SeqRanges
		exp       Expect
	}
	for _, tc := range []struct {
		name   string
		mutate func(d *dest)
		expect string
	}{
		{"missing batch", func(d *dest) { d.exp.Must[BatchID{"p", "clicks", 3}] = true }, "p/clicks/3 appears 0 times"},
		{"extra batch", func(d *dest) { delete(d.exp.Must, BatchID{"p", "clicks", 2}) }, "p/clicks/2 appears but was never expected"},
		{"aborted batch", func(d *dest) {
			delete(d.exp.Must, BatchID{"p", "clicks", 2})
			d.exp.MustNot = map[BatchID]bool{{"p", "clicks", 2}: true}
		}, "I3: batch p/clicks/2 of an aborted checkpoint"},
		{"duplicate batch", func(d *dest) {
			d.files[1].data = append(Batch(BatchID{"p", "clicks", 1}, 2), d.files[1].data...)
		}, "p/clicks/1 appears 2 times"},
		{"empty file", func(d *dest) { d.files[1].data = []byte{} }, "empty data file"},
		{"partial file", func(d *dest) {
			d.files[0].data = d.files[0].data[:len(d.files[0].data)-10]
		}, "does not end with a newline"},
		{"cut batch", func(d *dest) {
			// the manifest agrees with the file, whose last batch lost a record
			d.files[0].data = append(Batch(BatchID{"p", "clicks", 0}, 3), Record(BatchID{"p", "clicks", 1}, 0, 2)...)
		}, "cut after record 0 of 2"},
		{"temp file", func(d *dest) {
			d.files = append(d.files, file{part(3) + ".inprogress", Batch(BatchID{"q", "clicks", 0}, 1)})
		}, "I1: temp file"},
		{"unnamed file", func(d *dest) { delete(d.manifests, 2) }, "in no manifest"},
		{"named twice", func(d *dest) { d.manifests[2] = []int{1, 0} }, "named by 2 manifests"},
		{"missing file", func(d *dest) { d.files[1].data = nil }, "is missing"},
		{"stray object", func(d *dest) { d.files = append(d.files, file{"clicks/notes.txt", []byte("hi\n")}) }, "unexpected object"},
		{"stray manifest", func(d *dest) { d.files = append(d.files, file{"_manifests/n/x.json", []byte("{}")}) }, "unexpected name under _manifests/"},
		{"split batch", func(d *dest) {
			lines := strings.SplitAfter(string(d.files[0].data), "\n")
			d.files[0].data = []byte(lines[0] + lines[3] + lines[1] + lines[2] + lines[4])
		}, "cut after"},
		{"record counts disagree", func(d *dest) {
			d.files[1].data = []byte(strings.Replace(string(d.files[1].data), `"i":1,"n":4`, `"i":1,"n":5`, 1))
		}, "record 1 of 5 follows record 0 of 4"},
		{"wrong stream", func(d *dest) {
			d.files[1].data = Batch(BatchID{"p", "views", 2}, 4)
			d.exp.Must[BatchID{"p", "views", 2}] = true
			delete(d.exp.Must, BatchID{"p", "clicks", 2})
		}, `record of stream "views" in a file of stream "clicks"`},
		{"out of order across checkpoints", func(d *dest) {
			d.files[0].data, d.files[1].data = d.files[1].data, d.files[0].data
			d.ranges[part(1)], d.ranges[part(2)] = committer.SeqRanges{{2, 2}}, committer.SeqRanges{{0, 1}}
		}, "later checkpoint"},
		{"out of order in a file", func(d *dest) {
			d.files[0].data = append(Batch(BatchID{"p", "clicks", 1}, 2), Batch(BatchID{"p", "clicks", 0}, 3)...)
		}, "seq 0 after seq 1 in the same file"},
		{"over-claiming range", func(d *dest) { d.ranges[part(1)] = committer.SeqRanges{{0, 2}} }, "producer p has seqs [[0 1]], manifest says [[0 2]]"},
		{"unmerged ranges", func(d *dest) { d.ranges[part(1)] = committer.SeqRanges{{0, 0}, {1, 1}} }, "manifest says [[0 0] [1 1]]"},
		{"ranges missing", func(d *dest) { delete(d.ranges, part(1)) }, "producer p has seqs [[0 1]], manifest says []"},
		{"not a test record", func(d *dest) { d.files[1].data = []byte("{\"user\":\"ada\"}\n") }, "not a test record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, manifests, ranges, must := valid()
			d := &dest{files, manifests, ranges, Expect{Must: must, Exact: true}}
			tc.mutate(d)
			c := &Checker{FS: write(t, d.files, d.manifests, d.ranges), Dest: "/dest", NoEmpty: true}
			r := c.Check(d.exp)
			for _, p := range r.Problems {
				if strings.Contains(p, tc.expect) {
					return
				}
			}
			t.Fatalf("no problem containing %q; problems: %q", tc.expect, r.Problems)
		})
	}
}

// TestCheckAcrossCalls: a file seen committed must stay as it was (I7).
func TestCheckAcrossCalls(t *testing.T) {
	files, manifests, ranges, must := valid()
	fs := write(t, files, manifests, ranges)
	c := &Checker{FS: fs, Dest: "/dest"}
	if err := c.Check(Expect{Must: must}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(path.Join("/dest", part(2))); err != nil {
		t.Fatal(err)
	}
	after := &Checker{FS: fs, Dest: "/dest"}
	after.Inherit(c)
	if r := after.Check(Expect{}); !strings.Contains(fmt.Sprint(r.Problems), "I7: committed file "+part(2)+" was deleted") {
		t.Fatalf("deleted file not reported: %q", r.Problems)
	}
}

// TestCheckForeign: with Foreign, records of the test's own shape are
// checked against the manifest only, and anonymous producers chosen by
// Anonymous carry no ranges.
func TestCheckForeign(t *testing.T) {
	files, manifests, ranges, _ := valid()
	files[1].data = []byte("{\"user\":\"ada\"}\n{\"user\":\"bob\"}\n")
	delete(ranges, part(2))
	c := &Checker{FS: write(t, files, manifests, ranges), Dest: "/dest", Foreign: true}
	if err := c.Check(Expect{}).Err(); err != nil {
		t.Fatal(err)
	}
	c = &Checker{FS: write(t, files, manifests, ranges), Dest: "/dest", Foreign: true, Anonymous: func(p string) bool { return p == "p" }}
	if r := c.Check(Expect{}); !strings.Contains(fmt.Sprint(r.Problems), "producer p has seqs [], manifest says [[0 1]]") {
		t.Fatalf("ranges of an anonymous producer not reported: %q", r.Problems)
	}
}

// TestCheckEncoded: a compressed file is checked by its decoded records;
// a cut one does not decode.
func TestCheckEncoded(t *testing.T) {
	files, manifests, ranges, must := valid()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(files[1].data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	name := dir1 + "/" + layout.PartName("n", 2, 0, "ndjson.gz")
	delete(ranges, files[1].path)
	ranges[name] = committer.SeqRanges{{2, 2}}
	lines := strings.Count(string(files[1].data), "\n")
	files[1] = file{name, gz.Bytes()}
	c := &Checker{FS: write(t, files, manifests, ranges, map[string]int{name: lines}), Dest: "/dest"}
	r := c.Check(Expect{Must: must, Exact: true})
	if err := r.Err(); err != nil || r.Encoded["ndjson.gz"] != 1 {
		t.Fatalf("encoded %v: %v", r.Encoded, err)
	}
	files[1].data = files[1].data[:len(files[1].data)-8]
	c = &Checker{FS: write(t, files, manifests, ranges, map[string]int{name: lines}), Dest: "/dest"}
	if r := c.Check(Expect{}); !strings.Contains(fmt.Sprint(r.Problems), "does not decode") {
		t.Fatalf("cut gzip file not reported: %q", r.Problems)
	}
}

// TestRemovedByOthers: a committed file removed by someone else (a
// retention job), once the checker is told with its content, still
// counts: no missing file, no I7, its batches once; without being told
// it is reported, and so is a removed file that comes back, and a batch
// of it written again elsewhere is a duplicate.
func TestRemovedByOthers(t *testing.T) {
	files, manifests, ranges, must := valid()
	fs := write(t, files, manifests, ranges)
	c := &Checker{FS: fs, Dest: "/dest"}
	if err := c.Check(Expect{Must: must, Exact: true}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll("/dest/" + dir1); err != nil {
		t.Fatal(err)
	}
	if c.Check(Expect{Must: must, Exact: true}).Err() == nil {
		t.Fatal("files removed, the checker not told: no problem reported")
	}
	c.Removed(files[0].path, files[0].data)
	c.Removed(files[1].path, files[1].data)
	if err := c.Check(Expect{Must: must, Exact: true}).Err(); err != nil {
		t.Fatalf("removed files, the checker told: %v", err)
	}
	// Inherited by a checker of another filesystem (a power cut's clone).
	c2 := &Checker{FS: fs, Dest: "/dest"}
	c2.Inherit(c)
	if err := c2.Check(Expect{Must: must, Exact: true}).Err(); err != nil {
		t.Fatalf("removed files, inherited: %v", err)
	}
	// Batch p/2 written again, in a file of checkpoint 3.
	p3 := dir1 + "/" + layout.PartName("n", 3, 0, "ndjson")
	again := write(t, []file{{p3, files[1].data}}, map[uint64][]int{3: {0}}, map[string]committer.SeqRanges{p3: {{2, 2}}})
	for _, name := range []string{p3, layout.ManifestName("n", 3)} {
		data, err := afero.ReadFile(again, "/dest/"+name)
		if err == nil {
			err = afero.WriteFile(fs, "/dest/"+name, data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Check(Expect{Must: must, Exact: true}).Err(); err == nil || !strings.Contains(err.Error(), "p/clicks/2 appears 2 times") {
		t.Fatalf("a removed file's batch written again: %v, want a duplicate", err)
	}
	for _, name := range []string{p3, layout.ManifestName("n", 3)} {
		if err := fs.Remove("/dest/" + name); err != nil {
			t.Fatal(err)
		}
	}
	if err := afero.WriteFile(fs, "/dest/"+files[0].path, files[0].data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(Expect{Must: must, Exact: true}).Err(); err == nil || !strings.Contains(err.Error(), "in the destination again") {
		t.Fatalf("a removed file back: %v", err)
	}
}
