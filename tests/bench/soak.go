package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// soakPoint is one row of the soak series.
type soakPoint struct {
	T             float64 `json:"t_s"` // since the load started
	RSSMiB        float64 `json:"rss_mib"`
	AnonMiB       float64 `json:"rss_anon_mib"`
	FileMiB       float64 `json:"rss_file_mib"` // mapped files: the bbolt store
	HeapInuseMiB  float64 `json:"heap_inuse_mib"`
	UncommitMiB   float64 `json:"uncommitted_mib"`
	RecordsPerSec float64 `json:"records_per_s"` // over the last interval, from eosink's counter
	ServerCores   float64 `json:"server_cpu_cores"`
	Foreign       float64 `json:"foreign_cpu_cores"` // other user processes, over the last interval
}

// soakResult is the output of --soak.
type soakResult struct {
	Scenario    string      `json:"scenario"`
	Load        loadResult  `json:"load"`
	Series      []soakPoint `json:"series"`
	PeakRSSMiB  float64     `json:"peak_rss_mib"` // sampled every 250 ms
	HWMMiB      float64     `json:"vm_hwm_mib"`
	FirstMiB    float64     `json:"first_third_median_rss_mib"`
	LastMiB     float64     `json:"last_third_median_rss_mib"`
	SlopeMiBMin float64     `json:"slope_mib_per_min"` // least squares over the measured samples
	Flat        bool        `json:"flat"`              // last third within 10% (and 16 MiB) of the first
	WithinLimit bool        `json:"within_256mib"`
	Checkpoints *ckptStats  `json:"checkpoints,omitempty"`
	StopSeconds float64     `json:"stop_s"`
	// ConsumedFiles and ConsumedBytes are the committed files --consume deleted.
	ConsumedFiles int   `json:"consumed_files"`
	ConsumedBytes int64 `json:"consumed_bytes"`
	LogProblems   int   `json:"log_warn_error_lines"`
}

