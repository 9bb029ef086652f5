package catalog

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/spf13/afero"
)

// envFeedBench sets how many manifests BenchmarkFeed writes (default
// 100,000: about 40 MB in memory).
const envFeedBench = "EOSINK_FEED_BENCH_MANIFESTS"

// envFeedBenchFS=os writes them to a temp folder on disk instead of
// afero's MemMapFs.
const envFeedBenchFS = "EOSINK_FEED_BENCH_FS"

// BenchmarkFeed measures a page of the commit feed over a destination of
// many manifests (three nodes, two files each) on the local committer
// (afero MemMapFs, which the committer does not cache folder names of:
// every listing reads the folder, as on a live node's folder that changes
// with each commit; EOSINK_FEED_BENCH_FS=os for a disk): the
// first page from the start, a page from the middle with a warm cache
// and with a cold one, and a caught-up page (nothing new). It reports
// the answer's JSON bytes per page.
func BenchmarkFeed(b *testing.B) {
	n := 100000
	if v := os.Getenv(envFeedBench); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 3 {
			b.Fatalf("%s=%q", envFeedBench, v)
		}
	}
	d := newDest(b)
	if os.Getenv(envFeedBenchFS) == "os" {
		// Under a BasePathFs the committer keeps no folder names either.
		dir := b.TempDir()
		d.fs = afero.NewBasePathFs(afero.NewOsFs(), dir)
		for _, p := range []string{tDest, tStaging} {
			if err := d.fs.MkdirAll(p, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		d.local = local.New(d.fs, tDest, tStaging)
	}
	nodes := []string{"eosink-0", "eosink-1", "eosink-2"}
	began := time.Now()
	end, mid := Cursor{}, Cursor{}
	for i := range n {
		id := uint64(i/3 + 1)
		d.commit(nodes[i%3], id, 10, "clicks", "views")
		end = end.With(nodes[i%3], id)
		if i < n/2 {
			mid = mid.With(nodes[i%3], id)
		}
	}
	b.Logf("%d manifests written in %s", n, time.Since(began).Round(time.Millisecond))
	run := func(name string, cur Cursor, cold bool) {
		b.Run(name, func(b *testing.B) {
			c := d.catalog(Config{})
			var page FeedPage
			var err error
			for b.Loop() {
				if cold {
					b.StopTimer()
					c = d.catalog(Config{})
					b.StartTimer()
				}
				page, err = c.Commits(b.Context(), FeedQuery{After: cur, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
			}
			body, _ := json.Marshal(page.Commits)
			b.ReportMetric(float64(len(body)+len(page.Next.String())), "answer-bytes")
			b.ReportMetric(float64(len(page.Commits)), "commits")
		})
	}
	run("first-1000", Cursor{}, false)
	run("middle-1000-warm", mid, false)
	run("middle-1000-cold", mid, true)
	run("caught-up", end, false)
}
