package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// osEngine opens an engine on the real filesystem under a temp dir: the
// benchmarks measure real writes and fsyncs.
func osEngine(b *testing.B, tweak func(*Config)) *Engine {
	b.Helper()
	dir := b.TempDir()
	fs := afero.NewOsFs()
	staging, dest := filepath.Join(dir, "staging"), filepath.Join(dir, "files")
	cfg := Config{Node: "bench", FS: fs, StagingDir: staging, StorePath: filepath.Join(dir, "state.db"),
		Committer: local.New(fs, dest, staging), Publisher: local.New(fs, dest, staging), MaxUncommittedBytes: 8 << 30}
	if tweak != nil {
		tweak(&cfg)
	}
	e, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

func ndjsonBatch(records, size int) []byte {
	line := `{"k":"` + strings.Repeat("x", size-9) + `"}` + "\n"
	return []byte(strings.Repeat(line, records))
}

// BenchmarkWriteIdempotent is the producer sequence check plus the staging
// append, from parallel producers on separate streams: the ingest lock's cost.
func BenchmarkWriteIdempotent(b *testing.B) {
	e := osEngine(b, nil)
	data := ndjsonBatch(100, 1024)
	var n atomic.Int64
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("p%d", n.Add(1))
		ps, err := e.InitProducer(b.Context(), id)
		if err != nil {
			b.Error(err)
			return
		}
		seq := int64(0)
		for pb.Next() {
			if _, err := e.Write(Write{Stream: "s", Ext: "ndjson", Data: data, Records: 100,
				Producer: &Producer{ID: id, Epoch: ps.Epoch, Seq: seq}}); err != nil {
				b.Error(err)
				return
			}
			seq++
		}
	})
}

