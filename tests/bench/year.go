package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// yearConfig sizes --year, "a year in an hour": the history a long-lived
// service piles up (producers, streams, checkpoints), pressed into one run.
type yearConfig struct {
	inits, streams, checkpoints int
	dataEvery                   int           // every n-th checkpoint of the checkpoint phase holds one record
	workers                     int           // concurrent clients in the history phases
	sampleEvery                 time.Duration // RSS and state-file size series
	latency                     time.Duration // each write-latency phase
	phaseLimit                  time.Duration // a history phase stops here, done or not
	restarts                    int           // SIGKILL + start, timed, at the end
	polls                       []string      // URLs polled in the "polled" latency phase
}

// yearPoint is one row of the series: where the history stands, and the
// process's memory and the state file's size.
type yearPoint struct {
	T           float64 `json:"t_s"`
	Phase       string  `json:"phase"`
	Inits       int64   `json:"inits"`
	Streams     int64   `json:"streams_written"`
	Checkpoints int64   `json:"checkpoints"`
	RSSMiB      float64 `json:"rss_mib"`
	AnonMiB     float64 `json:"rss_anon_mib"`
	FileMiB     float64 `json:"rss_file_mib"`
	StateBytes  int64   `json:"state_db_bytes"`
}

// yearPhase is one history phase: how much it did, how fast, and what it
// cost in state-file bytes and resident memory per unit.
type yearPhase struct {
	Name          string           `json:"name"`
	Count         int64            `json:"count"`
	Target        int              `json:"target"`
	Seconds       float64          `json:"seconds"`
	PerSec        float64          `json:"per_s"`
	StateBefore   int64            `json:"state_db_bytes_before"`
	StateAfter    int64            `json:"state_db_bytes_after"`
	StatePerUnit  float64          `json:"state_db_bytes_per_unit"`
	RSSBeforeMiB  float64          `json:"rss_before_mib"`
	RSSAfterMiB   float64          `json:"rss_after_mib"`
	AnonPerUnit   float64          `json:"rss_anon_bytes_per_unit"`
	SecondHalfSt  float64          `json:"state_db_bytes_per_unit_second_half"`
	SecondHalfRSS float64          `json:"rss_bytes_per_unit_second_half"`
	Errors        map[string]int64 `json:"errors,omitempty"`
}

// yearLatency is one write-latency phase.
type yearLatency struct {
	Name     string             `json:"name"`
	Requests int64              `json:"requests"`
	P50ms    float64            `json:"p50_ms"`
	P99ms    float64            `json:"p99_ms"`
	MaxMs    float64            `json:"max_ms"`
	Polls    map[string]int64   `json:"polls,omitempty"` // URL -> answers read meanwhile
	PollP99  map[string]float64 `json:"poll_p99_ms,omitempty"`
	Errors   map[string]int64   `json:"errors,omitempty"`
}

// yearList is the size of one list answer at the end.
type yearList struct {
	URL    string  `json:"url"`
	Status int     `json:"status"`
	Bytes  int     `json:"bytes"`
	Items  int     `json:"items"` // entries of the JSON list, -1 for HTML
	Ms     float64 `json:"ms"`
}

// yearResult is the output of --year.
type yearResult struct {
	Inits       int           `json:"inits_target"`
	Streams     int           `json:"streams_target"`
	Checkpoints int           `json:"checkpoints_target"`
	Phases      []yearPhase   `json:"phases"`
	Latency     []yearLatency `json:"latency"`
	Lists       []yearList    `json:"lists"`
	Series      []yearPoint   `json:"series"`
	// RestartSeconds is, per SIGKILL and start, the time from starting the
	// process to /readyz 200.
	RestartSeconds []float64 `json:"restart_s"`
	RSSAfterStart  []float64 `json:"rss_after_restart_mib"`
	StateFinal     int64     `json:"state_db_bytes_final"`
	LogProblems    int       `json:"log_warn_error_lines"`
}

// yearProgress is what the phases have done so far; the sampler reads it.
type yearProgress struct {
	phase                atomic.Value // string
	inits, streams, ckpt atomic.Int64
}

