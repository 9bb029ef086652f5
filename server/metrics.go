package server

import (
	"github.com/eosink/eosink/internal/buildinfo"
	"sync"
	"time"

	"github.com/eosink/eosink/recovery"
	"github.com/prometheus/client_golang/prometheus"
)

// rejectReasons are the reasons the engine passes to Hooks.Rejected, which
// NewMetrics starts at 0 so that alerts see 0 rather than no data.
// TestRejectReasonsComplete keeps the list equal to the engine's calls.
func rejectReasons() []string {
	return []string{"unknown_producer", "producer_fenced", "invalid_epoch", "out_of_order_sequence", "backpressure", "storage", "idempotency_key_reused",
		"invalid_records"} // invalid_records: streams.go (partition, schema, content type)
}

// Defaults of MetricsConfig.
const (
	DefaultMaxStreamSeries  = 1000
	DefaultStreamSeriesIdle = time.Hour
)

// OtherStream is the stream label under which the per-stream counters count
// streams beyond MetricsConfig.MaxStreams; no stream name starts with '_'.
const OtherStream = "_other"

// MetricsConfig bounds the per-stream series, so that they do not grow with
// every stream ever written (I11).
type MetricsConfig struct {
	// MaxStreams is how many streams have series of their own; writes to
	// more are counted under stream="_other". Default 1000.
	MaxStreams int
	// StreamIdle is how long a stream's series outlive its last write; a
	// sweep, run at most every StreamIdle/4 on writes and checkpoints,
	// deletes older ones. Default 1h.
	StreamIdle time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Metrics are the engine's Prometheus metrics, registered on a registry the
// caller owns.
type Metrics struct {
	streams     *streamSeries
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
	expired     prometheus.Counter
}

// NewMetrics creates the metrics with the default MetricsConfig and
// registers them on reg. status is read at scrape time for the gauges.
func NewMetrics(reg prometheus.Registerer, status func() Status) *Metrics {
	return NewMetricsWith(reg, status, MetricsConfig{})
}

// NewMetricsWith is NewMetrics with bounds on the per-stream series.
func NewMetricsWith(reg prometheus.Registerer, status func() Status, cfg MetricsConfig) *Metrics {
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreamSeries
	}
	if cfg.StreamIdle <= 0 {
		cfg.StreamIdle = DefaultStreamSeriesIdle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
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
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "eosink_producers_expired_total",
			Help: "Producers forgotten after --producer-expiry idle with nothing uncommitted."}),
	}
	for _, kind := range []string{"intent", "upload", "object"} {
		m.orphans.WithLabelValues(kind) // shown as 0 before the first removal
	}
	m.streams = &streamSeries{max: cfg.MaxStreams, idle: cfg.StreamIdle, now: cfg.Now, seen: map[string]time.Time{},
		vecs: []*prometheus.CounterVec{m.records, m.bytes, m.duplicates}}
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
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "eosink_build_info",
		Help: "Always 1; the labels tell the version, VCS revision and Go version of the running binary.", ConstLabels: buildLabels(buildinfo.Read())})
	build.Set(1)
	reg.MustRegister(m.records, m.bytes, m.rejected, m.duplicates, m.fenced, m.ckptSeconds, m.ckpts, m.files, m.stuck, m.orphans, m.expired, build,
		gauge("eosink_uncommitted_bytes", "Bytes accepted but not yet committed (open and in-flight checkpoints).", func(s Status) float64 { return float64(s.Held) }),
		gauge("eosink_open_checkpoint_bytes", "Bytes in the open checkpoint.", func(s Status) float64 { return float64(s.OpenBytes) }),
		gauge("eosink_open_checkpoint_id", "Id of the open checkpoint.", func(s Status) float64 { return float64(s.OpenID) }),
		gauge("eosink_idempotency_keys", "Idempotency keys held, accepted or prepared (bounded by --idempotency-max-keys and --idempotency-window).", func(s Status) float64 { return float64(s.Keys) }),
		gauge("eosink_ready", "1 once recovery finished and writes are accepted.", func(s Status) float64 { return b2f(s.Ready) }),
		gauge("eosink_commit_stuck", "1 while a prepared checkpoint fails to commit and is being retried.", func(s Status) float64 { return b2f(s.Stuck != "") }),
		gauge("eosink_commit_stuck_permanent", "1 while a prepared checkpoint fails to commit with an error no retry cures: it needs an operator.", func(s Status) float64 { return b2f(s.StuckPermanent) }),
		gauge("eosink_tables_parked", "Table streams whose table commit is parked: it fails with an error no retry cures (planted or incompatible table metadata) and waits for an operator, while the node's other streams commit; the stream's writes are refused with backpressure meanwhile.", func(s Status) float64 { return float64(s.TablesParked) }),
		gauge("eosink_table_metadata_passed_over", "Table metadata files the table commits passed over since the start: documents at a table's newest versions that are no metadata of it (planted); the commits wrote past them.", func(s Status) float64 { return float64(s.TablePassedOver) }),
		gauge("eosink_files_lost", "Part files of prepared checkpoints recorded committed without them since the start: neither their staged data nor a final file existed (removed after the commit, or staged data lost); the log names each.", func(s Status) float64 { return float64(s.LostFiles) }),
		gauge("eosink_files_displaced", "Part files committed under <stream>/_displaced/ since the start, because the destination refused their own name for good.", func(s Status) float64 { return float64(s.Displaced) }),
	)
	return m
}

