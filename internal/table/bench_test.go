package table_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	iceio "github.com/apache/iceberg-go/io"
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
	n := 100
	if v := os.Getenv("EOSINK_TABLE_SNAPSHOTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
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
				if err := ice.Commit(ctx, "n1", uint64(c), r.files("orders", "n1", uint64(c), recs(c, 1))); err != nil {
					b.Fatal(err)
				}
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
		if err := ice.Commit(ctx, "n1", c, r.files("orders", "n1", c, recs(int(c), 3))); err != nil {
			b.Fatal(err)
		}
	}
	files := make([][]committer.File, b.N)
	for i := range files {
		files[i] = r.files("orders", "n1", c+uint64(i)+1, recs(i, 3))
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := ice.Commit(ctx, "n1", c+uint64(i)+1, files[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
