package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/spf13/afero"
	"golang.org/x/sync/errgroup"
)

// A year of running, scaled down: the destination's bookkeeping that a
// fleet with producer churn leaves behind, and what a start after a
// state-store loss costs with it. EOSINK_GROWTH=<divisor> runs it at
// 1/divisor of a year (100: 31,536 manifests); EOSINK_GROWTH_DELETES=1
// forgets every producer by DELETE (one document each) instead of by the
// hourly expiry (one document a run). BENCHMARKS.md "Growth" has the
// figures and the extrapolation.
//
// The year: a checkpoint with data every 10 s (3,153,600 manifests), each
// naming 2 files (2 streams) and up to 64 producer mentions; 1,000,000
// producers, each active for a day (a rolling window) and expired 168 h
// after it went idle by the expiry, which runs hourly (default flags).
func TestGrowthYear(t *testing.T) {
	div, _ := strconv.Atoi(os.Getenv("EOSINK_GROWTH"))
	if div <= 0 {
		t.Skip("EOSINK_GROWTH=<divisor of a year> runs it (slow, writes to the temp dir)")
	}
	deletes := os.Getenv("EOSINK_GROWTH_DELETES") == "1"
	root := t.TempDir() // on disk: listing and reading costs are the point
	fs := afero.NewBasePathFs(afero.NewOsFs(), root)
	g := growthYear{div: div, deletes: deletes}
	begin := time.Now()
	g.write(t, fs)
	t.Logf("year/%d written in %s: %d manifests (%.1f producer mentions each), %d producers, %d forgotten documents",
		div, time.Since(begin).Round(time.Millisecond), g.manifests, float64(g.mentions)/float64(g.manifests), g.producers, g.forgotten)
	reportBookkeeping(t, filepath.Join(root, rigDest))

	r := newRig(t, fs)
	r.broken = "a synthetic destination"
	st := measureStart(t, r)
	t.Logf("start after a state-store loss: %s, heap peak +%.1f MiB, allocated %.1f MiB, state.db %.1f MiB, %d producers",
		st.took.Round(time.Millisecond), mib(st.heapPeak), mib(st.alloc), mib(st.storeBytes), r.e.ProducerCount())
	ctx := t.Context()
	apply := func() time.Duration { // the median of 5
		var took []time.Duration
		for range 5 {
			begin := time.Now()
			docs, err := r.e.life.loadForgotten(ctx, 0, layout.MaxCheckpoint/2, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.e.life.applyForgotten(docs); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(begin))
		}
		slices.Sort(took)
		return took[2]
	}
	t.Logf("of which reading and applying the forgotten-producers documents (median of 5): %s", apply().Round(time.Millisecond))
	compactUntilDone(t, func() (ForgottenCompaction, error) { return r.e.CompactForgotten(ctx) })
	reportBookkeeping(t, filepath.Join(root, rigDest))
	t.Logf("reading and applying them after the compaction (median of 5): %s", apply().Round(time.Millisecond))
	r.stopLosingStore()
	st = measureStart(t, r)
	t.Logf("start after a state-store loss, after the compaction: %s, heap peak +%.1f MiB, allocated %.1f MiB, state.db %.1f MiB, %d producers",
		st.took.Round(time.Millisecond), mib(st.heapPeak), mib(st.alloc), mib(st.storeBytes), r.e.ProducerCount())
	r.stop()
}

// growthYear writes a scaled year of one node's destination.
type growthYear struct {
	div       int
	deletes   bool
	manifests int
	producers int
	forgotten int
	mentions  int
}

const (
	yearCheckpoints = 3_153_600 // one every 10 s
	yearProducers   = 1_000_000
	growthMentions  = 64    // producer mentions per manifest
	dayCheckpoints  = 8_640 // a producer's active day
	hourCheckpoints = 360
	expiryCheckpts  = 168 * hourCheckpoints
)

