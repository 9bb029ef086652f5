package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// streamSeriesOf returns the stream label values of the per-stream
// counters of name in got, with their values.
func streamSeriesOf(got map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if rest, ok := strings.CutPrefix(k, name+`{stream="`); ok {
			out[strings.TrimSuffix(rest, `"}`)] = v
		}
	}
	return out
}

// TestStreamSeriesCapDefault: with the defaults, writing to many streams
// makes at most DefaultMaxStreamSeries series and one "_other", and no
// record goes uncounted.
func TestStreamSeriesCapDefault(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewMetrics(reg, nil).Hooks()
	const n = 2500
	for i := range n {
		h.Accepted(fmt.Sprintf("s%05d", i), 2, 10)
		h.Duplicate(fmt.Sprintf("s%05d", i))
	}
	got := series(t, reg)
	for _, name := range []string{"eosink_records_ingested_total", "eosink_bytes_ingested_total", "eosink_duplicates_dropped_total"} {
		ss := streamSeriesOf(got, name)
		if len(ss) > 1000+1 {
			t.Errorf("%s: %d stream series, want at most 1001", name, len(ss))
		}
		sum := 0.0
		for _, v := range ss {
			sum += v
		}
		if want := map[string]float64{"eosink_records_ingested_total": 2 * n, "eosink_bytes_ingested_total": 10 * n,
			"eosink_duplicates_dropped_total": n}[name]; sum != want {
			t.Errorf("%s: sums to %v, want %v", name, sum, want)
		}
	}
}

// TestStreamSeriesIdleSwept: series of streams unwritten for StreamIdle are
// deleted, which frees room under the cap for new streams.
func TestStreamSeriesIdleSwept(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	m := NewMetricsWith(reg, nil, MetricsConfig{MaxStreams: 3, StreamIdle: time.Hour, Now: func() time.Time { return now }})
	h := m.Hooks()
	step := func(d time.Duration) { now = now.Add(d) }
	want := func(when string, exp map[string]float64) {
		t.Helper()
		got := streamSeriesOf(series(t, reg), "eosink_records_ingested_total")
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("%s: series %v, want %v", when, got, exp)
		}
	}
	for _, s := range []string{"a", "b", "c", "d", "e", "a"} {
		h.Accepted(s, 1, 1)
	}
	want("past the cap", map[string]float64{"a": 2, "b": 1, "c": 1, "_other": 2})

	step(40 * time.Minute)
	h.Accepted("a", 1, 1)
	h.Accepted("f", 1, 1) // still full
	want("40m later", map[string]float64{"a": 3, "b": 1, "c": 1, "_other": 3})

	step(30 * time.Minute) // b, c idle 70m; _other 30m; a 30m
	h.Checkpoint(CheckpointResult{})
	want("70m: b and c swept", map[string]float64{"a": 3, "_other": 3})
	h.Accepted("g", 1, 1)
	h.Accepted("h", 1, 1)
	h.Accepted("i", 1, 1) // full again: a, g, h
	want("new streams take the freed room", map[string]float64{"a": 3, "g": 1, "h": 1, "_other": 4})

	step(2 * time.Hour)
	h.Checkpoint(CheckpointResult{})
	want("all idle", map[string]float64{})
}
