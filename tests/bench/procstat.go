package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Machine describes where the numbers were taken.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
	MemTotal  string `json:"mem_total"`
}

func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
			}
		}
	}
	return m
}

// memStatus is a process's resident set as /proc/<pid>/status reports it.
type memStatus struct {
	RSS, HWM int64 // bytes
	// RssAnon is heap, stacks and other private memory; RssFile is
	// mapped files (for eosink mostly the bbolt state store, which is
	// mmapped).
	Anon, File int64
}

func readMem(pid int) (memStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	var m memStatus
	for line := range strings.SplitSeq(string(b), "\n") {
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &m.RSS
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &m.HWM
		case strings.HasPrefix(line, "RssAnon:"):
			dst = &m.Anon
		case strings.HasPrefix(line, "RssFile:"):
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			*dst = kb << 10
		}
	}
	return m, nil
}

// clkTck is USER_HZ, which is 100 on every Linux the Go toolchain targets
// (reading it needs sysconf, i.e. cgo).
const clkTck = 100

// cpuTime returns the user+system CPU time of a process, all its threads
// (dead ones included), from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: split after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// selfCPU is this process's CPU time, from getrusage (microseconds).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuStat is the aggregate line of /proc/stat, in jiffies.
type cpuStat struct {
	user, nice, system, idle, iowait, irq, softirq, steal int64
}

func (c cpuStat) total() int64 {
	return c.user + c.nice + c.system + c.idle + c.iowait + c.irq + c.softirq + c.steal
}

func (c cpuStat) sub(o cpuStat) cpuStat {
	return cpuStat{c.user - o.user, c.nice - o.nice, c.system - o.system, c.idle - o.idle,
		c.iowait - o.iowait, c.irq - o.irq, c.softirq - o.softirq, c.steal - o.steal}
}

// cpuShare is how the machine's CPUs spent a window, as fractions of all
// of them (user+system+softirq+irq+iowait+idle+steal = 1).
type cpuShare struct {
	Busy    float64 `json:"busy"` // all but idle, iowait and steal
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	SoftIRQ float64 `json:"softirq"`
	IOWait  float64 `json:"iowait"`
	Steal   float64 `json:"steal"`
	Idle    float64 `json:"idle"`
}

func (c cpuStat) share() cpuShare {
	t := float64(c.total())
	if t <= 0 {
		return cpuShare{}
	}
	return cpuShare{
		Busy:    float64(c.user+c.nice+c.system+c.irq+c.softirq) / t,
		User:    float64(c.user+c.nice) / t,
		System:  float64(c.system) / t,
		SoftIRQ: float64(c.softirq+c.irq) / t,
		IOWait:  float64(c.iowait) / t,
		Steal:   float64(c.steal) / t,
		Idle:    float64(c.idle) / t,
	}
}

// machineCPU reads the aggregate CPU line of /proc/stat.
func machineCPU() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuStat{}
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	return cpuStat{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
}

