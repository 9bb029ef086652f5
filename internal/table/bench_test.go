package table_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/icebergread"
)

// BenchmarkReadTable measures what a reader pays for a table that took
// one checkpoint per commit for a long time: iceberg-go opening the
// newest metadata and scanning every row, for a table built with
// maintenance off (every snapshot kept, one manifest per checkpoint) and
// on (keep_snapshots 100, manifests merged past 32). The table has
// EOSINK_TABLE_SNAPSHOTS commits (default 100; BENCHMARKS.md has 1000);
// building it is not timed.
//
//	EOSINK_TABLE_SNAPSHOTS=1000 go test ./internal/table -run '^$' -bench ReadTable -benchtime 5x
func BenchmarkReadTable(b *testing.B) {
	n := snapshotsEnv(b, 100)
	for _, maintained := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshots=%d/maintained=%v", n, maintained), func(b *testing.B) {
			r := newRig(b)
			ice := r.iceberg()
			if maintained {
				r.conf.KeepSnapshots = 100
			} else {
				r.conf.KeepSnapshots = n + 1
				ice.MaxManifests = n + 2
			}
			ctx := context.Background()
			built := time.Now()
			for c := 1; c <= n; c++ {
				r.commit(ice, "n1", uint64(c), recs(c, 1))
			}
			b.Logf("built %d commits in %s", n, time.Since(built).Round(time.Millisecond))
			cur, err := table.Load(ctx, r.dest, "orders")
			if err != nil {
				b.Fatal(err)
			}
			loc := "file://" + filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version))
			st, _ := os.Stat(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version)))
			b.Logf("metadata v%d: %d bytes, %d snapshots", cur.Version, st.Size(), len(cur.Metadata.Snapshots()))
			b.ResetTimer()
			for b.Loop() {
				tb, err := icebergread.Read(ctx, iceio.LocalFS{}, loc)
				if err != nil {
					b.Fatal(err)
				}
				if len(tb.Rows) != n {
					b.Fatalf("%d rows, want %d", len(tb.Rows), n)
				}
			}
		})
	}
}

