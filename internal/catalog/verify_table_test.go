package catalog

import (
	"context"
	"encoding/json"
	"maps"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/stagetest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// tbTable returns an Iceberg committer of stream tb's table in d: Parquet
// with a required ts, partitioned by partition.
func (d *dest) tbTable(partition string) *table.Iceberg {
	conf := streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Partition: partition,
		Schema: &streamconf.Schema{Fields: []streamconf.Field{{Name: "ts", Type: streamconf.TypeTimestamp, Required: true}}}}
	return &table.Iceberg{Dest: d.local, Location: "file://" + tDest,
		Config: func(string) (streamconf.Config, bool) { return conf, true }}
}

// commitTable commits the files of stream tb at paths (of 3 records, 10
// bytes each) to ice's table as node's checkpoint ckpt.
func (d *dest) commitTable(ice *table.Iceberg, node string, ckpt uint64, paths []string) {
	d.t.Helper()
	var files []committer.File
	for _, p := range paths {
		files = append(files, committer.File{Stream: "tb", Final: p, Bytes: 10, Records: 3, Table: streamconf.TableIceberg})
	}
	if err := ice.Commit(d.t.Context(), node, ckpt, files); err != nil {
		d.t.Fatal(err)
	}
}

// verify returns the report of Verify over all of d.
func (d *dest) verify() *VerifyReport {
	d.t.Helper()
	rep, err := d.catalog(Config{}).Verify(d.t.Context(), nil)
	if err != nil {
		d.t.Fatal(err)
	}
	return rep
}

// TestVerifyTable: verify checks an Iceberg table against the manifests:
// a file in the table twice, or in the table and in no manifest, is a
// problem; the table's metadata files are not strays.
func TestVerifyTable(t *testing.T) {
	d := newDest(t)
	ice := d.tbTable("dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}")
	first := d.commit("n1", 1, 3, "tb")
	d.commitTable(ice, "n1", 1, first)
	if rep := d.verify(); len(rep.Problems) != 0 || rep.Tables != 1 || rep.TableFiles != 1 {
		t.Fatalf("a sound table: %+v", rep)
	}
	// The same file added again by another checkpoint: read twice.
	d.commitTable(ice, "n1", 2, first)
	rep := d.verify()
	if len(rep.Problems) != 1 || rep.Problems[0].Path != first[0] || !strings.Contains(rep.Problems[0].What, "twice") {
		t.Fatalf("a file added twice: %+v", rep.Problems)
	}
	// A file in the table that no manifest names.
	d.write("tb/dt=2026-11-29/hour=09/part-n9-00000000000000000001-0000.ndjson", []byte("{}\n"))
	d.commitTable(ice, "n9", 1, []string{"tb/dt=2026-11-29/hour=09/part-n9-00000000000000000001-0000.ndjson"})
	rep = d.verify()
	var found bool
	for _, p := range rep.Problems {
		if strings.Contains(p.What, "but in no manifest") {
			found = true
		}
	}
	if !found {
		t.Fatalf("a table file in no manifest: %+v", rep.Problems)
	}
	// A planted version that does not parse: passed over, and reported.
	d.write("tb/metadata/v9.metadata.json", []byte("garbage"))
	d.write("tb/metadata/version-hint.text", []byte("9"))
	found = false
	rep = d.verify()
	for _, p := range rep.Problems {
		if p.Path == "tb/metadata/v9.metadata.json" && strings.Contains(p.What, "does not parse") {
			found = true
		}
	}
	if !found {
		t.Fatalf("planted table metadata not reported: %+v", rep.Problems)
	}
}

// TestStreamsSkipTableMetadata: a table stream's file count is its data
// files, not its metadata files.
func TestStreamsSkipTableMetadata(t *testing.T) {
	d := newDest(t)
	d.commit("n1", 1, 3, "tb")
	d.write("tb/metadata/v1.metadata.json", []byte("{}"))
	d.write("tb/metadata/version-hint.text", []byte("1"))
	d.write("tb/metadata/eosink-n1-00000000000000000001-m0.avro", []byte("x"))
	out, _, err := d.catalog(Config{}).Streams(t.Context(), "", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].Files != 1 || out[0].Unknown != 0 {
		t.Fatalf("streams %+v, want tb with its one data file", out)
	}
}

// TestVerifyManifestsInTable: verify checks the manifests against the
// table too: every file of a table stream that a committed manifest
// names (from the node's first checkpoint in the table on) is in the
// table, added by its checkpoint's own snapshot. Failed before: a
// checkpoint whose table commit was skipped (a planted committed mark)
// and files appended by another checkpoint's snapshot went unreported.
func TestVerifyManifestsInTable(t *testing.T) {
	d := newDest(t)
	ice := d.tbTable("dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}")
	// Before the table: checkpoint 1 of n1, not in it, and not expected.
	d.commit("n1", 1, 3, "tb")
	two := d.commit("n1", 2, 3, "tb")
	d.commitTable(ice, "n1", 2, two)
	if p := d.verify().Problems; len(p) != 0 {
		t.Fatalf("a sound table: %+v", p)
	}
	// Checkpoint 3 committed, its table commit skipped.
	three := d.commit("n1", 3, 3, "tb")
	p := d.verify().Problems
	if len(p) != 1 || p[0].Path != three[0] || !strings.Contains(p[0].What, "in no snapshot of table tb") {
		t.Fatalf("a committed file in no snapshot: %+v", p)
	}
	// Appended by the snapshot of another checkpoint (4) instead.
	d.commitTable(ice, "n1", 4, three)
	p = d.verify().Problems
	if len(p) != 1 || p[0].Path != three[0] || !strings.Contains(p[0].What, "not by checkpoint 3's own") {
		t.Fatalf("a committed file added by another checkpoint's snapshot: %+v", p)
	}
}

