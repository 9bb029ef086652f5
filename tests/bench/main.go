// Command bench is eosink's load harness. It builds the service, starts it
// on a temporary data directory on 127.0.0.1, drives concurrent producers
// against it for a bounded time, and does the same against a raw baseline
// server (the least an HTTP server can do with the same requests), rounds
// interleaved. It prints a table and, with --json, a machine-readable
// report. --soak runs one scenario against eosink alone and prints its
// resident set every --soak-every. --slow-senders N holds N connections
// that declare a large body and send 8 bytes of it, and reports eosink's
// resident set meanwhile.
//
// Run from the module root:
//
//	go run ./tests/bench [flags]
//
// Everything is bounded in time and talks to loopback addresses only; the
// child processes are stopped by pid (SIGTERM, then SIGKILL after
// --stop-timeout) at the end and on Ctrl-C.
package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == baselineArg {
		err = serveBaseline(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	bin                string
	producers          int
	duration, warmup   time.Duration
	scenarios          []scenario
	rounds             int
	jsonPath           string
	soak               bool
	soakEvery          time.Duration
	checkpointInterval time.Duration
	baselineMode       string
	baselineAlloc      string
	targets            []string
	eosinkFlags        []string
	keep               bool
	stopTimeout        time.Duration
	pidFile            string
	workDir            string
	maxForeign         float64
	retries            int
	quietWait          time.Duration
	minFree            int64
	consume            string
	slowSenders        int
	slowDeclare        int64
	slowSend           int
	year               bool
	yc                 yearConfig
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scen, targets string
	var extra multiFlag
	fs.StringVar(&cfg.bin, "bin", "", "eosink binary to run (default: go build ./cmd/eosink into a temp dir)")
	fs.IntVar(&cfg.producers, "producers", 8, "concurrent producers, one request in flight each")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "measured time per run (per soak with --soak)")
	fs.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "unmeasured load before each run's measurement")
	fs.StringVar(&scen, "scenario", "all", "all, or a comma list of: text, ndjson, ndjson-small, ndjson-zstd, parquet, iceberg")
	fs.IntVar(&cfg.rounds, "rounds", 1, "runs per scenario and target, interleaved baseline/eosink; medians are reported")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&cfg.soak, "soak", false, "run one scenario (default ndjson) against eosink for --duration and print RSS every --soak-every")
	fs.DurationVar(&cfg.soakEvery, "soak-every", 10*time.Second, "RSS series interval with --soak")
	fs.DurationVar(&cfg.checkpointInterval, "checkpoint-interval", time.Second, "eosink --checkpoint-interval")
	fs.StringVar(&cfg.baselineMode, "baseline", "proc", "run the baseline server as a child process (proc) or inside the harness (inproc)")
	fs.StringVar(&cfg.baselineAlloc, "baseline-alloc", "pool", "baseline body buffers: pool (reused, as eosink does) or fresh (one allocation per request)")
	fs.StringVar(&targets, "targets", "baseline,eosink", "which targets to run: baseline, eosink or both")
	fs.Var(&extra, "eosink-flag", "extra flag for eosink serve, repeatable (e.g. --eosink-flag=--max-uncommitted=256MiB)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temp dir (data, logs, baseline files)")
	fs.DurationVar(&cfg.stopTimeout, "stop-timeout", 30*time.Second, "after SIGTERM, how long a child may take before SIGKILL")
	fs.StringVar(&cfg.pidFile, "pid-file", "", "write '<pid> <target> <scenario>' here whenever a server starts (to attach a profiler)")
	fs.Float64Var(&cfg.maxForeign, "max-foreign", 0.15, "a run during which other processes took more CPU cores than this is contaminated and run again")
	fs.IntVar(&cfg.retries, "retries", 2, "times a contaminated run is repeated before it is kept (and flagged)")
	fs.DurationVar(&cfg.quietWait, "quiet-wait", 2*time.Minute, "before each run, wait up to this long for other processes to use less than --max-foreign")
	fs.IntVar(&cfg.slowSenders, "slow-senders", 0, "instead of the load: open this many connections that each declare --slow-declare bytes and send 8, hold them for --duration, and report eosink's RSS")
	fs.Int64Var(&cfg.slowDeclare, "slow-declare", 64<<20, "Content-Length each slow sender declares")
	fs.IntVar(&cfg.slowSend, "slow-send", 8, "bytes of its body each slow sender sends before it stalls (at least 8)")
	fs.BoolVar(&cfg.year, "year", false, "\"a year in an hour\": --year-inits producer inits, a write to each of --year-streams streams and --year-checkpoints checkpoints against one eosink (--checkpoint-interval 0), with RSS and state.db size over time, write latency idle and while the lists are polled, every list answer's size, and the start time after SIGKILL")
	fs.IntVar(&cfg.yc.inits, "year-inits", 1000000, "with --year: producers initialised")
	fs.IntVar(&cfg.yc.streams, "year-streams", 100000, "with --year: streams written once each")
	fs.IntVar(&cfg.yc.checkpoints, "year-checkpoints", 1000000, "with --year: checkpoints requested")
	fs.IntVar(&cfg.yc.dataEvery, "year-data-every", 100, "with --year: every n-th checkpoint holds one record, the others are empty (0: all empty)")
	fs.IntVar(&cfg.yc.workers, "year-workers", 8, "with --year: concurrent clients in the history phases")
	fs.DurationVar(&cfg.yc.sampleEvery, "year-sample", 5*time.Second, "with --year: RSS and state.db series interval")
	fs.DurationVar(&cfg.yc.latency, "year-latency", 20*time.Second, "with --year: length of each write-latency phase (idle, polled, idle)")
	fs.DurationVar(&cfg.yc.phaseLimit, "year-phase-limit", 15*time.Minute, "with --year: a history phase stops here, done or not (the report says how far it got)")
	fs.IntVar(&cfg.yc.restarts, "year-restarts", 3, "with --year: SIGKILL and timed starts at the end")
	yearPolls := fs.String("year-poll", "/v1/producers,/ui/", "with --year: comma list of URLs polled, one client each, in the polled latency phase")
	minFreeGiB := fs.Float64("min-free", 5, "stop (with an error) when the temp dir's filesystem has fewer GiB free than this")
	fs.StringVar(&cfg.consume, "consume", "soak", "delete committed files as a downstream consumer would, so long runs do not fill the disk: soak, always or never")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: go run ./tests/bench [flags]\n\nLoad harness: eosink against a raw baseline server, on 127.0.0.1.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.eosinkFlags = extra
	for u := range strings.SplitSeq(*yearPolls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			if !strings.HasPrefix(u, "/") {
				return nil, fmt.Errorf("--year-poll %q: want paths starting with /", u)
			}
			cfg.yc.polls = append(cfg.yc.polls, u)
		}
	}
	cfg.minFree = int64(*minFreeGiB * (1 << 30))
	if cfg.consume != "soak" && cfg.consume != "always" && cfg.consume != "never" {
		return nil, fmt.Errorf("--consume %q: want soak, always or never", cfg.consume)
	}
	if cfg.producers < 1 || cfg.rounds < 1 || cfg.duration <= 0 || cfg.warmup < 0 || cfg.soakEvery <= 0 {
		return nil, errors.New("--producers and --rounds must be >= 1, --duration and --soak-every > 0, --warmup >= 0")
	}
	if cfg.year && (cfg.yc.inits < 0 || cfg.yc.streams < 0 || cfg.yc.checkpoints < 0 || cfg.yc.workers < 1 ||
		cfg.yc.sampleEvery <= 0 || cfg.yc.latency <= 0 || cfg.yc.phaseLimit <= 0 || cfg.yc.restarts < 0) {
		return nil, errors.New("--year-* counts must be >= 0, --year-workers >= 1, durations > 0")
	}
	if cfg.baselineAlloc != "pool" && cfg.baselineAlloc != "fresh" {
		return nil, fmt.Errorf("--baseline-alloc %q: want pool or fresh", cfg.baselineAlloc)
	}
	if cfg.baselineMode != "proc" && cfg.baselineMode != "inproc" {
		return nil, fmt.Errorf("--baseline %q: want proc or inproc", cfg.baselineMode)
	}
	for t := range strings.SplitSeq(targets, ",") {
		switch t = strings.TrimSpace(t); t {
		case "baseline", "eosink":
			cfg.targets = append(cfg.targets, t)
		default:
			return nil, fmt.Errorf("--targets: unknown target %q", t)
		}
	}
	if scen == "all" {
		cfg.scenarios = scenarios
		if cfg.soak {
			s, _ := scenarioByName("ndjson")
			cfg.scenarios = []scenario{s}
		}
	} else {
		for name := range strings.SplitSeq(scen, ",") {
			s, ok := scenarioByName(strings.TrimSpace(name))
			if !ok {
				return nil, fmt.Errorf("--scenario: unknown scenario %q", name)
			}
			cfg.scenarios = append(cfg.scenarios, s)
		}
	}
	if cfg.soak && len(cfg.scenarios) != 1 {
		return nil, errors.New("--soak runs one scenario: give --scenario NAME")
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg.workDir, err = os.MkdirTemp("", "eosink-bench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(stdout, "work dir (kept): %s\n", cfg.workDir)
	} else {
		defer os.RemoveAll(cfg.workDir)
	}

	rep := &report{Machine: machine(), Config: reportConfig(cfg)}
	m := rep.Machine
	fmt.Fprintf(stdout, "machine: %d CPUs, %s, %s, kernel %s, memory %s\n", m.NProc, m.CPUModel, m.GoVersion, m.Kernel, m.MemTotal)

	if cfg.bin == "" && contains(cfg.targets, "eosink") {
		if cfg.bin, err = buildEosink(ctx, cfg.workDir); err != nil {
			return err
		}
	}
	if cfg.bin != "" {
		rep.Eosink = describeBinary(cfg.bin)
		fmt.Fprintf(stdout, "eosink: %s\n", rep.Eosink)
	}
	if cfg.year {
		y := cfg.yc
		fmt.Fprintf(stdout, "year: %d producer inits, %d streams, %d checkpoints (every %d-th with a record), %d clients, eosink --checkpoint-interval 0",
			y.inits, y.streams, y.checkpoints, y.dataEvery, y.workers)
	} else {
		fmt.Fprintf(stdout, "load: %d producers, %s warmup + %s measured per run, eosink --checkpoint-interval %s, baseline %s (buffers: %s)",
			cfg.producers, cfg.warmup, cfg.duration, cfg.checkpointInterval, cfg.baselineMode, cfg.baselineAlloc)
	}
	if len(cfg.eosinkFlags) > 0 {
		fmt.Fprintf(stdout, ", eosink flags %s", strings.Join(cfg.eosinkFlags, " "))
	}
	fmt.Fprintln(stdout)

	switch {
	case cfg.slowSenders > 0:
		rep.Slow, err = slowSenders(ctx, cfg, stdout)
	case cfg.year:
		rep.Year, err = year(ctx, cfg, cfg.yc, stdout)
	case cfg.soak:
		rep.Soak, err = soak(ctx, cfg, cfg.scenarios[0], stdout)
	default:
		err = benchmark(ctx, cfg, rep, stdout)
	}
	if cfg.jsonPath != "" {
		if jerr := writeJSON(cfg.jsonPath, rep); jerr != nil {
			err = errors.Join(err, jerr)
		} else {
			fmt.Fprintf(stdout, "\nJSON written to %s\n", cfg.jsonPath)
		}
	}
	return err
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// moduleRoot finds the eosink module's root from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/eosink/eosink\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/eosink/eosink module: run from the module root or give --bin")
		}
		dir = parent
	}
}

func buildEosink(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go command to build eosink (or give --bin): %w", err)
	}
	out := filepath.Join(dir, "eosink")
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// -buildvcs=auto stamps the revision (and whether the tree was
	// modified) into the binary even where GOFLAGS turns it off.
	cmd := exec.CommandContext(bctx, gobin, "build", "-buildvcs=auto", "-o", out, "./cmd/eosink")
	cmd.Dir = root
	cmd.Env = childEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/eosink: %w\n%s", err, b)
	}
	return out, nil
}

// describeBinary names the build: module version, VCS revision, Go version.
func describeBinary(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return bin
	}
	s := bi.Main.Version + " " + bi.GoVersion
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			s += " rev " + kv.Value[:min(12, len(kv.Value))]
		case "vcs.time":
			s += " " + kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				s += " (modified)"
			}
		}
	}
	return s
}

func writePID(cfg *config, t *target, label string) {
	if cfg.pidFile == "" || t.PID == 0 {
		return
	}
	_ = os.WriteFile(cfg.pidFile, fmt.Appendf(nil, "%d %s %s\n", t.PID, t.Kind, label), 0o644)
}