func (g *growthYear) write(t *testing.T, fs afero.Fs) {
	t.Helper()
	m := yearCheckpoints / g.div
	prods := yearProducers / g.div
	g.manifests, g.producers = m, prods
	// Producer p is active in checkpoints [p*m/prods, +day).
	// A year/div holds 1/div of the year's checkpoints, producers and
	// hourly expiry runs, at the year's rates; the producers' lives (a
	// day active, then the expiry) are shortened so that most of them
	// end within it.
	day, hour, expiry := min(dayCheckpoints, m/4), hourCheckpoints, max(expiryCheckpts/g.div, 1)
	window := day * prods / m // producers active at once
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dest := rigDest
	mkdir := map[string]bool{}
	write := func(name string, data []byte) {
		full := path.Join(dest, name)
		if d := path.Dir(full); !mkdir[d] {
			if err := fs.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			mkdir[d] = true
		}
		if err := afero.WriteFile(fs, full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seqs := make([]int64, prods)
	expired := 0 // producers [0, expired) are forgotten
	for c := 1; c <= m; c++ {
		when := at.Add(time.Duration(c) * 10 * time.Second)
		newest := (c - 1) * prods / m
		var files []committer.File
		for s := range 2 {
			stream := fmt.Sprintf("s%d", s)
			f := committer.File{Stream: stream, Final: fmt.Sprintf("%s/dt=%s/hour=%02d/%s", stream, when.Format("2006-01-02"), when.Hour(),
				layout.PartName(rigNode, uint64(c), s, "ndjson")),
				Records: 100, CRC32C: "00000000", Producers: map[string]committer.SeqRanges{}, Epochs: map[string]committer.ProducerEpoch{}}
			for j := range growthMentions / 2 {
				p := newest - (c*7919+(s*32+j)*104729)%(window+1)
				if p < 0 || p < expired {
					continue
				}
				id := fmt.Sprintf("producer-%07d", p)
				if _, dup := f.Producers[id]; dup {
					continue
				}
				f.Producers[id] = committer.SeqRanges{{seqs[p], seqs[p]}}
				g.mentions++
				f.Epochs[id] = committer.ProducerEpoch{Epoch: 1, Incarnation: 1}
				seqs[p]++
			}
			body := []byte(strings.Repeat("{\"x\":1}\n", 100))
			f.Bytes = int64(len(body))
			write(f.Final, body)
			files = append(files, f)
		}
		doc, err := layout.EncodeManifest(layout.NewManifest(rigNode, uint64(c), when, files))
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ManifestName(rigNode, uint64(c)), doc)
		// Producers idle for the expiry are forgotten: by the hourly
		// expiry (one document a run), or each by a DELETE.
		if c%hour != 0 && !g.deletes {
			continue
		}
		var gone []string
		for expired < prods && expired*m/prods+day+expiry < c {
			gone = append(gone, fmt.Sprintf("producer-%07d", expired))
			expired++
		}
		for len(gone) > 0 {
			n := len(gone)
			if g.deletes {
				n = 1
			}
			f := layout.Forgotten{Node: rigNode, After: uint64(c), Producers: map[string]int64{}}
			for _, id := range gone[:min(n, expireBatch)] {
				f.Producers[id] = 1
			}
			gone = gone[min(n, expireBatch):]
			body, err := json.Marshal(&f)
			if err != nil {
				t.Fatal(err)
			}
			write(layout.ForgottenName(rigNode, uint64(c), g.forgotten%1000), body)
			g.forgotten++
		}
	}
}

// reportBookkeeping logs the count and bytes of every kind of document
// under the destination's own folders, and of the data files.
func reportBookkeeping(t *testing.T, dest string) {
	t.Helper()
	type tally struct {
		n     int
		bytes int64
	}
	by := map[string]*tally{}
	err := filepath.Walk(dest, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dest, p)
		kind, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if !strings.HasPrefix(kind, "_") {
			kind = "data files"
			if strings.Contains(rel, "/metadata/") {
				kind = "table metadata"
			}
		}
		if by[kind] == nil {
			by[kind] = &tally{}
		}
		by[kind].n++
		by[kind].bytes += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := slices.Sorted(maps.Keys(by))
	for _, k := range kinds {
		t.Logf("  %-16s %9d documents %10.1f MiB", k, by[k].n, mib(by[k].bytes))
	}
}

type startCost struct {
	took       time.Duration
	heapPeak   int64 // the highest heap in use while starting, above the heap before
	alloc      int64 // bytes allocated while starting
	storeBytes int64 // state.db after the start
}

// measureStart starts r's engine (its store lost: none at r.storePath)
// and measures the start.
func measureStart(t *testing.T, r *rig) startCost {
	t.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if h := int64(ms.HeapInuse); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	begin := time.Now()
	e, err := Open(r.config(r.fs))
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	close(stop)
	<-done
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fi, err := os.Stat(r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	return startCost{took: took, heapPeak: peak.Load() - int64(before.HeapInuse), alloc: int64(after.TotalAlloc - before.TotalAlloc), storeBytes: fi.Size()}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// The forgotten-producers part of a start after a loss, on S3 (a local
// MinIO): EOSINK_GROWTH_S3=<n> publishes n documents of one producer each
// (forgets by DELETE), times the listing and the reads a start does
// (listForgotten, readForgotten), compacts them and times it again. The
// year's million DELETEs scale linearly from it (BENCHMARKS.md "Growth").
func TestGrowthForgottenS3(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EOSINK_GROWTH_S3"))
	if n <= 0 {
		t.Skip("EOSINK_GROWTH_S3=<documents> runs it (needs the minio binary)")
	}
	srv := testsrv.StartMinIO(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	dest, err := s3.New(s3.Config{Client: client, Bucket: srv.Bucket, Prefix: "growth", Node: rigNode, Staging: afero.NewMemMapFs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	begin := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			doc, err := json.Marshal(&layout.Forgotten{Node: rigNode, After: uint64(i + 1), Producers: map[string]int64{fmt.Sprintf("producer-%07d", i): 1}})
			if err != nil {
				return err
			}
			return dest.Publish(ctx, layout.ForgottenName(rigNode, uint64(i+1), 0), doc)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d documents published in %s", n, time.Since(begin).Round(time.Millisecond))
	dir := layout.ForgottenDir + "/" + rigNode + "/"
	read := func() (int, time.Duration) {
		begin := time.Now()
		entries, err := listForgotten(ctx, dest, dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			var err error
			if _, _, _, ok := layout.ParseForgottenMergedName(en.Path); ok {
				_, err = readMerged(ctx, dest, layout.ForgottenSeal{}, en.Path)
			} else {
				_, err = readForgotten(ctx, dest, layout.ForgottenSeal{}, en.Path)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		return len(entries), time.Since(begin)
	}
	docs, took := read()
	t.Logf("a start after a loss lists and reads %d documents in %s (%.2f ms each, one at a time)", docs, took.Round(time.Millisecond),
		float64(took.Microseconds())/1000/float64(docs))
	lc := &lifecycle{e: &Engine{cfg: Config{Node: rigNode, Publisher: dest}}}
	compactUntilDone(t, func() (ForgottenCompaction, error) { return lc.compactForgotten(ctx, 1) })
	docs, took = read()
	t.Logf("after it, a start lists and reads %d documents in %s", docs, took.Round(time.Millisecond))
}

// compactUntilDone runs compact until a run reads no document, and logs
// how many runs it took, what they read, removed and wrote, and how long.
func compactUntilDone(t *testing.T, compact func() (ForgottenCompaction, error)) {
	t.Helper()
	begin := time.Now()
	var runs, read, removed, written int
	for {
		res, err := compact()
		if err != nil {
			t.Fatal(err)
		}
		if res.Read == 0 {
			break
		}
		runs, read, removed, written = runs+1, read+res.Read, removed+res.Removed, written+res.Written
	}
	t.Logf("compaction: %d runs, %d documents read, %d removed, %d merged written, in %s",
		runs, read, removed, written, time.Since(begin).Round(time.Millisecond))
}