// TestVerifySnapshotIDTaken: when the id a checkpoint's snapshot derives
// from its name was taken by a planted snapshot, the commit takes another
// (internal/table); verify goes by the snapshot's summary then, and finds
// nothing wrong with the checkpoint's files.
func TestVerifySnapshotIDTaken(t *testing.T) {
	d := newDest(t)
	ice := d.tbTable("data")
	one := d.commit("n1", 1, 3, "tb")
	d.commitTable(ice, "n1", 1, one)
	// v2: v1 with a snapshot holding checkpoint 2's id, of no checkpoint.
	b, err := afero.ReadFile(d.fs, path.Join(tDest, "tb/metadata/v1.metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	var snaps []map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || json.Unmarshal(m["snapshots"], &snaps) != nil {
		t.Fatal("v1 does not decode")
	}
	s := maps.Clone(snaps[0])
	s["snapshot-id"] = json.RawMessage(strconv.FormatInt(table.SnapshotID("tb", "n1", 2), 10))
	s["summary"] = json.RawMessage(`{"operation":"append"}`)
	delete(s, "parent-snapshot-id")
	m["snapshots"], _ = json.Marshal(append(snaps, s))
	v2, _ := json.Marshal(m)
	d.write("tb/metadata/v2.metadata.json", v2)
	two := d.commit("n1", 2, 3, "tb")
	d.commitTable(ice, "n1", 2, two)
	if rep := d.verify(); len(rep.Problems) != 0 || rep.TableFiles != 2 {
		t.Fatalf("verify: %+v, want no problem and 2 table files", rep)
	}
}

// TestVerifyEncodedFiles: verify decodes compressed and Parquet files and
// counts their records. Fails before: it counted '\n' bytes of the stored
// bytes, so every correct zstd or Parquet file was reported.
func TestVerifyEncodedFiles(t *testing.T) {
	const dest, stg = "/dest", "/staging"
	schema := &streamconf.Schema{Fields: []streamconf.Field{{Name: "a", Type: streamconf.TypeInt64, Required: true}}}
	cases := []struct {
		ext string
		enc format.Encoding
	}{
		{"ndjson.zst", format.Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}},
		{"ndjson.gz", format.Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip}},
		{"parquet", format.Encoding{Format: streamconf.FormatParquet, Schema: schema}},
	}
	for _, c := range cases {
		t.Run(c.ext, func(t *testing.T) {
			for _, lie := range []int64{0, 1} { // the manifest's record count is right, then one too many
				fs := afero.NewMemMapFs()
				_ = fs.MkdirAll(stg, 0o755)
				var recs []string
				for i := range 50 {
					recs = append(recs, `{"a":`+strings.Repeat("1", 1+i%5)+`}`)
				}
				enc := stagetest.Encode(t, fs, path.Join(stg, "t"+staging.Suffix), recs, c.enc)
				final := "s/x=1/" + layout.PartName("n1", 1, 0, c.ext)
				_ = fs.MkdirAll(path.Join(dest, "s/x=1"), 0o755)
				if err := fs.Rename(enc.Temp, path.Join(dest, final)); err != nil {
					t.Fatal(err)
				}
				ck := &recovery.Checkpoint{ID: 1, Files: []committer.File{{Stream: "s", Final: final, Bytes: enc.Bytes, Records: enc.Records + lie, CRC32C: enc.CRC32C}}}
				body, err := recovery.BuildManifest("n1", ck)
				if err != nil {
					t.Fatal(err)
				}
				_ = fs.MkdirAll(path.Join(dest, "_manifests/n1"), 0o755)
				if err := afero.WriteFile(fs, path.Join(dest, layout.ManifestName("n1", 1)), body, 0o644); err != nil {
					t.Fatal(err)
				}
				cat, err := New(Config{Files: local.New(fs, dest, stg)})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := cat.Verify(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				js, _ := json.Marshal(rep.Problems)
				switch {
				case lie == 0 && (len(rep.Problems) != 0 || rep.Records != 50):
					t.Fatalf("a correct %s file: %d records, problems %s", c.ext, rep.Records, js)
				case lie == 1 && (len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].What, "decodes to 50 records, manifest says 51")):
					t.Fatalf("a manifest claiming 51 records: problems %s", js)
				}
			}
		})
	}
}
