package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/testing/testsrv"
)

// BenchmarkLBThroughput: the aggregate write throughput of three nodes
// behind nginx (deploy/nginx.conf) against one node written directly, in
// the same run, on one MinIO. Run:
//
//	go test ./tests/ -run '^$' -bench LBThroughput -benchtime 1x
//
// Each round runs two phases of EOSINK_LB_BENCH_PHASE (default 3s), one
// per target, in alternating order: the same number of producers
// (EOSINK_LB_BENCH_PRODUCERS, default 12; the Go client, Send answered
// 202, batches of 100 records of about 100 bytes) write as fast as they
// are answered; between phases every producer flushes (not timed). It
// reports the median records/s of each target over EOSINK_LB_BENCH_ROUNDS
// rounds (default 5), their ratio, and each round's numbers in the log.
// Nodes run with --checkpoint-interval 1s.
func BenchmarkLBThroughput(b *testing.B) {
	rounds := envInt(b, "EOSINK_LB_BENCH_ROUNDS", 5)
	nprod := envInt(b, "EOSINK_LB_BENCH_PRODUCERS", 12)
	phase := 3 * time.Second
	if v := os.Getenv("EOSINK_LB_BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("EOSINK_LB_BENCH_PHASE=%q: %v", v, err)
		}
		phase = d
	}
	for range b.N {
		benchLB(b, rounds, nprod, phase)
	}
}

func benchLB(b *testing.B, rounds, nprod int, phase time.Duration) {
	dir := workDir(b)
	cl := newLBCluster(b, dir, lbFront{}, []string{"--checkpoint-interval", "1s"}, nil)
	ctx := b.Context()

	var recs [][]byte
	for i := range 100 {
		recs = append(recs, fmt.Appendf(nil, `{"i":%d,"msg":"load balancer benchmark record, padded to about a hundred bytes long"}`, i))
	}
	batchBytes := len(ndjson(recs))
	newClients := func(url string, ids []string) []*client.Client {
		cs := make([]*client.Client, len(ids))
		for i, id := range ids {
			// A transport of its own, as a producer in its own process
			// has: the default one keeps 2 idle connections per host for
			// all 12, and the others would reconnect for every batch.
			c, err := client.New(url, client.WithProducer(id), client.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Init(ctx); err != nil {
				b.Fatalf("init %s: %v", id, err)
			}
			cs[i] = c
		}
		return cs
	}
	direct := make([]string, nprod)
	for i := range direct {
		direct[i] = fmt.Sprintf("direct-%d", i)
	}
	targets := []struct {
		name    string
		clients []*client.Client
	}{
		{"direct-1-node", newClients(cl.nodes[0].URL, direct)},
		{"nginx-3-nodes", newClients(cl.nginx.URL, cl.spreadProducers(b, "lb-", nprod))},
	}

	// CPU time of each process, to say what limits the throughput.
	pids := map[string]int{"eosink": 0, "nginx": cl.nginx.cmd.Process.Pid, "clients": os.Getpid(), "minio": minioPID(cl.minio)}
	cpu := func() (map[string]time.Duration, time.Duration) {
		m := map[string]time.Duration{}
		for _, p := range cl.nodes {
			p.mu.Lock()
			pid := p.cmd.Process.Pid
			p.mu.Unlock()
			m["eosink"] += procCPU(pid)
		}
		for name, pid := range pids {
			if pid > 0 {
				m[name] += procCPU(pid)
			}
		}
		return m, machineBusy()
	}
	type usage struct {
		cores   map[string]float64 // CPU seconds per second of each process group
		machine float64            // busy cores of the whole machine
	}
	usages := make([][]usage, 2)

	run := func(i int, cs []*client.Client) float64 {
		var n atomic.Int64
		cpu0, busy0 := cpu()
		var wg sync.WaitGroup
		pctx, cancel := context.WithTimeout(ctx, phase)
		start := time.Now()
		for _, c := range cs {
			wg.Go(func() {
				for pctx.Err() == nil {
					if _, err := c.Send(pctx, "bench", recs); err != nil {
						if pctx.Err() == nil {
							b.Errorf("%s: send: %v", c.Producer(), err)
						}
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		cancel()
		cpu1, busy1 := cpu()
		u := usage{cores: map[string]float64{}, machine: (busy1 - busy0).Seconds() / elapsed.Seconds()}
		for k := range cpu1 {
			u.cores[k] = (cpu1[k] - cpu0[k]).Seconds() / elapsed.Seconds()
		}
		usages[i] = append(usages[i], u)
		var fwg sync.WaitGroup
		for _, c := range cs {
			fwg.Go(func() {
				fctx, fcancel := context.WithTimeout(ctx, time.Minute)
				defer fcancel()
				if err := c.Flush(fctx); err != nil {
					b.Errorf("%s: flush: %v", c.Producer(), err)
				}
			})
		}
		fwg.Wait()
		return float64(n.Load()*int64(len(recs))) / elapsed.Seconds()
	}

	got := make([][]float64, len(targets))
	var lines []string
	for r := range rounds {
		line := fmt.Sprintf("round %d:", r+1)
		for j := range targets {
			i := (j + r) % len(targets) // alternate which goes first
			rate := run(i, targets[i].clients)
			got[i] = append(got[i], rate)
			line += fmt.Sprintf(" %s %.0f records/s", targets[i].name, rate)
		}
		lines = append(lines, line)
		b.Log(line)
	}
	b.StopTimer()
	cl.term(b)
	med := make([]float64, len(targets))
	for i := range targets {
		s := append([]float64(nil), got[i]...)
		sort.Float64s(s)
		med[i] = s[len(s)/2]
		b.ReportMetric(med[i], targets[i].name+"_records/s")
	}
	b.ReportMetric(med[1]/med[0], "nginx/direct")
	for i := range targets {
		// The CPU use of the median round.
		k := slices.Index(got[i], med[i])
		u := usages[i][k]
		perM := func(k string) float64 { return u.cores[k] / med[i] * 1e6 }
		lines = append(lines, fmt.Sprintf("%s, median round: cores busy: eosink %.2f, nginx %.2f, minio %.2f, clients %.2f; whole machine %.2f of %d; CPU s per million records: eosink %.2f, nginx %.2f, minio %.2f, clients %.2f",
			targets[i].name, u.cores["eosink"], u.cores["nginx"], u.cores["minio"], u.cores["clients"], u.machine, runtime.NumCPU(),
			perM("eosink"), perM("nginx"), perM("minio"), perM("clients")))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	report(b, "%d producers, batches of %d records (%d bytes), %s phases, %d rounds; median records/s: direct to 1 node %.0f (%.1f MB/s), through nginx to 3 nodes %.0f (%.1f MB/s), ratio %.2f; load average %s\n%s",
		nprod, len(recs), batchBytes, phase, rounds, med[0], med[0]*float64(batchBytes)/float64(len(recs))/1e6,
		med[1], med[1]*float64(batchBytes)/float64(len(recs))/1e6, med[1]/med[0], strings.Join(strings.Fields(string(load))[:3], " "), strings.Join(lines, "\n"))
}

// procCPU returns the user+system CPU time of process pid (0 if it can't
// be read), from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from after its ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// machineBusy returns the CPU time of the whole machine spent not idle,
// from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, v := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100
}

// minioPID finds the MinIO server's process by its data directory on its
// command line (read only; 0 if not found).
func minioPID(srv *testsrv.MinIO) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmd), "minio") && strings.Contains(string(cmd), srv.Dir) {
			return pid
		}
	}
	return 0
}
