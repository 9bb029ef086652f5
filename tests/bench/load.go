package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/internal/ctxsleep"
)

// scenario is one kind of load.
type scenario struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Records     int    `json:"records_per_batch"`
	RecordBytes int    `json:"record_bytes"` // each line, its '\n' included
	Idempotent  bool   `json:"idempotent"`   // Producer-Id/-Epoch/-Seq headers
	// Config, when set, is PUT as the stream's configuration (eosink
	// only) before the load starts, and a checkpoint puts it in force.
	Config string `json:"stream_config,omitempty"`
}

// benchSchema fits record's fields: a Parquet stream keeps every one.
const benchSchema = `"schema":{"fields":[{"name":"ts","type":"timestamp","required":true},{"name":"producer","type":"string"},` +
	`{"name":"i","type":"int64"},{"name":"event","type":"string"},{"name":"user","type":"json"},{"name":"latency_ms","type":"double"},` +
	`{"name":"tags","type":"json"},{"name":"pad","type":"string"}]}`

var scenarios = []scenario{
	{Name: "text", ContentType: "text/plain", Records: 100, RecordBytes: 1024},
	{Name: "ndjson", ContentType: "application/x-ndjson", Records: 100, RecordBytes: 1024, Idempotent: true},
	{Name: "ndjson-small", ContentType: "application/x-ndjson", Records: 1000, RecordBytes: 200, Idempotent: true},
	// The ndjson load into a zstd stream and a Parquet stream (zstd pages):
	// compare with ndjson's eosink row of the same run.
	{Name: "ndjson-zstd", ContentType: "application/x-ndjson", Records: 100, RecordBytes: 1024, Idempotent: true,
		Config: `{"format":"ndjson","compression":"zstd"}`},
	{Name: "parquet", ContentType: "application/x-ndjson", Records: 100, RecordBytes: 1024, Idempotent: true,
		Config: `{"format":"parquet",` + benchSchema + `}`},
	// The Parquet load into an Iceberg table stream (one snapshot per
	// checkpoint): compare with parquet's eosink row of the same run.
	{Name: "iceberg", ContentType: "application/x-ndjson", Records: 100, RecordBytes: 1024, Idempotent: true,
		Config: `{"format":"parquet","table":"iceberg","partition":"dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}",` + benchSchema + `}`},
}

// configure PUTs the scenario's stream configuration and runs the
// checkpoint that puts it in force.
func (s scenario) configure(ctx context.Context, base string) error {
	if s.Config == "" {
		return nil
	}
	hc := plainClient()
	defer hc.CloseIdleConnections()
	for _, step := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/streams/" + s.stream(), s.Config},
		{http.MethodPost, "/v1/checkpoints", ""},
	} {
		req, err := http.NewRequestWithContext(ctx, step.method, base+step.path, strings.NewReader(step.body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", step.method, step.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s", step.method, step.path, resp.StatusCode, body)
		}
	}
	return nil
}

func scenarioByName(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return scenario{}, false
}

func (s scenario) stream() string { return "bench-" + s.Name }

func producerID(i int) string { return fmt.Sprintf("bench-p%d", i) }

// record returns one line of exactly size bytes ('\n' included): a JSON
// object with strings, numbers, a boolean, an array and a nested object,
// padded with a string field. Text scenarios send the same lines.
func record(producer string, i, size int) []byte {
	head := fmt.Sprintf(`{"ts":"2026-11-29T09:%02d:%02d.%03dZ","producer":%q,"i":%d,"event":"page_view","user":{"id":%d,"country":"DE","premium":%t},"latency_ms":%d.%d,"tags":["web","eu"],"pad":"`,
		(i/60)%60, i%60, i%1000, producer, i, 100000+i*7919%900000, i%3 == 0, i%500, i%10)
	const tail = "\"}\n"
	n := size - len(head) - len(tail)
	if n < 0 {
		panic(fmt.Sprintf("record size %d below the %d bytes of its fields", size, len(head)+len(tail)))
	}
	b := make([]byte, 0, size)
	b = append(b, head...)
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	x := uint32(i*2654435761+len(producer)) | 1
	for range n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b = append(b, alphabet[x%uint32(len(alphabet))])
	}
	return append(b, tail...)
}

// body builds one producer's batch once; every request of that producer
// sends it again.
func body(s scenario, producer string) []byte {
	b := make([]byte, 0, s.Records*s.RecordBytes)
	for i := range s.Records {
		r := record(producer, i, s.RecordBytes)
		if !json.Valid(r[:len(r)-1]) {
			panic("generated record is not valid JSON: " + string(r))
		}
		b = append(b, r...)
	}
	return b
}