// ioWritten returns the bytes a process caused to be sent to storage.
func ioWritten(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// rssSample is one reading of a process's resident set.
type rssSample struct {
	At  time.Duration `json:"t_ns"` // since the sampler started
	RSS int64         `json:"rss_bytes"`
}

// rssSampler polls /proc/<pid>/status until stopped.
type rssSampler struct {
	pid   int
	every time.Duration
	mu    sync.Mutex
	peak  int64
	hwm   int64
	all   []rssSample
	done  chan struct{}
	stop  context.CancelFunc
}

func startRSS(pid int, every time.Duration) *rssSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &rssSampler{pid: pid, every: every, done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		begin := time.Now()
		for {
			s.sample(time.Since(begin))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample(at time.Duration) {
	m, err := readMem(s.pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peak = max(s.peak, m.RSS)
	s.hwm = max(s.hwm, m.HWM)
	s.all = append(s.all, rssSample{At: at, RSS: m.RSS})
}

// Stop ends sampling and returns the largest VmRSS seen and the last VmHWM.
func (s *rssSampler) Stop() (peak, hwm int64, series []rssSample) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.hwm, s.all
}

// quantile returns the q-quantile (0..1) of sorted values, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(v []float64) float64 {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// promSample is one line of the Prometheus text format.
type promSample struct {
	name   string
	labels string // as written, without braces
	value  float64
}

func parseProm(text string) []promSample {
	var out []promSample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var s promSample
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.name, s.labels, rest = line[:i], line[i+1:j], line[j+1:]
		} else {
			name, r, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			s.name, rest = name, r
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// promSum adds up every sample of a metric name, over all label sets.
func promSum(ss []promSample, name string) float64 {
	var t float64
	found := false
	for _, s := range ss {
		if s.name == name {
			t += s.value
			found = true
		}
	}
	if !found {
		return math.NaN()
	}
	return t
}

// promLabeled returns label-set -> value for one metric name.
func promLabeled(ss []promSample, name string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name == name {
			out[s.labels] += s.value
		}
	}
	return out
}

// histQuantile estimates a quantile from cumulative histogram buckets the
// way Prometheus's histogram_quantile does: linear within the bucket.
func histQuantile(ss []promSample, name string, q float64) float64 {
	type bucket struct{ le, count float64 }
	var bs []bucket
	for _, s := range ss {
		if s.name != name+"_bucket" {
			continue
		}
		for kv := range strings.SplitSeq(s.labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if strings.TrimSpace(k) != "le" {
				continue
			}
			v = strings.Trim(v, `"`)
			le, err := strconv.ParseFloat(v, 64)
			if v == "+Inf" {
				le, err = math.Inf(1), nil
			}
			if err == nil {
				bs = append(bs, bucket{le, s.value})
			}
		}
	}
	if len(bs) == 0 {
		return math.NaN()
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return prevLE
			}
			if b.count == prevCount {
				return b.le
			}
			return prevLE + (b.le-prevLE)*(rank-prevCount)/(b.count-prevCount)
		}
		prevLE, prevCount = b.le, b.count
	}
	return prevLE
}

// dirtyBytes returns Dirty + Writeback from /proc/meminfo: page cache not
// yet on the disk.
func dirtyBytes() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var n int64
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "Dirty:") || strings.HasPrefix(line, "Writeback:") {
			if f := strings.Fields(line); len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				n += kb << 10
			}
		}
	}
	return n
}

// settle lets the previous run's writeback finish before the next run
// starts, so that runs do not pay for each other's dirty pages: sync(2),
// then wait (up to limit) until less than 64 MiB is dirty.
func settle(ctx context.Context, limit time.Duration) {
	done := make(chan struct{})
	go func() { syscall.Sync(); close(done) }()
	deadline := time.After(limit)
	select {
	case <-done:
	case <-deadline:
		return
	case <-ctx.Done():
		return
	}
	for dirtyBytes() > 64<<20 {
		select {
		case <-deadline:
			return
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// otherCPU returns the CPU time of every user-space process but this one
// and those in skip, by pid: who else is using the machine. Kernel threads
// (children of kthreadd) are left out: their work (writeback, softirq) is
// mostly caused by the run itself.
func otherCPU(skip ...int) map[int]time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	out := map[int]time.Duration{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 2 || slices.Contains(skip, pid) {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 || f[1] == "2" { // f[1] is the ppid
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(ut+st) * time.Second / clkTck
	}
	return out
}

// foreignCores is the CPU other processes used between two otherCPU
// readings, in cores over secs, with the names of the busiest.
func foreignCores(a, b map[int]time.Duration, secs float64) (float64, []string) {
	type use struct {
		pid int
		d   time.Duration
	}
	var total time.Duration
	var uses []use
	for pid, end := range b {
		d := end - a[pid] // a process born in the window counts whole
		if d > 0 {
			total += d
			uses = append(uses, use{pid, d})
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].d > uses[j].d })
	var top []string
	for _, u := range uses[:min(3, len(uses))] {
		if float64(u.d)/1e9/secs < 0.02 {
			break
		}
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", u.pid))
		top = append(top, fmt.Sprintf("%s[%d] %.2f", strings.TrimSpace(string(name)), u.pid, float64(u.d)/1e9/secs))
	}
	return float64(total) / 1e9 / secs, top
}
