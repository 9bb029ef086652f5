package tests

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Group commit benchmarks against the built binary (DESIGN
// "Acknowledgement and commit latency"). Run:
//
//	go test ./tests/ -run '^$' -bench 'WaitCommit|Plain202' -benchtime 5s
//
// They report, besides ns/op: p50_ms and p99_ms of each request, records/s,
// and files/min (committed data files per minute of the run). The service
// runs with its defaults (--checkpoint-interval 10s, --commit-linger 10ms)
// and each --commit-linger and --commit-min-gap of the sub-benchmarks.

const benchRecords = 50 // records per batch, ~100 bytes each

func benchBody() []byte {
	var b bytes.Buffer
	for i := range benchRecords {
		fmt.Fprintf(&b, `{"i":%d,"msg":"benchmark record with some padding to make it about a hundred bytes long"}`+"\n", i)
	}
	return b.Bytes()
}

// benchSettings are the (--commit-linger, --commit-min-gap) pairs run.
var benchSettings = [][2]string{{"10ms", "0s"}, {"2ms", "0s"}, {"10ms", "50ms"}}

func benchService(b *testing.B, linger, minGap string) (*proc, string) {
	b.Helper()
	dir := workDir(b)
	dest := dir + "/dest"
	p := newProc(b, dir, procConfig{Args: []string{"--dest", "file://" + dest, "--node", "bench", "--commit-linger", linger, "--commit-min-gap", minGap}})
	p.StartReady()
	return p, dest
}

func benchPost(b *testing.B, hc *http.Client, url string, body []byte, want int) time.Duration {
	start := time.Now()
	resp, err := hc.Post(url, "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		b.Error(err)
		return 0
	}
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		b.Errorf("status %d, want %d", resp.StatusCode, want)
	}
	return time.Since(start)
}

func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration, files int) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	}
	b.ReportMetric(float64(len(lat)*benchRecords)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(files)/elapsed.Minutes(), "files/min")
}

// BenchmarkWaitCommitSequential: one client sends a batch with
// ?wait=commit, waits for its 200, sends the next.
func BenchmarkWaitCommitSequential(b *testing.B) {
	for _, set := range benchSettings {
		b.Run("linger="+set[0]+",min-gap="+set[1], func(b *testing.B) {
			p, dest := benchService(b, set[0], set[1])
			hc := &http.Client{}
			url := p.URL + "/v1/streams/bench/records?wait=commit"
			body := benchBody()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				lat = append(lat, benchPost(b, hc, url, body, http.StatusOK))
			}
			elapsed := time.Since(start)
			b.StopTimer()
			reportLatency(b, lat, elapsed, countFiles(b, dest))
		})
	}
}

// BenchmarkWaitCommitConcurrent: 8 clients as above, at once.
func BenchmarkWaitCommitConcurrent(b *testing.B) {
	for _, set := range benchSettings {
		b.Run("linger="+set[0]+",min-gap="+set[1], func(b *testing.B) { benchConcurrent(b, set[0], set[1], "?wait=commit", http.StatusOK) })
	}
}

// BenchmarkPlain202Concurrent: 8 clients sending plain writes (202), for
// comparison; files are cut by the 10 s interval.
func BenchmarkPlain202Concurrent(b *testing.B) {
	benchConcurrent(b, "10ms", "0s", "", http.StatusAccepted)
}

func benchConcurrent(b *testing.B, linger, gap, query string, want int) {
	const clients = 8
	p, dest := benchService(b, linger, gap)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	url := p.URL + "/v1/streams/bench/records" + query
	body := benchBody()
	var next atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				mine = append(mine, benchPost(b, hc, url, body, want))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatency(b, lat, elapsed, countFiles(b, dest))
}