// BenchmarkSequenceCheck is the duplicate path: the producer check alone.
func BenchmarkSequenceCheck(b *testing.B) {
	e := osEngine(b, nil)
	ps, _ := e.InitProducer(b.Context(), "p")
	data := ndjsonBatch(1, 64)
	if _, err := e.Write(Write{Stream: "s", Ext: "ndjson", Data: data, Records: 1, Producer: &Producer{ID: "p", Epoch: ps.Epoch}}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := e.Write(Write{Stream: "s", Ext: "ndjson", Data: data, Records: 1, Producer: &Producer{ID: "p", Epoch: ps.Epoch}})
		if err != nil || !res.Duplicate {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkCheckpoint100Files measures one checkpoint (barrier, fsync of
// 100 files, prepared record, 100 renames, manifest, committed record) on
// the real filesystem. Reports p50/p99 of the checkpoint alone and, in
// the same run, of the disk's fsync floor: 100 files of the same size,
// in 100 directories, written and fsynced all in parallel with no engine
// (floor-p50-ms, floor-p99-ms), and the stricter fsync-only floor
// (syncOnlyFloor). They alternate, one of each per iteration; x-p50 and
// x-p99 are the checkpoint's quantiles over the floor's.
func BenchmarkCheckpoint100Files(b *testing.B) {
	for _, par := range []int{8, 32, 128} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) { benchCheckpoint(b, par) })
	}
}

func benchCheckpoint(b *testing.B, par int) {
	e := osEngine(b, func(c *Config) { c.Parallel = par })
	data := ndjsonBatch(10, 200)
	// Warm up: the first checkpoint of a partition creates (and fsyncs)
	// its directories, once per stream and hour; measure the steady state.
	for s := range 100 {
		if _, err := e.Write(Write{Stream: fmt.Sprintf("s%03d", s), Ext: "ndjson", Data: data, Records: 10}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.Checkpoint(context.Background()); err != nil {
		b.Fatal(err)
	}
	floorDir := b.TempDir()
	for s := range 100 {
		if err := os.MkdirAll(filepath.Join(floorDir, fmt.Sprintf("s%03d", s)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var durs, floor, syncFloor []time.Duration
	for i := range b.N {
		b.StopTimer()
		floor = append(floor, fsyncFloor(b, floorDir, i, 100, data))
		syncFloor = append(syncFloor, syncOnlyFloor(b, floorDir, i, 100, data))
		for s := range 100 {
			if _, err := e.Write(Write{Stream: fmt.Sprintf("s%03d", s), Ext: "ndjson", Data: data, Records: 10}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		res, err := e.Checkpoint(context.Background())
		durs = append(durs, time.Since(start))
		if err != nil || res.State != recovery.Committed || len(res.Files) != 100 {
			b.Fatalf("checkpoint: %v %v %d", err, res.State, len(res.Files))
		}
	}
	reportQuantiles(b, durs)
	b.ReportMetric(quantileMS(floor, 0.5), "floor-p50-ms")
	b.ReportMetric(quantileMS(floor, 0.99), "floor-p99-ms")
	b.ReportMetric(quantileMS(durs, 0.5)/quantileMS(floor, 0.5), "x-p50")
	b.ReportMetric(quantileMS(durs, 0.99)/quantileMS(floor, 0.99), "x-p99")
	b.ReportMetric(quantileMS(syncFloor, 0.5), "syncfloor-p50-ms")
	b.ReportMetric(quantileMS(syncFloor, 0.99), "syncfloor-p99-ms")
	b.ReportMetric(quantileMS(durs, 0.5)/quantileMS(syncFloor, 0.5), "xsync-p50")
	b.ReportMetric(quantileMS(durs, 0.99)/quantileMS(syncFloor, 0.99), "xsync-p99")
}

// fsyncFloor creates n new files, one in each of dir's s000...
// subdirectories, and writes data to each, fsyncs and closes it, all n in
// parallel with no engine: the floor of issue 26, "N files written and
// fsynced in parallel". The whole of it is timed. The files are removed
// afterwards, untimed.
func fsyncFloor(b *testing.B, dir string, round, n int, data []byte) time.Duration {
	b.Helper()
	names := make([]string, n)
	for s := range n {
		names[s] = filepath.Join(dir, fmt.Sprintf("s%03d", s), fmt.Sprintf("f%06d", round))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for s, name := range names {
		wg.Go(func() {
			f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				errs[s] = err
				return
			}
			_, err = f.Write(data)
			errs[s] = errors.Join(err, f.Sync(), f.Close())
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	for _, name := range names {
		if err := os.Remove(name); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// syncOnlyFloor is the stricter floor: the n files are created and
// written first, untimed, and only their fsyncs (all n in parallel) are
// timed, as a checkpoint's files were written before it began
// (syncfloor-p50-ms, syncfloor-p99-ms; xsync-p50 and xsync-p99 are the
// checkpoint's quantiles over it).
func syncOnlyFloor(b *testing.B, dir string, round, n int, data []byte) time.Duration {
	b.Helper()
	files := make([]*os.File, n)
	for s := range n {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("s%03d", s), fmt.Sprintf("g%06d", round)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		files[s] = f
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for s, f := range files {
		wg.Go(func() { errs[s] = errors.Join(f.Sync(), f.Close()) })
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		if err := os.Remove(f.Name()); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// quantileMS returns the p-quantile of durs in milliseconds.
func quantileMS(durs []time.Duration, p float64) float64 {
	if len(durs) == 0 {
		return 0
	}
	s := slices.Clone(durs)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}

func reportQuantiles(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	b.ReportMetric(quantileMS(durs, 0.5), "p50-ms")
	b.ReportMetric(quantileMS(durs, 0.99), "p99-ms")
}

// BenchmarkRecovery10000Prepared measures a start that must re-commit a
// prepared checkpoint of 10,000 files (in 50 directories): the time until
// ready. The staging files are made durable (sync(2)) before the clock
// starts, as a pre-commit leaves them, so the start does not pay for
// writing them back.
func BenchmarkRecovery10000Prepared(b *testing.B) {
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		fs := durable.NewOsFs() // what eosink runs on: renames never replace
		staging, dest := filepath.Join(dir, "staging"), filepath.Join(dir, "files")
		if err := fs.MkdirAll(staging, 0o755); err != nil {
			b.Fatal(err)
		}
		st, err := recovery.Open(filepath.Join(dir, "state.db"))
		if err != nil {
			b.Fatal(err)
		}
		ck := &recovery.Checkpoint{ID: 1, StartedAt: time.Now(), PreparedAt: time.Now()}
		for i := range 10000 {
			base := fmt.Sprintf("part-bench-%020d-%04d.ndjson", 1, i)
			temp := filepath.Join(staging, base+".inprogress")
			if err := afero.WriteFile(fs, temp, []byte("{}\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			ck.Files = append(ck.Files, recovery.FileOf(fmt.Sprintf("s%02d", i%50), temp, fmt.Sprintf("s%02d/dt=2026-11-29/hour=09/%s", i%50, base), 3, 1, "d6a8b2e4"))
		}
		if err := st.Prepare(ck); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		syscall.Sync()
		b.StartTimer()
		e := benchStart(b, fs, dir, staging, dest)
		b.StopTimer()
		_ = e.Close()
	}
}

// benchStart opens an engine on dir's state store and waits until it is
// ready, reporting that time as ready-ms.
func benchStart(b *testing.B, fs afero.Fs, dir, staging, dest string) *Engine {
	b.Helper()
	start := time.Now()
	e, err := Open(Config{Node: "bench", FS: fs, StagingDir: staging, StorePath: filepath.Join(dir, "state.db"),
		Committer: local.New(fs, dest, staging), Publisher: local.New(fs, dest, staging)})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "ready-ms")
	return e
}

// BenchmarkStartProducers measures a start (Open to ready) on a state
// store holding many producers, each with one stream entry, and nothing
// pending: what a restart after SIGKILL costs with that many live
// producers (issue 12: target ≤ 2 s at 1M). EOSINK_BENCH_PRODUCERS sets
// the count (default 100,000); building the store takes longer than the
// starts.
func BenchmarkStartProducers(b *testing.B) {
	n := 100_000
	if v := os.Getenv("EOSINK_BENCH_PRODUCERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	fs := afero.NewOsFs()
	staging, dest := filepath.Join(dir, "staging"), filepath.Join(dir, "files")
	st, err := recovery.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 50_000
	for i := 0; i < n; i += chunk {
		m := map[string]map[string]recovery.StreamSeq{}
		for j := i; j < min(n, i+chunk); j++ {
			m[fmt.Sprintf("p%08d", j)] = map[string]recovery.StreamSeq{fmt.Sprintf("s%06d", j%100_000): {NextSeq: 5, CommittedSeq: 4, CommittedIn: 1}}
		}
		if err := st.RestoreProducers(m); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		e := benchStart(b, fs, dir, staging, dest)
		b.StopTimer()
		if got := e.ProducerCount(); got != n {
			b.Fatalf("ProducerCount = %d, want %d", got, n)
		}
		_ = e.Close()
		b.StartTimer()
	}
}