// Hooks returns engine hooks that update m.
func (m *Metrics) Hooks() Hooks {
	return Hooks{
		Accepted: func(stream string, records, bytes int) {
			m.streams.add(stream, func(label string) {
				m.records.WithLabelValues(label).Add(float64(records))
				m.bytes.WithLabelValues(label).Add(float64(bytes))
			})
		},
		Duplicate: func(stream string) {
			m.streams.add(stream, func(label string) { m.duplicates.WithLabelValues(label).Inc() })
		},
		Rejected: func(reason string) {
			m.rejected.WithLabelValues(reason).Inc()
			if reason == "producer_fenced" {
				m.fenced.Inc()
			}
		},
		Checkpoint: func(r CheckpointResult) {
			m.streams.maybeSweep()
			m.ckpts.WithLabelValues(string(r.State)).Inc()
			if r.Records > 0 || len(r.Files) > 0 {
				// Empty checkpoints would crowd the histogram with zeros.
				m.ckptSeconds.Observe(r.Seconds)
			}
			if r.State == recovery.Committed {
				m.files.Add(float64(len(r.Files)))
			}
		},
		CommitStuck:      func(uint64, error) { m.stuck.Inc() },
		OrphansRemoved:   func(kind string, n int) { m.orphans.WithLabelValues(kind).Add(float64(n)) },
		ProducersExpired: func(n int) { m.expired.Add(float64(n)) },
	}
}

// streamSeries keeps the stream label values of the per-stream counters
// bounded: at most max streams have series, the rest count under
// OtherStream, and a stream's series are deleted once it has not been
// written for idle. Counters are updated under mu, so a sweep never deletes
// a series between its label check and its update.
type streamSeries struct {
	max  int
	idle time.Duration
	now  func() time.Time
	vecs []*prometheus.CounterVec

	mu        sync.Mutex
	seen      map[string]time.Time // stream label -> last write
	lastSweep time.Time
}

// add calls update with the label stream's write is counted under.
func (s *streamSeries) add(stream string, update func(label string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	label := stream
	if _, ok := s.seen[stream]; !ok && s.tracked() >= s.max {
		label = OtherStream
	}
	s.seen[label] = now
	update(label)
}

// tracked is how many streams have series of their own.
func (s *streamSeries) tracked() int {
	n := len(s.seen)
	if _, ok := s.seen[OtherStream]; ok {
		n--
	}
	return n
}

func (s *streamSeries) maybeSweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.now())
}

// sweepLocked deletes the series of streams idle for s.idle, at most every
// s.idle/4.
func (s *streamSeries) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < s.idle/4 {
		return
	}
	s.lastSweep = now
	for label, last := range s.seen {
		if now.Sub(last) < s.idle {
			continue
		}
		delete(s.seen, label)
		for _, v := range s.vecs {
			v.DeleteLabelValues(label)
		}
	}
}

// buildLabels are eosink_build_info's labels: the module version
// ("unknown" without build info), the VCS revision with "-dirty" when the
// tree had changes ("unknown" without VCS data), and the Go version.
func buildLabels(in buildinfo.Info) prometheus.Labels {
	l := prometheus.Labels{"version": "unknown", "revision": "unknown", "goversion": in.GoVersion}
	if in.Version != "" {
		l["version"] = in.Version
	}
	if in.Revision != "" {
		l["revision"] = in.Revision
		if in.Modified {
			l["revision"] += "-dirty"
		}
	}
	return l
}