// year runs "a year in an hour" against one eosink with
// --checkpoint-interval 0: yc.inits producer inits, one write to each of
// yc.streams streams (by the first producers, each its own stream), and
// yc.checkpoints checkpoint requests, most of them empty. Meanwhile it
// samples the RSS and the size of state.db. Then it measures the write
// latency idle and while GET /v1/producers and the UI overview are polled,
// records the size of every list answer, and kills the process with
// SIGKILL and times its start, yc.restarts times.
func year(ctx context.Context, cfg *config, yc yearConfig, out io.Writer) (*yearResult, error) {
	res := &yearResult{Inits: yc.inits, Streams: yc.streams, Checkpoints: yc.checkpoints}
	data := filepath.Join(cfg.workDir, "data-year")
	t, err := startEosinkAt(ctx, cfg, cfg.bin, cfg.workDir, data, "year", 0)
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = t.Stop(cfg.stopTimeout) }()
	statePath := filepath.Join(data, "state.db")
	hc := loadClient(yc.workers + 4)
	defer hc.CloseIdleConnections()

	lctx, release := guardDisk(ctx, cfg.workDir, cfg.minFree)
	defer release()

	var prog yearProgress
	prog.phase.Store("start")
	begin := time.Now()
	var (
		mu     sync.Mutex
		series []yearPoint
	)
	pid := t.PID
	sample := func() yearPoint {
		p := yearPoint{T: time.Since(begin).Seconds(), Phase: prog.phase.Load().(string),
			Inits: prog.inits.Load(), Streams: prog.streams.Load(), Checkpoints: prog.ckpt.Load()}
		if m, err := readMem(pid); err == nil {
			p.RSSMiB, p.AnonMiB, p.FileMiB = mib(m.RSS), mib(m.Anon), mib(m.File)
		}
		if fi, err := os.Stat(statePath); err == nil {
			p.StateBytes = fi.Size()
		}
		mu.Lock()
		series = append(series, p)
		mu.Unlock()
		return p
	}
	sctx, stopSampler := context.WithCancel(lctx)
	var swg sync.WaitGroup
	fmt.Fprintf(out, "  %7s  %-11s  %9s  %8s  %11s  %8s  %8s  %8s  %12s\n", "t", "phase", "inits", "streams", "checkpoints", "RSS MiB", "anon", "file", "state.db")
	swg.Go(func() {
		tick := time.NewTicker(yc.sampleEvery)
		defer tick.Stop()
		for {
			p := sample()
			fmt.Fprintf(out, "  %6.0fs  %-11s  %9d  %8d  %11d  %8.1f  %8.1f  %8.1f  %12d\n", p.T, p.Phase, p.Inits, p.Streams, p.Checkpoints, p.RSSMiB, p.AnonMiB, p.FileMiB, p.StateBytes)
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	stopSeries := func() {
		stopSampler()
		swg.Wait()
		res.Series = series
	}

	// phase runs n units of work on yc.workers clients, and measures the
	// state file and the RSS around it (and at its half, so a rate that
	// keeps growing shows).
	phase := func(name string, n int, counter *atomic.Int64, unit func(ctx context.Context, i int) error) error {
		prog.phase.Store(name)
		before := sample()
		ph := yearPhase{Name: name, Target: n, StateBefore: before.StateBytes, RSSBeforeMiB: before.RSSMiB, Errors: map[string]int64{}}
		pctx, cancel := context.WithTimeout(lctx, yc.phaseLimit)
		defer cancel()
		var next atomic.Int64
		var emu sync.Mutex
		var half yearPoint
		var halfOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for range yc.workers {
			wg.Go(func() {
				for pctx.Err() == nil {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					if i == n/2 {
						halfOnce.Do(func() { half = sample() })
					}
					if err := unit(pctx, i); err != nil {
						if pctx.Err() != nil {
							return
						}
						emu.Lock()
						ph.Errors[err.Error()]++
						emu.Unlock()
						continue
					}
					counter.Add(1)
				}
			})
		}
		wg.Wait()
		ph.Seconds = time.Since(start).Seconds()
		after := sample()
		ph.Count = counter.Load()
		ph.PerSec = float64(ph.Count) / ph.Seconds
		ph.StateAfter, ph.RSSAfterMiB = after.StateBytes, after.RSSMiB
		if ph.Count > 0 {
			ph.StatePerUnit = float64(after.StateBytes-before.StateBytes) / float64(ph.Count)
			ph.AnonPerUnit = (after.AnonMiB - before.AnonMiB) * (1 << 20) / float64(ph.Count)
		}
		if hc := phaseCount(half, name); hc > 0 && ph.Count > hc {
			ph.SecondHalfSt = float64(after.StateBytes-half.StateBytes) / float64(ph.Count-hc)
			ph.SecondHalfRSS = (after.RSSMiB - half.RSSMiB) * (1 << 20) / float64(ph.Count-hc)
		}
		res.Phases = append(res.Phases, ph)
		fmt.Fprintf(out, "  -- %s: %d of %d in %.0f s (%.0f/s); state.db %d -> %d bytes (%.1f B/unit, second half %.1f); RSS %.1f -> %.1f MiB (anon %.1f B/unit); errors %v\n",
			name, ph.Count, n, ph.Seconds, ph.PerSec, ph.StateBefore, ph.StateAfter, ph.StatePerUnit, ph.SecondHalfSt, ph.RSSBeforeMiB, ph.RSSAfterMiB, ph.AnonPerUnit, ph.Errors)
		if err := lctx.Err(); err != nil {
			return context.Cause(lctx)
		}
		return nil
	}

	// 1. Producer inits.
	epochs := make([]int32, yc.inits)
	if err := phase("inits", yc.inits, &prog.inits, func(ctx context.Context, i int) error {
		ep, _, err := initProducer(ctx, hc, t.URL, yearProducer(i), "")
		if err == nil {
			epochs[i] = int32(ep)
			return nil
		}
		return errors.New("init failed")
	}); err != nil {
		stopSeries()
		return res, err
	}

	// 2. One write to each stream, by producer i (its seq 0) while there
	// are initialised producers, else without producer headers. With
	// --checkpoint-interval 0 a checkpointer commits them every 500 ms.
	cctx, stopCkpt := context.WithCancel(lctx)
	var cwg sync.WaitGroup
	checkpointer := func(every time.Duration) {
		cwg.Go(func() {
			for cctx.Err() == nil {
				_, _ = postCheckpoint(cctx, hc, t.URL)
				select {
				case <-cctx.Done():
				case <-time.After(every):
				}
			}
		})
	}
	checkpointer(500 * time.Millisecond)
	recordLine := record("year", 1, 200)
	err = phase("streams", yc.streams, &prog.streams, func(ctx context.Context, i int) error {
		h := http.Header{"Content-Type": {"application/x-ndjson"}}
		if i < yc.inits && epochs[i] > 0 {
			h.Set("Producer-Id", yearProducer(i))
			h.Set("Producer-Epoch", strconv.Itoa(int(epochs[i])))
			h.Set("Producer-Seq", "0")
		}
		return writeRetrying(ctx, hc, t.URL, yearStream(i), h, recordLine)
	})
	stopCkpt()
	cwg.Wait()
	if err != nil {
		stopSeries()
		return res, err
	}

	// 3. Checkpoints: every dataEvery-th holds one record (so the
	// retention of checkpoint rows is exercised), the rest are empty.
	var dataSeq atomic.Int64
	dataEpoch, _, err := initProducer(lctx, hc, t.URL, "year-ckpt", "")
	if err != nil {
		stopSeries()
		return res, err
	}
	var dmu sync.Mutex // the data writes of one producer go in order
	if err := phase("checkpoints", yc.checkpoints, &prog.ckpt, func(ctx context.Context, i int) error {
		if yc.dataEvery > 0 && i%yc.dataEvery == 0 {
			dmu.Lock()
			seq := dataSeq.Load()
			h := http.Header{"Content-Type": {"application/x-ndjson"}, "Producer-Id": {"year-ckpt"},
				"Producer-Epoch": {strconv.FormatInt(dataEpoch, 10)}, "Producer-Seq": {strconv.FormatInt(seq, 10)}}
			err := writeRetrying(ctx, hc, t.URL, "year-ckpt", h, recordLine)
			if err == nil {
				dataSeq.Add(1)
			}
			dmu.Unlock()
			if err != nil {
				return err
			}
		}
		st, err := postCheckpoint(ctx, hc, t.URL)
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("checkpoint: %d", st)
		}
		return nil
	}); err != nil {
		stopSeries()
		return res, err
	}

	// 4. Write latency: idle; while as many clients poll /readyz in a loop
	// (the baseline: what any poll loop costs the writers on this machine);
	// while the lists are polled; idle again at the end, to see the noise.
	prog.phase.Store("latency")
	probes := make([]string, len(yc.polls))
	for i := range probes {
		probes[i] = "/readyz"
	}
	for _, ph := range []struct {
		name  string
		polls []string
	}{{"idle", nil}, {"probes", probes}, {"polled", yc.polls}, {"idle", nil}} {
		name, polls := ph.name, ph.polls
		l := measureYearLatency(lctx, hc, t.URL, yc.latency, polls)
		l.Name = name
		res.Latency = append(res.Latency, l)
		fmt.Fprintf(out, "  -- latency %s: %d writes, p50 %.2f ms, p99 %.2f ms, max %.1f ms; polls %v (p99 ms %v); errors %v\n",
			name, l.Requests, l.P50ms, l.P99ms, l.MaxMs, l.Polls, l.PollP99, l.Errors)
	}
	if idle := idleP99(res.Latency); idle > 0 {
		for _, l := range res.Latency {
			if l.Name != "idle" {
				fmt.Fprintf(out, "  -- write p99 %s / idle: %.2f (idle p99 %.2f ms, the mean of the idle phases)\n", l.Name, l.P99ms/idle, idle)
			}
		}
	}

	// 5. The size of every list answer.
	prog.phase.Store("lists")
	for _, u := range yearLists {
		l := measureList(lctx, hc, t.URL, u)
		res.Lists = append(res.Lists, l)
		fmt.Fprintf(out, "  -- GET %-38s %d  %9d bytes  %6d items  %7.1f ms\n", l.URL, l.Status, l.Bytes, l.Items, l.Ms)
	}
	stopSeries()
	if fi, err := os.Stat(statePath); err == nil {
		res.StateFinal = fi.Size()
	}
	res.LogProblems = countLogProblems(t.LogPath)

	// 6. SIGKILL, then a start on the same data dir, timed to /readyz.
	for r := range yc.restarts {
		t.Kill9()
		begin := time.Now()
		label := fmt.Sprintf("year-restart%d", r+1)
		nt, err := startEosinkAt(lctx, cfg, cfg.bin, cfg.workDir, data, label, 0)
		if err != nil {
			return res, fmt.Errorf("restart %d: %w", r+1, err)
		}
		d := time.Since(begin).Seconds()
		t = nt
		res.RestartSeconds = append(res.RestartSeconds, d)
		m, _ := readMem(t.PID)
		res.RSSAfterStart = append(res.RSSAfterStart, mib(m.RSS))
		fmt.Fprintf(out, "  -- SIGKILL, start %d: ready in %.3f s, RSS %.1f MiB\n", r+1, d, mib(m.RSS))
	}
	return res, nil
}

// idleP99 is the mean write p99 of the idle latency phases, 0 without one.
func idleP99(ls []yearLatency) float64 {
	var sum float64
	n := 0
	for _, l := range ls {
		if l.Name == "idle" {
			sum += l.P99ms
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

var yearLists = []string{
	"/v1/producers", "/v1/producers?limit=10000", "/v1/streams", "/v1/files", "/v1/checkpoints",
	"/ui/", "/ui/producers", "/ui/checkpoints", "/metrics",
}

func yearProducer(i int) string { return fmt.Sprintf("year-p%07d", i) }
func yearStream(i int) string   { return fmt.Sprintf("year-s%06d", i) }

// phaseCount is how far a sample taken in phase name had got.
func phaseCount(p yearPoint, name string) int64 {
	switch name {
	case "inits":
		return p.Inits
	case "streams":
		return p.Streams
	case "checkpoints":
		return p.Checkpoints
	}
	return 0
}

// postCheckpoint runs POST /v1/checkpoints and returns its status.
func postCheckpoint(ctx context.Context, hc *http.Client, base string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/checkpoints", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, errors.New("checkpoint: transport")
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// writeRetrying posts one batch, again after Retry-After on 429 and 503,
// until it is accepted (200/202) or refused otherwise.
func writeRetrying(ctx context.Context, hc *http.Client, base, stream string, h http.Header, body []byte) error {
	for ctx.Err() == nil {
		status, ra, err := post(ctx, hc, base+"/v1/streams/"+stream+"/records", h, body)
		switch {
		case err != nil:
			return errors.New("write: transport")
		case status == http.StatusOK || status == http.StatusAccepted:
			return nil
		case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
			select {
			case <-ctx.Done():
			case <-time.After(min(retryAfter(ra), 200*time.Millisecond)):
			}
		default:
			return fmt.Errorf("write: %d", status)
		}
	}
	return ctx.Err()
}

func post(ctx context.Context, hc *http.Client, u string, h http.Header, body []byte) (status int, retry string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header = h.Clone()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// measureYearLatency runs 4 producers writing 10 × 1 KiB batches to their
// own streams for d, with a checkpoint every second; meanwhile one more
// client per URL of polls GETs it in a loop.
func measureYearLatency(ctx context.Context, hc *http.Client, base string, d time.Duration, polls []string) yearLatency {
	const writers = 4
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	l := yearLatency{Errors: map[string]int64{}, Polls: map[string]int64{}, PollP99: map[string]float64{}}
	var mu sync.Mutex
	var lat []float64
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = postCheckpoint(ctx, hc, base)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	{
		for _, u := range polls {
			wg.Go(func() {
				var ds []float64
				for ctx.Err() == nil {
					t0 := time.Now()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+u, nil)
					resp, err := hc.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ds = append(ds, float64(time.Since(t0))/1e6)
				}
				slices.Sort(ds)
				mu.Lock()
				l.Polls[u] += int64(len(ds)) // the probes phase polls one URL from several clients
				l.PollP99[u] = max(l.PollP99[u], quantile(ds, 0.99))
				mu.Unlock()
			})
		}
	}
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("year-lat%d", w)
			stream := fmt.Sprintf("year-lat%d", w)
			ep, seq, err := initProducer(ctx, hc, base, id, stream)
			if err != nil {
				mu.Lock()
				l.Errors["init"]++
				mu.Unlock()
				return
			}
			b := body(scenario{Records: 10, RecordBytes: 1024}, id)
			h := http.Header{"Content-Type": {"application/x-ndjson"}, "Producer-Id": {id}, "Producer-Epoch": {strconv.FormatInt(ep, 10)}}
			var mine []float64
			for ctx.Err() == nil {
				h.Set("Producer-Seq", strconv.FormatInt(seq, 10))
				t0 := time.Now()
				status, _, err := post(ctx, hc, base+"/v1/streams/"+stream+"/records", h, b)
				if ctx.Err() != nil {
					break
				}
				if err != nil || (status != http.StatusAccepted && status != http.StatusOK) {
					mu.Lock()
					l.Errors[strconv.Itoa(status)]++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				mine = append(mine, float64(time.Since(t0))/1e6)
				seq++
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	l.Requests = int64(len(lat))
	l.P50ms, l.P99ms = quantile(lat, 0.5), quantile(lat, 0.99)
	if len(lat) > 0 {
		l.MaxMs = lat[len(lat)-1]
	} else {
		l.MaxMs = math.NaN()
	}
	return l
}

// measureList reads one list answer whole and counts its entries.
func measureList(ctx context.Context, hc *http.Client, base, u string) yearList {
	l := yearList{URL: u, Items: -1}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+u, nil)
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return l
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.Ms = float64(time.Since(t0)) / 1e6
	l.Status, l.Bytes = resp.StatusCode, len(b)
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) == nil {
		for _, k := range []string{"producers", "streams", "files", "checkpoints"} {
			var items []json.RawMessage
			if raw, ok := m[k]; ok && json.Unmarshal(raw, &items) == nil {
				l.Items = len(items)
			}
		}
	}
	return l
}