// soak runs one scenario against eosink alone for --duration after the
// warmup and prints its resident set every --soak-every.
func soak(ctx context.Context, cfg *config, s scenario, out io.Writer) (*soakResult, error) {
	fmt.Fprintf(out, "soak: %s against eosink for %s (after %s warmup), RSS every %s\n\n", s.Name, cfg.duration, cfg.warmup, cfg.soakEvery)
	t, err := startEosink(ctx, cfg, cfg.bin, cfg.workDir, "soak-"+s.Name)
	if err != nil {
		return nil, err
	}
	writePID(cfg, t, "soak-"+s.Name)
	res := &soakResult{Scenario: s.Name}
	defer func() {
		if d, err := t.Stop(cfg.stopTimeout); d > 0 || err != nil {
			res.StopSeconds = d.Seconds()
		}
	}()
	rss := startRSS(t.PID, 250*time.Millisecond)
	hc := plainClient()
	defer hc.CloseIdleConnections()

	var (
		mu     sync.Mutex
		series []soakPoint
		wg     sync.WaitGroup
		win    window
	)
	sctx, stopSeries := context.WithCancel(ctx)
	defer stopSeries()
	fmt.Fprintf(out, "  %8s  %8s  %8s  %8s  %10s  %11s  %10s  %7s  %11s\n", "t", "RSS MiB", "anon", "file", "heap MiB", "uncommitted", "records/s", "server", "other procs")
	onStart := func(w window) {
		win = w
		wg.Go(func() {
			tick := time.NewTicker(cfg.soakEvery)
			defer tick.Stop()
			lastT, lastN := time.Now(), 0.0
			lastCPU, _ := cpuTime(t.PID)
			lastOther := otherCPU(t.PID)
			if m, err := scrape(hc, t.URL); err == nil {
				lastN = promSum(m, "eosink_records_ingested_total")
			}
			for {
				select {
				case <-sctx.Done():
					return
				case now := <-tick.C:
					if now.After(w.stop.Add(cfg.soakEvery / 2)) {
						return
					}
					p := soakPoint{T: now.Sub(w.start).Seconds()}
					if m, err := readMem(t.PID); err == nil {
						p.RSSMiB, p.AnonMiB, p.FileMiB = mib(m.RSS), mib(m.Anon), mib(m.File)
					}
					if m, err := scrape(hc, t.URL); err == nil {
						n := promSum(m, "eosink_records_ingested_total")
						p.HeapInuseMiB = promSum(m, "go_memstats_heap_inuse_bytes") / (1 << 20)
						p.UncommitMiB = promSum(m, "eosink_uncommitted_bytes") / (1 << 20)
						p.RecordsPerSec = (n - lastN) / now.Sub(lastT).Seconds()
						lastT, lastN = now, n
					}
					if c, err := cpuTime(t.PID); err == nil {
						p.ServerCores = (c - lastCPU).Seconds() / cfg.soakEvery.Seconds()
						lastCPU = c
					}
					other := otherCPU(t.PID)
					p.Foreign, _ = foreignCores(lastOther, other, cfg.soakEvery.Seconds())
					lastOther = other
					fmt.Fprintf(out, "  %7.0fs  %8.1f  %8.1f  %8.1f  %10.1f  %11.1f  %10.0f  %7.2f  %11.2f\n", p.T, p.RSSMiB, p.AnonMiB, p.FileMiB, p.HeapInuseMiB, p.UncommitMiB, p.RecordsPerSec, p.ServerCores, p.Foreign)
					mu.Lock()
					series = append(series, p)
					mu.Unlock()
				}
			}
		})
	}
	lctx, release := guardDisk(ctx, cfg.workDir, cfg.minFree)
	defer release()
	var cons *consumer
	if cfg.consume != "never" {
		cons = startConsumer(t.Dest, "bench", 2*time.Second)
	}
	load, err := runLoad(lctx, s, t.URL, cfg.producers, cfg.warmup, cfg.duration, onStart)
	stopSeries()
	wg.Wait()
	peak, hwm, _ := rss.Stop()
	if cons != nil {
		res.ConsumedFiles, res.ConsumedBytes = cons.Stop()
	}
	if err != nil {
		if cause := context.Cause(lctx); errors.Is(cause, errDiskLow) {
			err = cause
		}
		return nil, err
	}
	release()
	res.Load, res.Series = load, series
	res.PeakRSSMiB, res.HWMMiB = mib(peak), mib(hwm)
	cs := &ckptStats{HistP50ms: math.NaN(), HistP99ms: math.NaN()}
	checkpointDurations(hc, t.URL, win, cs)
	res.Checkpoints = cs

	// Flatness over the measured samples (after the warmup).
	var xs, ys []float64
	for _, p := range series {
		if p.T >= cfg.warmup.Seconds() && p.RSSMiB > 0 {
			xs, ys = append(xs, p.T/60), append(ys, p.RSSMiB)
		}
	}
	if n := len(ys); n >= 3 {
		third := n / 3
		res.FirstMiB, res.LastMiB = median(ys[:third]), median(ys[n-third:])
		res.SlopeMiBMin = slope(xs, ys)
		growth := res.LastMiB - res.FirstMiB
		res.Flat = growth <= math.Max(0.10*res.FirstMiB, 16)
	}
	res.WithinLimit = res.PeakRSSMiB <= 256
	if d, err := t.Stop(cfg.stopTimeout); err == nil || d > 0 {
		res.StopSeconds = d.Seconds()
	}
	res.LogProblems = countLogProblems(t.LogPath)

	fmt.Fprintf(out, "\n%s: %.0f records/s, %.1f MB/s, p50 %.2f ms, p99 %.2f ms, 429s %d, errors %v\n",
		s.Name, load.RecordsPerSec, load.MBPerSec, load.P50ms, load.P99ms, load.Throttled, load.Errors)
	fmt.Fprintf(out, "checkpoints with data: %d, p50 %s ms, p99 %s ms, max %s ms, aborted %d\n",
		cs.Count, fmtF(cs.P50ms, 1), fmtF(cs.P99ms, 1), fmtF(cs.MaxMs, 1), cs.Aborted)
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	fmt.Fprintf(out, "RSS: peak %.1f MiB (VmHWM %.1f) — target <= 256 MiB: %s\n", res.PeakRSSMiB, res.HWMMiB, verdict(res.WithinLimit))
	fmt.Fprintf(out, "RSS: first third median %.1f MiB, last third %.1f MiB, slope %+.2f MiB/min — flat: %s\n",
		res.FirstMiB, res.LastMiB, res.SlopeMiBMin, verdict(res.Flat))
	if cons != nil {
		fmt.Fprintf(out, "consumer: deleted %d committed files, %.1f GB, as they were committed\n", res.ConsumedFiles, float64(res.ConsumedBytes)/1e9)
	}
	if res.LogProblems > 0 {
		fmt.Fprintf(out, "!! %d WARN/ERROR lines in %s\n", res.LogProblems, t.LogPath)
	}
	return res, nil
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