// loopbackDialer refuses anything but a loopback address: the harness
// talks to 127.0.0.1 only.
func loopbackDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !isLoopbackHost(addr) {
			return nil, fmt.Errorf("refusing to dial %s: the harness talks to loopback addresses only", addr)
		}
		return d.DialContext(ctx, network, addr)
	}
}

// loadClient is tuned for many concurrent keep-alive requests to one host.
func loadClient(producers int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         loopbackDialer(),
			MaxIdleConns:        2 * producers,
			MaxIdleConnsPerHost: 2 * producers,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			WriteBufferSize:     64 << 10,
			ReadBufferSize:      16 << 10,
		},
		Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// plainClient is for control requests (readiness, metrics, checkpoints).
func plainClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: loopbackDialer(), MaxIdleConnsPerHost: 2, DisableCompression: true},
		Timeout:   30 * time.Second,
	}
}

// window is the time frame of one load run: warmup, then measurement.
type window struct {
	start, measure, stop time.Time
}

func (w window) measuring(t time.Time) bool { return !t.Before(w.measure) && !t.After(w.stop) }

// producerStats is what one producer saw; merged after the run.
type producerStats struct {
	latencies  []float64 // ms, every request completed in the window
	requests   int64     // completed in the window
	okBatches  int64     // 2xx in the window
	records    int64     // records of 2xx non-duplicate answers in the window
	bytes      int64     // body bytes of those
	throttled  int64     // 429 answers in the window
	duplicates int64     // 200 duplicate answers (should not happen)
	errors     map[string]int64
	total      int64 // records accepted over the whole run, warmup included
}

func (p *producerStats) errorf(key string) {
	if p.errors == nil {
		p.errors = map[string]int64{}
	}
	p.errors[key]++
}

// loadResult is the merged view of one load run.
type loadResult struct {
	Requests      int64            `json:"requests"`
	Batches       int64            `json:"batches_ok"`
	Records       int64            `json:"records"`
	Bytes         int64            `json:"bytes"`
	Seconds       float64          `json:"seconds"`
	RecordsPerSec float64          `json:"records_per_s"`
	MBPerSec      float64          `json:"mb_per_s"` // 10^6 bytes of request bodies per second
	ReqPerSec     float64          `json:"requests_per_s"`
	P50ms         float64          `json:"latency_p50_ms"`
	P99ms         float64          `json:"latency_p99_ms"`
	MaxMs         float64          `json:"latency_max_ms"`
	Throttled     int64            `json:"throttled_429"`
	Duplicates    int64            `json:"duplicates"`
	Errors        map[string]int64 `json:"errors"`
	AcceptedTotal int64            `json:"accepted_records_total"` // warmup included
}

// producerInit is the answer to POST /v1/producers/{id}/init.
type producerInit struct {
	Epoch   int64 `json:"epoch"`
	Streams map[string]struct {
		NextSeq int64 `json:"next_seq"`
	} `json:"streams"`
}

// runLoad drives producers against base, warmup then duration, and returns
// the merged results. It calls onStart with the window once the producers
// are initialised, just before the first batch. It stops sending at
// w.stop and waits for requests in flight up to a grace period, then
// abandons them.
func runLoad(ctx context.Context, s scenario, base string, producers int, warmup, duration time.Duration,
	onStart func(window)) (loadResult, error) {
	hc := loadClient(producers)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, warmup+duration+45*time.Second) // init included
	defer cancel()

	stats := make([]*producerStats, producers)
	bodies := make([][]byte, producers)
	epochs := make([]int64, producers)
	seqs := make([]int64, producers)
	for i := range producers {
		stats[i] = &producerStats{latencies: make([]float64, 0, 1<<14)}
		bodies[i] = body(s, producerID(i))
		if s.Idempotent {
			ep, next, err := initProducer(ctx, hc, base, producerID(i), s.stream())
			if err != nil {
				return loadResult{}, err
			}
			epochs[i], seqs[i] = ep, next
		}
	}
	now := time.Now()
	w := window{start: now, measure: now.Add(warmup), stop: now.Add(warmup + duration)}
	if onStart != nil {
		onStart(w)
	}
	ctx, cancelLoad := context.WithDeadline(ctx, w.stop.Add(15*time.Second))
	defer cancelLoad()
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			produce(ctx, hc, s, base, w, producerID(i), bodies[i], epochs[i], seqs[i], stats[i])
		})
	}
	wg.Wait()
	if ctx.Err() != nil && time.Now().Before(w.stop) {
		return loadResult{}, ctx.Err()
	}

	var r loadResult
	r.Errors = map[string]int64{}
	var lat []float64
	for _, p := range stats {
		lat = append(lat, p.latencies...)
		r.Requests += p.requests
		r.Batches += p.okBatches
		r.Records += p.records
		r.Bytes += p.bytes
		r.Throttled += p.throttled
		r.Duplicates += p.duplicates
		r.AcceptedTotal += p.total
		for k, v := range p.errors {
			r.Errors[k] += v
		}
	}
	slices.Sort(lat)
	r.Seconds = w.stop.Sub(w.measure).Seconds()
	r.RecordsPerSec = float64(r.Records) / r.Seconds
	r.MBPerSec = float64(r.Bytes) / 1e6 / r.Seconds
	r.ReqPerSec = float64(r.Requests) / r.Seconds
	r.P50ms, r.P99ms = quantile(lat, 0.50), quantile(lat, 0.99)
	if len(lat) > 0 {
		r.MaxMs = lat[len(lat)-1]
	}
	return r, nil
}

