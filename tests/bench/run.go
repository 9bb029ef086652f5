package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/internal/ctxsleep"
)

// report is everything --json writes.
type report struct {
	Machine Machine        `json:"machine"`
	Eosink  string         `json:"eosink_build,omitempty"`
	Config  map[string]any `json:"config"`
	Runs    []*runResult   `json:"runs,omitempty"`
	// Discarded are runs repeated because other processes took the CPU.
	Discarded []*runResult `json:"discarded_runs,omitempty"`
	Summary   []summaryRow `json:"summary,omitempty"`
	Ratios    []ratio      `json:"ratios,omitempty"`
	Soak      *soakResult  `json:"soak,omitempty"`
	Slow      *slowResult  `json:"slow_senders,omitempty"`
	Year      *yearResult  `json:"year,omitempty"`
}

func reportConfig(cfg *config) map[string]any {
	var names []string
	for _, s := range cfg.scenarios {
		names = append(names, s.Name)
	}
	return map[string]any{
		"producers": cfg.producers, "duration_s": cfg.duration.Seconds(), "warmup_s": cfg.warmup.Seconds(),
		"scenarios": names, "scenario_defs": cfg.scenarios, "rounds": cfg.rounds, "soak": cfg.soak,
		"soak_every_s": cfg.soakEvery.Seconds(), "checkpoint_interval_s": cfg.checkpointInterval.Seconds(),
		"baseline_mode": cfg.baselineMode, "baseline_alloc": cfg.baselineAlloc, "targets": cfg.targets, "eosink_flags": cfg.eosinkFlags,
		"max_foreign_cores": cfg.maxForeign, "retries": cfg.retries, "quiet_wait_s": cfg.quietWait.Seconds(),
	}
}

