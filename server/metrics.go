package server

import (
	"runtime"
	"runtime/debug"

	"github.com/eosink/eosink/recovery"
	"github.com/prometheus/client_golang/prometheus"
)

// rejectReasons are the reasons the engine passes to Hooks.Rejected, which
// NewMetrics starts at 0 so that alerts see 0 rather than no data.
// TestRejectReasonsComplete keeps the list equal to the engine's calls.
func rejectReasons() []string {
	return []string{"unknown_producer", "producer_fenced", "invalid_epoch", "out_of_order_sequence", "backpressure", "storage", "idempotency_key_reused"}
}

// Metrics are the engine's Prometheus metrics, registered on a registry the
// caller owns.
type Metrics struct {
	records     *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	fenced      prometheus.Counter
	ckptSeconds prometheus.Histogram
	ckpts       *prometheus.CounterVec
	files       prometheus.Counter
	stuck       prometheus.Counter
	orphans     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg. status is read
// at scrape time for the gauges; it may be set later with SetStatus.
func NewMetrics(reg prometheus.Registerer, status func() Status) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_records_ingested_total",
			Help: "Records accepted into open checkpoints, by stream."}, []string{"stream"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_bytes_ingested_total",
			Help: "Bytes accepted into open checkpoints, by stream."}, []string{"stream"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_batches_rejected_total",
			Help: "Batches refused by the engine, by reason."}, []string{"reason"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_duplicates_dropped_total",
			Help: "Batches dropped as duplicates of an accepted sequence number or idempotency key, by stream."}, []string{"stream"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "eosink_producers_fenced_total",
			Help: "Writes refused because a newer epoch fenced the producer."}),
		ckptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eosink_checkpoint_duration_seconds",
			Help: "Time from barrier to committed or aborted, of checkpoints that held data.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}),
		ckpts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_checkpoints_total",
			Help: "Checkpoints ended, by state."}, []string{"state"}),
		files: prometheus.NewCounter(prometheus.CounterOpts{Name: "eosink_files_committed_total",
			Help: "Files made final."}),
		stuck: prometheus.NewCounter(prometheus.CounterOpts{Name: "eosink_commit_retries_total",
			Help: "Failed attempts to commit a prepared checkpoint (each is retried)."}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_orphans_removed_total",
			Help: "Uploads and staging objects no prepared checkpoint named, removed by recovery or the orphan sweep, by kind (intent: a failed abort retried; upload; object)."}, []string{"kind"}),
	}
	for _, kind := range []string{"intent", "upload", "object"} {
		m.orphans.WithLabelValues(kind) // shown as 0 before the first removal
	}
	gauge := func(name, help string, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if status == nil {
				return 0
			}
			return f(status())
		})
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	// Every label value known in advance exists from the start, at 0.
	for _, st := range []recovery.State{recovery.Committed, recovery.Aborted} {
		m.ckpts.WithLabelValues(string(st))
	}
	for _, r := range rejectReasons() {
		m.rejected.WithLabelValues(r)
	}
	bi, ok := debug.ReadBuildInfo()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "eosink_build_info",
		Help: "Always 1; the labels tell the version, VCS revision and Go version of the running binary.", ConstLabels: buildLabels(bi, ok)})
	build.Set(1)
	reg.MustRegister(m.records, m.bytes, m.rejected, m.duplicates, m.fenced, m.ckptSeconds, m.ckpts, m.files, m.stuck, m.orphans, build,
		gauge("eosink_uncommitted_bytes", "Bytes accepted but not yet committed (open and in-flight checkpoints).", func(s Status) float64 { return float64(s.Held) }),
		gauge("eosink_open_checkpoint_bytes", "Bytes in the open checkpoint.", func(s Status) float64 { return float64(s.OpenBytes) }),
		gauge("eosink_open_checkpoint_id", "Id of the open checkpoint.", func(s Status) float64 { return float64(s.OpenID) }),
		gauge("eosink_idempotency_keys", "Idempotency keys held, accepted or prepared (bounded by --idempotency-max-keys and --idempotency-window).", func(s Status) float64 { return float64(s.Keys) }),
		gauge("eosink_ready", "1 once recovery finished and writes are accepted.", func(s Status) float64 { return b2f(s.Ready) }),
		gauge("eosink_commit_stuck", "1 while a prepared checkpoint fails to commit and is being retried.", func(s Status) float64 { return b2f(s.Stuck != "") }),
	)
	return m
}

// Hooks returns engine hooks that update m.
func (m *Metrics) Hooks() Hooks {
	return Hooks{
		Accepted: func(stream string, records, bytes int) {
			m.records.WithLabelValues(stream).Add(float64(records))
			m.bytes.WithLabelValues(stream).Add(float64(bytes))
		},
		Duplicate: func(stream string) { m.duplicates.WithLabelValues(stream).Inc() },
		Rejected: func(reason string) {
			m.rejected.WithLabelValues(reason).Inc()
			if reason == "producer_fenced" {
				m.fenced.Inc()
			}
		},
		Checkpoint: func(r CheckpointResult) {
			m.ckpts.WithLabelValues(string(r.State)).Inc()
			if r.Records > 0 || len(r.Files) > 0 {
				// Empty checkpoints would crowd the histogram with zeros.
				m.ckptSeconds.Observe(r.Seconds)
			}
			if r.State == recovery.Committed {
				m.files.Add(float64(len(r.Files)))
			}
		},
		CommitStuck:    func(uint64, error) { m.stuck.Inc() },
		OrphansRemoved: func(kind string, n int) { m.orphans.WithLabelValues(kind).Add(float64(n)) },
	}
}

// buildLabels are eosink_build_info's labels from the binary's build info
// (ok false when it has none): the main module's version ("(devel)" for a
// build from a work tree), the VCS revision with "-dirty" when the tree had
// changes ("unknown" without VCS data), and the Go version.
func buildLabels(bi *debug.BuildInfo, ok bool) prometheus.Labels {
	l := prometheus.Labels{"version": "unknown", "revision": "unknown", "goversion": runtime.Version()}
	if !ok || bi == nil {
		return l
	}
	if bi.Main.Version != "" {
		l["version"] = bi.Main.Version
	}
	if bi.GoVersion != "" {
		l["goversion"] = bi.GoVersion
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if dirty {
			rev += "-dirty"
		}
		l["revision"] = rev
	}
	return l
}