func initProducer(ctx context.Context, hc *http.Client, base, id, stream string) (epoch, next int64, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/producers/"+id+"/init", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("init producer %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("init producer %s: %s: %s", id, resp.Status, bytes.TrimSpace(b))
	}
	var pi producerInit
	if err := json.Unmarshal(b, &pi); err != nil {
		return 0, 0, fmt.Errorf("init producer %s: %w", id, err)
	}
	return pi.Epoch, pi.Streams[stream].NextSeq, nil
}

// errorBody is the part of an error answer the producer acts on.
type errorBody struct {
	Error       string `json:"error"`
	ExpectedSeq *int64 `json:"expected_seq"`
}

// produce posts the same batch in a loop until w.stop, one request at a
// time, numbering batches when the scenario is idempotent.
func produce(ctx context.Context, hc *http.Client, s scenario, base string, w window, id string, payload []byte,
	epoch, seq int64, st *producerStats) {
	u := base + "/v1/streams/" + s.stream() + "/records"
	epochS := strconv.FormatInt(epoch, 10)
	var respBuf bytes.Buffer
	for ctx.Err() == nil && time.Now().Before(w.stop) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(payload))
		if err != nil {
			st.errorf("request: " + err.Error())
			return
		}
		req.Header.Set("Content-Type", s.ContentType)
		if s.Idempotent {
			req.Header.Set("Producer-Id", id)
			req.Header.Set("Producer-Epoch", epochS)
			req.Header.Set("Producer-Seq", strconv.FormatInt(seq, 10))
		}
		t0 := time.Now()
		resp, err := hc.Do(req)
		status := 0
		respBuf.Reset()
		if err == nil {
			status = resp.StatusCode
			_, err = respBuf.ReadFrom(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		t1 := time.Now()
		in := w.measuring(t1)
		if in {
			st.requests++
			st.latencies = append(st.latencies, float64(t1.Sub(t0))/1e6)
		}
		if err != nil {
			if ctx.Err() != nil || !time.Now().Before(w.stop) {
				return // abandoned at the end; not an error of the target
			}
			if in {
				st.errorf("transport")
			}
			pause(ctx, w, 100*time.Millisecond)
			continue
		}
		switch {
		case status == http.StatusAccepted || status == http.StatusOK:
			dup := status == http.StatusOK && bytes.Contains(respBuf.Bytes(), []byte(`"duplicate":true`))
			if dup {
				st.duplicates++
			} else {
				st.total += int64(s.Records)
			}
			if in {
				st.okBatches++
				if !dup {
					st.records += int64(s.Records)
					st.bytes += int64(len(payload))
				}
			}
			seq++
			continue
		case status == http.StatusTooManyRequests:
			if in {
				st.throttled++
			}
			pause(ctx, w, retryAfter(resp.Header.Get("Retry-After")))
			continue
		}
		var eb errorBody
		_ = json.Unmarshal(respBuf.Bytes(), &eb)
		if in {
			key := strconv.Itoa(status)
			if eb.Error != "" {
				key += " " + eb.Error
			}
			st.errorf(key)
		}
		switch {
		case eb.ExpectedSeq != nil:
			seq = *eb.ExpectedSeq // resend from where the service expects
		case s.Idempotent && (eb.Error == "unknown_producer" || eb.Error == "producer_fenced" || eb.Error == "invalid_epoch"):
			if ep, next, err := initProducer(ctx, hc, base, id, s.stream()); err == nil {
				epochS, seq = strconv.FormatInt(ep, 10), next
			}
			pause(ctx, w, 100*time.Millisecond)
		case status == http.StatusServiceUnavailable:
			pause(ctx, w, retryAfter(resp.Header.Get("Retry-After")))
		default:
			pause(ctx, w, 100*time.Millisecond)
		}
	}
}

// retryAfter parses a Retry-After of seconds; 1s if absent or unreadable.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return time.Second
	}
	return time.Duration(n) * time.Second
}

// pause sleeps d, but not beyond the end of the window.
func pause(ctx context.Context, w window, d time.Duration) {
	_ = ctxsleep.Sleep(ctx, min(d, time.Until(w.stop)))
}