// ckptStats summarises the checkpoints that started in the measured window
// and held data.
type ckptStats struct {
	Count     int     `json:"count"`
	Aborted   int     `json:"aborted"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	MeanMB    float64 `json:"mean_mb"` // bytes per checkpoint, 10^6
	HistP50ms float64 `json:"metric_p50_ms"`
	HistP99ms float64 `json:"metric_p99_ms"`
}

// runResult is one run of one scenario against one target.
type runResult struct {
	Scenario string     `json:"scenario"`
	Target   string     `json:"target"`
	Round    int        `json:"round"`
	PID      int        `json:"pid"`
	Load     loadResult `json:"load"`

	PeakRSS int64 `json:"peak_rss_bytes"` // largest VmRSS sampled every 250ms
	HWM     int64 `json:"vm_hwm_bytes"`   // VmHWM at the end: peak over the process's life

	ServerCores  float64  `json:"server_cpu_cores"`  // CPU seconds per second in the window
	HarnessCores float64  `json:"harness_cpu_cores"` // the load generator (and an inproc baseline)
	MachineBusy  float64  `json:"machine_busy"`      // fraction of all CPUs busy in the window
	MachineCPU   cpuShare `json:"machine_cpu"`       // how all CPUs spent the window
	// Foreign is the CPU other user processes took in the window (cores);
	// above --max-foreign the run is contaminated and is run again.
	Foreign      float64  `json:"foreign_cpu_cores"`
	ForeignTop   []string `json:"foreign_top,omitempty"`
	Contaminated bool     `json:"contaminated"`
	Attempt      int      `json:"attempt"`
	ServerCPUus  float64  `json:"server_cpu_us_per_record"`
	IOWriteMB    float64  `json:"io_write_mb"` // bytes the server sent to storage in the window, 10^6

	Checkpoints *ckptStats `json:"checkpoints,omitempty"`
	// From eosink's /metrics, over the window.
	AllocPerRecord float64            `json:"alloc_bytes_per_record,omitempty"`
	GCCycles       float64            `json:"gc_cycles,omitempty"`
	GCPauseMs      float64            `json:"gc_pause_ms,omitempty"`
	HeapInuseMB    float64            `json:"heap_inuse_mb_end,omitempty"`
	IngestedMetric float64            `json:"ingested_records_metric,omitempty"` // eosink's count, whole run
	Rejected       map[string]float64 `json:"rejected,omitempty"`

	ConsumedFiles int     `json:"consumed_files,omitempty"` // committed files deleted by --consume
	StopSeconds   float64 `json:"stop_s"`                   // SIGTERM to exit (eosink: final checkpoint)
	StopError     string  `json:"stop_error,omitempty"`
	LogProblems   int     `json:"log_warn_error_lines"`
	// On disk: the committed data files after the final checkpoint, and
	// the record bytes accepted (warmup included) that they hold.
	DestBytes int64 `json:"dest_bytes,omitempty"`
	DestFiles int   `json:"dest_files,omitempty"`
	BytesIn   int64 `json:"bytes_in,omitempty"`
}

// snapshot is the counters read at the start and end of the window.
type snapshot struct {
	at      time.Time
	server  time.Duration
	harness time.Duration
	cpu     cpuStat
	other   map[int]time.Duration
	io      int64
	metrics []promSample
}

func takeSnapshot(hc *http.Client, t *target) snapshot {
	s := snapshot{at: time.Now(), harness: selfCPU(), io: -1}
	if t.PID > 0 {
		s.server, _ = cpuTime(t.PID)
		s.io = ioWritten(t.PID)
	}
	s.cpu = machineCPU()
	s.other = otherCPU(t.PID)
	if t.Kind == "eosink" {
		s.metrics, _ = scrape(hc, t.URL)
	}
	return s
}

func scrape(hc *http.Client, base string) ([]promSample, error) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseProm(string(b)), nil
}

// measure runs one scenario against one target kind and collects
// everything about it. The target is always stopped before it returns.
func measure(ctx context.Context, cfg *config, s scenario, kind string, round int, out io.Writer) (*runResult, error) {
	label := fmt.Sprintf("%s-r%d", s.Name, round)
	var (
		t   *target
		err error
	)
	if kind == "eosink" {
		t, err = startEosink(ctx, cfg, cfg.bin, cfg.workDir, label)
	} else {
		t, err = startBaselineTarget(ctx, cfg, cfg.workDir, label)
	}
	if err != nil {
		return nil, err
	}
	writePID(cfg, t, label)
	res := &runResult{Scenario: s.Name, Target: kind, Round: round, PID: t.PID}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		d, err := t.Stop(cfg.stopTimeout)
		res.StopSeconds = d.Seconds()
		if err != nil {
			res.StopError = err.Error()
		}
	}
	defer stop()

	pid := t.PID
	if pid == 0 {
		pid = os.Getpid()
	}
	rss := startRSS(pid, 250*time.Millisecond)
	hc := plainClient()
	defer hc.CloseIdleConnections()

	snaps := make(chan [2]snapshot, 1)
	onStart := func(w window) {
		go func() {
			var a, b snapshot
			if sleepUntil(ctx, w.measure) {
				a = takeSnapshot(hc, t)
			}
			if sleepUntil(ctx, w.stop) {
				b = takeSnapshot(hc, t)
			}
			snaps <- [2]snapshot{a, b}
		}()
	}
	var win window
	lctx, release := guardDisk(ctx, cfg.workDir, cfg.minFree)
	defer release()
	if kind == "eosink" {
		if err := s.configure(lctx, t.URL); err != nil {
			return nil, fmt.Errorf("%s: configure stream: %w", s.Name, err)
		}
	}
	var cons *consumer
	if cfg.consume == "always" && t.Dest != "" {
		cons = startConsumer(t.Dest, "bench", 2*time.Second)
	}
	load, err := runLoad(lctx, s, t.URL, cfg.producers, cfg.warmup, cfg.duration, func(w window) {
		win = w
		onStart(w)
	})
	if cons != nil {
		res.ConsumedFiles, _ = cons.Stop()
	}
	if err != nil {
		rss.Stop()
		if cause := context.Cause(lctx); errors.Is(cause, errDiskLow) {
			err = cause
		}
		return nil, fmt.Errorf("%s against %s: %w", s.Name, kind, err)
	}
	release()
	res.Load = load
	sn := <-snaps
	a, b := sn[0], sn[1]
	if secs := b.at.Sub(a.at).Seconds(); secs > 0 && !a.at.IsZero() {
		if t.PID > 0 {
			res.ServerCores = (b.server - a.server).Seconds() / secs
			if load.Records > 0 {
				res.ServerCPUus = (b.server - a.server).Seconds() * 1e6 / float64(load.Records)
			}
			if a.io >= 0 && b.io >= 0 {
				res.IOWriteMB = float64(b.io-a.io) / 1e6
			}
		}
		res.HarnessCores = (b.harness - a.harness).Seconds() / secs
		res.MachineCPU = b.cpu.sub(a.cpu).share()
		res.MachineBusy = res.MachineCPU.Busy
		res.Foreign, res.ForeignTop = foreignCores(a.other, b.other, secs)
		res.Contaminated = res.Foreign > cfg.maxForeign
	}
	if kind == "eosink" {
		eosinkDetails(hc, t, win, a, b, res)
	}
	res.PeakRSS, res.HWM, _ = rss.Stop()
	stop()
	if kind == "eosink" && cons == nil {
		res.DestBytes, res.DestFiles = t.DestBytes, t.DestFiles
		res.BytesIn = res.Load.AcceptedTotal * int64(s.RecordBytes)
	}
	if kind == "eosink" {
		res.LogProblems = countLogProblems(t.LogPath)
	}
	return res, nil
}

// waitQuiet waits, up to --quiet-wait, for other processes to use less
// than --max-foreign cores over a 2 s sample.
func waitQuiet(ctx context.Context, cfg *config, out io.Writer) {
	deadline := time.Now().Add(cfg.quietWait)
	said := false
	for {
		a, t0 := otherCPU(), time.Now()
		if !sleepUntil(ctx, t0.Add(2*time.Second)) {
			return
		}
		cores, top := foreignCores(a, otherCPU(), time.Since(t0).Seconds())
		if cores <= cfg.maxForeign {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(out, "  (machine still busy after %s: %.2f cores in %s; running anyway)\n", cfg.quietWait, cores, strings.Join(top, ", "))
			return
		}
		if !said {
			fmt.Fprintf(out, "  (waiting up to %s for other processes to quiet down: %.2f cores in %s)\n", cfg.quietWait, cores, strings.Join(top, ", "))
			said = true
		}
	}
}

// sleepUntil waits until at, false when ctx ended first.
func sleepUntil(ctx context.Context, at time.Time) bool {
	return ctxsleep.Sleep(ctx, time.Until(at)) == nil
}

// eosinkDetails reads checkpoints and metrics deltas from the service.
func eosinkDetails(hc *http.Client, t *target, w window, a, b snapshot, res *runResult) {
	if a.metrics != nil && b.metrics != nil {
		d := func(name string) float64 { return promSum(b.metrics, name) - promSum(a.metrics, name) }
		if res.Load.Records > 0 {
			res.AllocPerRecord = d("go_memstats_alloc_bytes_total") / float64(res.Load.Records)
		}
		res.GCCycles = d("go_gc_duration_seconds_count")
		res.GCPauseMs = d("go_gc_duration_seconds_sum") * 1000
		res.HeapInuseMB = promSum(b.metrics, "go_memstats_heap_inuse_bytes") / (1 << 20)
	}
	if end, err := scrape(hc, t.URL); err == nil {
		res.IngestedMetric = promSum(end, "eosink_records_ingested_total")
		if rej := promLabeled(end, "eosink_batches_rejected_total"); len(rej) > 0 {
			res.Rejected = rej
		}
		cs := &ckptStats{
			HistP50ms: histQuantile(end, "eosink_checkpoint_duration_seconds", 0.5) * 1000,
			HistP99ms: histQuantile(end, "eosink_checkpoint_duration_seconds", 0.99) * 1000,
		}
		res.Checkpoints = cs
		checkpointDurations(hc, t.URL, w, cs)
	}
}

// checkpointDurations fills cs from the checkpoints that started in the
// measured window and held data (empty checkpoints do no I/O and would
// pull the quantiles towards zero). The duration is committed_at minus
// started_at when both are there (nanoseconds), else duration_ms.
func checkpointDurations(hc *http.Client, base string, w window, cs *ckptStats) {
	resp, err := hc.Get(base + "/v1/checkpoints?limit=1000")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var list api.CheckpointList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil {
		return
	}
	var ds []float64
	var bytes int64
	for _, c := range list.Checkpoints {
		if c.StartedAt.Before(w.measure) || c.StartedAt.After(w.stop) || (c.FileCount == 0 && c.Records == 0) {
			continue
		}
		switch c.State {
		case "aborted":
			cs.Aborted++
			continue
		case "committed":
		default:
			continue
		}
		d := float64(c.DurationMS)
		if !c.CommittedAt.IsZero() && !c.StartedAt.IsZero() {
			d = float64(c.CommittedAt.Sub(c.StartedAt)) / 1e6
		}
		ds = append(ds, d)
		bytes += c.Bytes
	}
	slices.Sort(ds)
	cs.Count = len(ds)
	cs.P50ms, cs.P99ms = quantile(ds, 0.5), quantile(ds, 0.99)
	if len(ds) > 0 {
		cs.MaxMs = ds[len(ds)-1]
		cs.MeanMB = float64(bytes) / float64(len(ds)) / 1e6
	} else {
		cs.MaxMs = math.NaN()
	}
}

// countLogProblems counts WARN and ERROR lines in a JSON log.
func countLogProblems(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			n++
		}
	}
	return n
}

// benchmark runs every scenario, rounds interleaved across targets.
func benchmark(ctx context.Context, cfg *config, rep *report, out io.Writer) error {
	total := len(cfg.scenarios) * cfg.rounds * len(cfg.targets)
	per := cfg.warmup + cfg.duration + 3*time.Second
	fmt.Fprintf(out, "%d runs of about %s each: about %s\n\n", total, per.Round(time.Second), (time.Duration(total) * per).Round(time.Second))
	for _, s := range cfg.scenarios {
		for round := 1; round <= cfg.rounds; round++ {
			for _, kind := range cfg.targets {
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted: %w", ctx.Err())
				}
				var r *runResult
				for attempt := 1; ; attempt++ {
					settle(ctx, 60*time.Second)
					waitQuiet(ctx, cfg, out)
					var err error
					if r, err = measure(ctx, cfg, s, kind, round, out); err != nil {
						return err
					}
					r.Attempt = attempt
					if !r.Contaminated || attempt > cfg.retries {
						break
					}
					fmt.Fprintf(out, "  %-13s %-8s round %d: other processes took %.2f cores (%s); running it again\n",
						s.Name, kind, round, r.Foreign, strings.Join(r.ForeignTop, ", "))
					rep.Discarded = append(rep.Discarded, r)
				}
				rep.Runs = append(rep.Runs, r)
				fmt.Fprintf(out, "  %-13s %-8s round %d: %10.0f records/s %7.1f MB/s  p50 %6.2f ms  p99 %7.2f ms  RSS %6.1f MiB  CPU: server %.2f, harness %.2f cores; machine %3.0f%% busy (softirq %2.0f%%, iowait %2.0f%%, steal %2.0f%%)%s\n",
					s.Name, kind, round, r.Load.RecordsPerSec, r.Load.MBPerSec, r.Load.P50ms, r.Load.P99ms,
					mib(r.PeakRSS), r.ServerCores, r.HarnessCores, r.MachineBusy*100, r.MachineCPU.SoftIRQ*100,
					r.MachineCPU.IOWait*100, r.MachineCPU.Steal*100, problems(r))
			}
		}
	}
	rep.Summary, rep.Ratios = summarize(cfg, rep.Runs)
	fmt.Fprintln(out)
	printTable(out, cfg, rep.Summary, rep.Ratios)
	return nil
}

func problems(r *runResult) string {
	var p []string
	if n := sumErrors(r.Load.Errors); n > 0 {
		p = append(p, fmt.Sprintf("%d errors %v", n, r.Load.Errors))
	}
	if r.Load.Throttled > 0 {
		p = append(p, fmt.Sprintf("%d×429", r.Load.Throttled))
	}
	if r.Target == "eosink" && r.IngestedMetric != float64(r.Load.AcceptedTotal) {
		p = append(p, fmt.Sprintf("eosink counted %.0f records, harness %d", r.IngestedMetric, r.Load.AcceptedTotal))
	}
	if r.Foreign > 0.05 {
		p = append(p, fmt.Sprintf("other processes took %.2f cores (%s)", r.Foreign, strings.Join(r.ForeignTop, ", ")))
	}
	if r.StopError != "" {
		p = append(p, "stop: "+r.StopError)
	}
	if r.LogProblems > 0 {
		p = append(p, fmt.Sprintf("%d WARN/ERROR log lines", r.LogProblems))
	}
	if len(p) == 0 {
		return ""
	}
	return "  !! " + strings.Join(p, "; ")
}

func sumErrors(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// summaryRow is the median over rounds of one scenario and target.
type summaryRow struct {
	Scenario      string           `json:"scenario"`
	Target        string           `json:"target"`
	Rounds        int              `json:"rounds"`
	RecordsPerSec float64          `json:"records_per_s"`
	MBPerSec      float64          `json:"mb_per_s"`
	ReqPerSec     float64          `json:"requests_per_s"`
	P50ms         float64          `json:"latency_p50_ms"`
	P99ms         float64          `json:"latency_p99_ms"`
	CkptP50ms     float64          `json:"checkpoint_p50_ms"`
	CkptP99ms     float64          `json:"checkpoint_p99_ms"`
	PeakRSSMiB    float64          `json:"peak_rss_mib"`
	ServerCores   float64          `json:"server_cpu_cores"`
	HarnessCores  float64          `json:"harness_cpu_cores"`
	MachineBusy   float64          `json:"machine_busy"`
	SoftIRQ       float64          `json:"machine_softirq"`
	IOWait        float64          `json:"machine_iowait"`
	Steal         float64          `json:"machine_steal"`
	IOWriteMBps   float64          `json:"server_io_write_mb_per_s"`
	GCPerSec      float64          `json:"gc_cycles_per_s,omitempty"`
	Foreign       float64          `json:"foreign_cpu_cores"`
	Contaminated  int              `json:"contaminated_runs"`
	CPUusPerRec   float64          `json:"server_cpu_us_per_record"`
	AllocPerRec   float64          `json:"alloc_bytes_per_record,omitempty"`
	DiskRatio     float64          `json:"disk_bytes_per_byte_in,omitempty"` // committed bytes / record bytes accepted
	DiskPerRecord float64          `json:"disk_bytes_per_record,omitempty"`
	Throttled     int64            `json:"throttled_429"`
	Errors        map[string]int64 `json:"errors"`
}

// ratio is eosink over baseline records/s for one scenario.
type ratio struct {
	Scenario string    `json:"scenario"`
	Median   float64   `json:"median_ratio"` // median eosink / median baseline
	PerRound []float64 `json:"per_round"`    // eosink/baseline of the same round
	Target   float64   `json:"target"`
	Pass     bool      `json:"pass"`
}

// targetRatio is what the issue asks of each scenario (0: no target).
func targetRatio(name string) float64 {
	switch name {
	case "text":
		return 0.90
	case "ndjson":
		return 0.60
	}
	return 0
}

func summarize(cfg *config, runs []*runResult) ([]summaryRow, []ratio) {
	var rows []summaryRow
	var ratios []ratio
	for _, s := range cfg.scenarios {
		byTarget := map[string]summaryRow{}
		for _, kind := range cfg.targets {
			var rs []*runResult
			for _, r := range runs {
				if r.Scenario == s.Name && r.Target == kind {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			med := func(f func(*runResult) float64) float64 {
				v := make([]float64, len(rs))
				for i, r := range rs {
					v[i] = f(r)
				}
				return median(v)
			}
			row := summaryRow{Scenario: s.Name, Target: kind, Rounds: len(rs), Errors: map[string]int64{},
				RecordsPerSec: med(func(r *runResult) float64 { return r.Load.RecordsPerSec }),
				MBPerSec:      med(func(r *runResult) float64 { return r.Load.MBPerSec }),
				ReqPerSec:     med(func(r *runResult) float64 { return r.Load.ReqPerSec }),
				P50ms:         med(func(r *runResult) float64 { return r.Load.P50ms }),
				P99ms:         med(func(r *runResult) float64 { return r.Load.P99ms }),
				PeakRSSMiB:    med(func(r *runResult) float64 { return mib(r.PeakRSS) }),
				ServerCores:   med(func(r *runResult) float64 { return r.ServerCores }),
				HarnessCores:  med(func(r *runResult) float64 { return r.HarnessCores }),
				MachineBusy:   med(func(r *runResult) float64 { return r.MachineBusy }),
				SoftIRQ:       med(func(r *runResult) float64 { return r.MachineCPU.SoftIRQ }),
				IOWait:        med(func(r *runResult) float64 { return r.MachineCPU.IOWait }),
				Steal:         med(func(r *runResult) float64 { return r.MachineCPU.Steal }),
				IOWriteMBps:   med(func(r *runResult) float64 { return r.IOWriteMB / r.Load.Seconds }),
				CPUusPerRec:   med(func(r *runResult) float64 { return r.ServerCPUus }),
				CkptP50ms:     math.NaN(),
				CkptP99ms:     math.NaN(),
			}
			if kind == "eosink" {
				row.CkptP50ms = med(func(r *runResult) float64 { return ckpt(r, true) })
				row.CkptP99ms = med(func(r *runResult) float64 { return ckpt(r, false) })
				row.AllocPerRec = med(func(r *runResult) float64 { return r.AllocPerRecord })
				row.GCPerSec = med(func(r *runResult) float64 { return r.GCCycles / r.Load.Seconds })
				row.DiskRatio = med(func(r *runResult) float64 { return safeDiv(float64(r.DestBytes), float64(r.BytesIn)) })
				row.DiskPerRecord = med(func(r *runResult) float64 {
					return safeDiv(float64(r.DestBytes), float64(r.Load.AcceptedTotal))
				})
			}
			row.Foreign = med(func(r *runResult) float64 { return r.Foreign })
			for _, r := range rs {
				if r.Contaminated {
					row.Contaminated++
				}
				row.Throttled += r.Load.Throttled
				for k, v := range r.Load.Errors {
					row.Errors[k] += v
				}
			}
			rows = append(rows, row)
			byTarget[kind] = row
		}
		b, okb := byTarget["baseline"]
		e, oke := byTarget["eosink"]
		if !okb || !oke || b.RecordsPerSec == 0 {
			continue
		}
		rt := ratio{Scenario: s.Name, Median: e.RecordsPerSec / b.RecordsPerSec, Target: targetRatio(s.Name)}
		for round := 1; round <= cfg.rounds; round++ {
			var bv, ev float64
			for _, r := range runs {
				if r.Scenario == s.Name && r.Round == round {
					if r.Target == "baseline" {
						bv = r.Load.RecordsPerSec
					} else {
						ev = r.Load.RecordsPerSec
					}
				}
			}
			if bv > 0 {
				rt.PerRound = append(rt.PerRound, ev/bv)
			}
		}
		rt.Pass = rt.Target == 0 || rt.Median >= rt.Target
		ratios = append(ratios, rt)
	}
	return rows, ratios
}

func ckpt(r *runResult, p50 bool) float64 {
	if r.Checkpoints == nil {
		return math.NaN()
	}
	if p50 {
		return r.Checkpoints.P50ms
	}
	return r.Checkpoints.P99ms
}

func fmtF(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func printTable(out io.Writer, cfg *config, rows []summaryRow, ratios []ratio) {
	what := "one run each"
	if cfg.rounds > 1 {
		what = fmt.Sprintf("medians of %d rounds", cfg.rounds)
	}
	fmt.Fprintf(out, "Results (%s; %d producers, %s measured after %s warmup):\n\n", what, cfg.producers, cfg.duration, cfg.warmup)
	fmt.Fprintf(out, "| %-12s | %-8s | %10s | %6s | %7s | %7s | %7s | %8s | %8s | %8s | %7s | %8s | %8s | %6s | %s |\n",
		"scenario", "target", "records/s", "MB/s", "req/s", "p50 ms", "p99 ms", "ckpt p50", "ckpt p99", "RSS MiB",
		"srv CPU", "µs/rec", "alloc/rec", "429s", "errors")
	fmt.Fprintf(out, "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n",
		dash(14), dash(10), dash(12), dash(8), dash(9), dash(9), dash(9), dash(10), dash(10), dash(10), dash(9), dash(10), dash(10), dash(8), dash(8))
	for _, r := range rows {
		errs := "0"
		if n := sumErrors(r.Errors); n > 0 {
			errs = fmt.Sprintf("%d %v", n, r.Errors)
		}
		alloc := "-"
		if r.AllocPerRec > 0 {
			alloc = fmt.Sprintf("%.0f B", r.AllocPerRec)
		}
		fmt.Fprintf(out, "| %-12s | %-8s | %10.0f | %6.1f | %7.0f | %7.2f | %7.2f | %8s | %8s | %8.1f | %7.2f | %8.2f | %8s | %6d | %s |\n",
			r.Scenario, r.Target, r.RecordsPerSec, r.MBPerSec, r.ReqPerSec, r.P50ms, r.P99ms,
			fmtF(r.CkptP50ms, 1), fmtF(r.CkptP99ms, 1), r.PeakRSSMiB, r.ServerCores, r.CPUusPerRec, alloc, r.Throttled, errs)
	}
	fmt.Fprintf(out, "\nWhere the CPUs went (medians; cores are CPU seconds per second, %d CPUs):\n\n", runtime.NumCPU())
	fmt.Fprintf(out, "| %-12s | %-8s | %7s | %7s | %7s | %7s | %7s | %7s | %9s | %9s | %11s |\n",
		"scenario", "target", "server", "harness", "busy", "softirq", "iowait", "steal", "disk MB/s", "GC/s", "other procs")
	fmt.Fprintf(out, "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dash(14), dash(10), dash(9), dash(9), dash(9), dash(9), dash(9), dash(9), dash(11), dash(11), dash(13))
	for _, r := range rows {
		gc := "-"
		if r.GCPerSec > 0 {
			gc = fmt.Sprintf("%.0f", r.GCPerSec)
		}
		other := fmt.Sprintf("%.2f", r.Foreign)
		if r.Contaminated > 0 {
			other += fmt.Sprintf(" (%d!)", r.Contaminated)
		}
		fmt.Fprintf(out, "| %-12s | %-8s | %7.2f | %7.2f | %6.0f%% | %6.0f%% | %6.0f%% | %6.0f%% | %9.0f | %9s | %11s |\n",
			r.Scenario, r.Target, r.ServerCores, r.HarnessCores, r.MachineBusy*100, r.SoftIRQ*100, r.IOWait*100, r.Steal*100, r.IOWriteMBps, gc, other)
	}
	if len(ratios) > 0 {
		fmt.Fprintf(out, "\neosink / baseline, records/s:\n\n")
		for _, rt := range ratios {
			verdict := "no target"
			if rt.Target > 0 {
				verdict = fmt.Sprintf("target >= %.2f: FAIL", rt.Target)
				if rt.Pass {
					verdict = fmt.Sprintf("target >= %.2f: PASS", rt.Target)
				}
			}
			var per []string
			for _, p := range rt.PerRound {
				per = append(per, fmt.Sprintf("%.3f", p))
			}
			fmt.Fprintf(out, "  %-13s %.3f  (%s; per round %s)\n", rt.Scenario, rt.Median, verdict, strings.Join(per, " "))
		}
	}
	printFormats(out, rows)
	fmt.Fprintf(out, "\nsrv CPU: server process CPU seconds per second (cores) in the window; µs/rec: its CPU time per record; RSS: largest VmRSS sampled every 250 ms.\n")
	fmt.Fprintf(out, "other procs: cores taken by other user processes during the window; (n!) counts kept runs above --max-foreign %.2f (after --retries %d).\n", cfg.maxForeign, cfg.retries)
}

func dash(n int) string { return strings.Repeat("-", n) }

func writeJSON(path string, v any) error {
	// encoding/json refuses NaN (a quantile of nothing): write null instead.
	scrubNaN(reflect.ValueOf(v))
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON report: %w", err)
	}
	b = bytes.ReplaceAll(b, []byte(nanSentinelText), []byte("null"))
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

const (
	nanSentinel     = -1.2345678e-300
	nanSentinelText = "-1.2345678e-300"
)

// scrubNaN replaces NaN and infinite floats reachable from v, in place,
// by nanSentinel.
func scrubNaN(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scrubNaN(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scrubNaN(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			scrubNaN(v.Index(i))
		}
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.Float64 {
			for _, k := range v.MapKeys() {
				if f := v.MapIndex(k).Float(); math.IsNaN(f) || math.IsInf(f, 0) {
					v.SetMapIndex(k, reflect.ValueOf(nanSentinel))
				}
			}
		}
	case reflect.Float64, reflect.Float32:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && v.CanSet() {
			v.SetFloat(nanSentinel)
		}
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// printFormats compares the encoded streams' eosink rows (ndjson-zstd,
// parquet) with the plain ndjson row of the same run: MB/s in, bytes on
// disk, server CPU per record.
func printFormats(out io.Writer, rows []summaryRow) {
	var plain *summaryRow
	for i := range rows {
		if rows[i].Scenario == "ndjson" && rows[i].Target == "eosink" {
			plain = &rows[i]
		}
	}
	var enc []summaryRow
	for _, r := range rows {
		if r.Target == "eosink" && (r.Scenario == "ndjson-zstd" || r.Scenario == "parquet") {
			enc = append(enc, r)
		}
	}
	if plain == nil || len(enc) == 0 {
		return
	}
	fmt.Fprintf(out, "\nFile formats (eosink; against the plain ndjson row of this run):\n\n")
	fmt.Fprintf(out, "| %-12s | %7s | %8s | %12s | %13s | %8s | %8s | %8s |\n",
		"scenario", "MB/s in", "vs plain", "disk B/rec", "disk/bytes in", "µs/rec", "vs plain", "ckpt p50")
	fmt.Fprintf(out, "|%s|%s|%s|%s|%s|%s|%s|%s|\n", dash(14), dash(9), dash(10), dash(14), dash(15), dash(10), dash(10), dash(10))
	for _, r := range append([]summaryRow{*plain}, enc...) {
		fmt.Fprintf(out, "| %-12s | %7.1f | %8s | %12.1f | %13.3f | %8.2f | %8s | %8s |\n",
			r.Scenario, r.MBPerSec, fmtF(safeDiv(r.MBPerSec, plain.MBPerSec), 2), r.DiskPerRecord, r.DiskRatio,
			r.CPUusPerRec, fmtF(safeDiv(r.CPUusPerRec, plain.CPUusPerRec), 2), fmtF(r.CkptP50ms, 1))
	}
}