// BenchmarkCommit measures one table commit on a local destination (real
// fsyncs): the extra latency a table stream adds to each checkpoint, on a
// table of 100 snapshots (maintenance on, as it runs). The data files are
// written before the timer runs.
//
//	go test ./internal/table -run '^$' -bench Commit -benchtime 200x
func BenchmarkCommit(b *testing.B) {
	r := newRig(b)
	ice := r.iceberg()
	ctx := context.Background()
	c := uint64(0)
	for range 100 {
		c++
		r.commit(ice, "n1", c, recs(int(c), 3))
	}
	files := make([][]committer.File, b.N)
	for i := range files {
		files[i] = r.files("orders", "n1", c+uint64(i)+1, recs(i, 3))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ { // not b.Loop: the files are made for b.N
		if err := ice.Commit(ctx, "n1", c+uint64(i)+1, files[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaintenance measures reading a table of N one-checkpoint
// snapshots before and after one maintained commit: before, the metadata
// holds N snapshots and the current manifest list N manifests, as N
// commits without expiry or merging would leave it; after, the next
// commit (keep_snapshots 100, merging past 32 manifests) has expired and
// merged them. The unmaintained table is written in one go (N commits
// through Commit would cost O(N²): each rewrites all the metadata): N
// data files, N manifests, one metadata file of N snapshots whose current
// one lists them all (the older snapshots' lists are not read by a scan
// and all point at the first). EOSINK_TABLE_SNAPSHOTS sets N (default
// 500; BENCHMARKS.md has 10000).
//
//	EOSINK_TABLE_SNAPSHOTS=10000 go test ./internal/table -run '^$' -bench Maintenance -benchtime 3x -timeout 60m
func BenchmarkMaintenance(b *testing.B) {
	n := snapshotsEnv(b, 500)
	r := newRig(b)
	ice := r.iceberg()
	ctx := context.Background()
	built := time.Now()
	buildUnmaintained(b, r, ice, n)
	b.Logf("built an unmaintained table of %d snapshots in %s", n, time.Since(built).Round(time.Millisecond))
	read := func(b *testing.B, rows int) {
		cur, err := table.Load(ctx, r.dest, "orders")
		if err != nil {
			b.Fatal(err)
		}
		name := filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version))
		st, _ := os.Stat(name)
		b.Logf("metadata v%d: %d bytes, %d snapshots", cur.Version, st.Size(), len(cur.Metadata.Snapshots()))
		b.ResetTimer()
		for b.Loop() {
			tb, err := icebergread.Read(ctx, iceio.LocalFS{}, "file://"+name)
			if err != nil {
				b.Fatal(err)
			}
			if len(tb.Rows) != rows {
				b.Fatalf("%d rows, want %d", len(tb.Rows), rows)
			}
		}
	}
	plan := func(b *testing.B, files int) {
		cur, err := table.Load(ctx, r.dest, "orders")
		if err != nil {
			b.Fatal(err)
		}
		loc := "file://" + filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version))
		b.ResetTimer()
		for b.Loop() {
			got, err := icebergread.Plan(ctx, iceio.LocalFS{}, loc)
			if err != nil {
				b.Fatal(err)
			}
			if got != files {
				b.Fatalf("%d files planned, want %d", got, files)
			}
		}
	}
	b.Run(fmt.Sprintf("snapshots=%d/before/plan", n), func(b *testing.B) { plan(b, n) })
	b.Run(fmt.Sprintf("snapshots=%d/before/read", n), func(b *testing.B) { read(b, n) })
	r.conf.KeepSnapshots = 100
	began := time.Now()
	r.commit(ice, "n1", uint64(n+1), recs(n, 1))
	b.Logf("the maintained commit took %s", time.Since(began).Round(time.Millisecond))
	b.Run(fmt.Sprintf("snapshots=%d/after/plan", n), func(b *testing.B) { plan(b, n+1) })
	b.Run(fmt.Sprintf("snapshots=%d/after/read", n), func(b *testing.B) { read(b, n+1) })
}

// buildUnmaintained writes the table BenchmarkMaintenance starts from.
func buildUnmaintained(b *testing.B, r *rig, ice *table.Iceberg, n int) {
	ctx := context.Background()
	r.commit(ice, "n1", 1, recs(0, 1))
	cur, err := table.Load(ctx, r.dest, "orders")
	if err != nil {
		b.Fatal(err)
	}
	// The table is built with iceberg-go's own builder (tests may import
	// its table package; the binary does not).
	mb, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version)))
	if err != nil {
		b.Fatal(err)
	}
	md, err := icetable.ParseMetadataBytes(mb)
	if err != nil {
		b.Fatal(err)
	}
	loc := "file://" + r.dest.Dest
	bl, err := icetable.MetadataBuilderFromBase(md, loc+"/"+layout.TableMetadataName("orders", 1))
	if err != nil {
		b.Fatal(err)
	}
	first := md.CurrentSnapshot()
	listB, err := os.ReadFile(strings.TrimPrefix(first.ManifestList, "file://"))
	if err != nil {
		b.Fatal(err)
	}
	manifests, err := iceberg.ReadManifestList(bytes.NewReader(listB))
	if err != nil {
		b.Fatal(err)
	}
	spec, schema := md.PartitionSpec(), md.CurrentSchema()
	parent := first.SnapshotID
	for c := 2; c <= n; c++ {
		files := r.files("orders", "n1", uint64(c), recs(c-1, 1))
		id := table.SnapshotID("orders", "n1", uint64(c))
		var buf bytes.Buffer
		w, err := iceberg.NewManifestWriter(2, &buf, spec, schema, id)
		if err != nil {
			b.Fatal(err)
		}
		tt, _ := r.conf.TableTemplate()
		vals, _ := tt.Values(strings.TrimPrefix(filepath.Dir(files[0].Final), "orders/"))
		day, _ := time.Parse(time.DateOnly, vals[0])
		hour, _ := strconv.Atoi(vals[1])
		data := map[int]any{1000: int32(day.Unix()/86400)*24 + int32(hour), 1001: vals[2]}
		df, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, loc+"/"+files[0].Final, iceberg.ParquetFile, data, nil, nil, files[0].Records, files[0].Bytes)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &id, nil, nil, df.Build())); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		mname := layout.TableManifestName("orders", "n1", uint64(c))
		if err := os.WriteFile(filepath.Join(r.dest.Dest, mname), buf.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
		seq := int64(c)
		mf := iceberg.NewManifestFile(2, loc+"/"+mname, int64(buf.Len()), int32(spec.ID()), id).
			SequenceNum(seq, seq).AddedFiles(1).AddedRows(files[0].Records).Build()
		manifests = append([]iceberg.ManifestFile{mf}, manifests...)
		list := first.ManifestList
		if c == n {
			var lb bytes.Buffer
			p := parent
			if err := iceberg.WriteManifestList(2, &lb, id, &p, &seq, 0, manifests); err != nil {
				b.Fatal(err)
			}
			lname := layout.TableAvroName("orders", "snap", id, "bench")
			if err := os.WriteFile(filepath.Join(r.dest.Dest, lname), lb.Bytes(), 0o644); err != nil {
				b.Fatal(err)
			}
			list = loc + "/" + lname
		}
		p := parent
		snap := icetable.Snapshot{SnapshotID: id, ParentSnapshotID: &p, SequenceNumber: seq, TimestampMs: time.Now().UnixMilli(),
			ManifestList: list, Summary: &icetable.Summary{Operation: icetable.OpAppend, Properties: map[string]string{
				table.SummaryNode: "n1", table.SummaryCheckpoint: strconv.Itoa(c)}}}
		if err := bl.AddSnapshot(&snap); err != nil {
			b.Fatal(err)
		}
		if err := bl.SetSnapshotRef(icetable.MainBranch, id, icetable.BranchRef); err != nil {
			b.Fatal(err)
		}
		parent = id
	}
	md2, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(md2)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 2)), body, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableHintName("orders")), []byte("2"), 0o644); err != nil {
		b.Fatal(err)
	}
}

// snapshotsEnv is EOSINK_TABLE_SNAPSHOTS, the number of commits a benchmark
// builds its table of, else def.
func snapshotsEnv(b *testing.B, def int) int {
	v := os.Getenv("EOSINK_TABLE_SNAPSHOTS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
