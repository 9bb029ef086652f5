package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
)

type serveFlags struct {
	listen  string
	dataDir string
	destFlags
	tlsFlags
	node            string
	interval        time.Duration
	tokenFile       string
	insecureNoAuth  bool
	maxBody         size
	maxRecord       size
	maxUncommitted  size
	maxOpenFiles    positive
	rollSize        size
	waitTimeout     time.Duration
	shutdownTimeout time.Duration
	logFormat       string
	logLevel        string
	pprofListen     string
	sweepInterval   time.Duration
	bodyTimeout     time.Duration
	maxInflight     size
	downloadStall   time.Duration
	producerExpiry  time.Duration
	retention       positive
	commitLinger    time.Duration
	commitMinGap    time.Duration
	idemWindow      time.Duration
	idemMaxKeys     positive
	leaseTimeout    time.Duration
	trustedProxies  proxyList
}

// The defaults only the command line has; every other flag's default is
// a package's Default const (server, api, recovery), stated once.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultDataDir         = "./data"
	defaultShutdownTimeout = 30 * time.Second
)

// zeroRule is what every duration flag's help ends with or says: 0 turns
// off what can be off; any other duration must be above 0
// (serveFlags.durations holds each flag to it).
const zeroRule = "Durations: 0 turns off what can be off (its help says so); any other duration must be above 0."

func serveFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "Usage: eosink serve [flags]\n\nRuns the service. Every flag can also be set as EOSINK_<FLAG>.\n"+zeroRule, stderr)
	host, _ := os.Hostname()
	f.maxBody, f.maxRecord = api.DefaultMaxBody, api.DefaultMaxRecord
	f.maxUncommitted, f.rollSize = server.DefaultMaxUncommittedBytes, server.DefaultRollBytes
	f.maxInflight = api.DefaultMaxInflightBody
	f.maxOpenFiles = positive(defaultMaxOpenFiles())
	f.retention = positive(recovery.DefaultRetain)
	f.idemMaxKeys = server.DefaultMaxKeys
	fs.StringVar(&f.listen, "listen", defaultListen, "address to serve on")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir, "staging files and the state store")
	fs.StringVar(&f.dest, "dest", "", "where committed files go: file:///abs/path or s3://bucket/prefix (default file://<data-dir>/files)")
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "host:port of an S3-compatible server; empty means AWS S3; credentials from the AWS chain: environment, shared credentials file, IAM role")
	fs.BoolVar(&f.insecure, "s3-insecure", false, "talk plain HTTP to --s3-endpoint")
	fs.StringVar(&f.commitMode, "s3-commit", "multipart", "S3 commit mode: multipart (upload at pre-commit, complete at commit) or copy (staging object, server-side copy at commit)")
	fs.StringVar(&f.node, "node", layout.SanitizeNode(host), "node id used in file names; nodes sharing a destination need different ids")
	fs.DurationVar(&f.interval, "checkpoint-interval", server.DefaultCheckpointInterval, "periodic checkpoints; 0 means only on request")
	fs.StringVar(&f.tokenFile, "token-file", "", "file of '<role> <token>' lines (roles: ingest, read, admin); without it only loopback addresses may be served")
	fs.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "serve a non-loopback address without tokens (anyone who can connect can write)")
	fs.Var(&f.maxBody, "max-body", "largest write body (e.g. 64MiB)")
	fs.Var(&f.maxRecord, "max-record", "largest record (e.g. 1MiB)")
	fs.Var(&f.maxUncommitted, "max-uncommitted", "uncommitted data held before writes get 429 backpressure")
	fs.Var(&f.maxOpenFiles, "max-open-files", "staging files open at once (transactions per checkpoint); reaching it starts a checkpoint early and answers 429; the default is half the open-file limit, less a reserve")
	fs.Var(&f.rollSize, "roll-size", "start a new file beyond this size within a checkpoint")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", api.DefaultWaitTimeout, "longest a ?wait=commit write waits before answering 202 (above 0)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGTERM, how long the final checkpoint may take (above 0)")
	fs.StringVar(&f.logFormat, "log-format", "auto", "log format: json, text, or auto (text on a terminal)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.sweepInterval, "orphan-sweep-interval", server.DefaultSweepInterval, "how often to remove this node's S3 uploads and staging objects that no checkpoint names (also at every start); 0 turns the periodic sweep off")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", api.DefaultBodyTimeout, "longest a write body may take to arrive; a slower sender gets 408 (above 0)")
	fs.DurationVar(&f.downloadStall, "download-stall", api.DefaultDownloadStall, "a file download that makes no progress this long is cut (downloads are not bound by the server's write timeout) (above 0)")
	fs.Var(&f.maxInflight, "max-inflight-body", "bytes all write bodies being read may hold at once (at least twice --max-body); over it writes get 429 backpressure")
	fs.DurationVar(&f.producerExpiry, "producer-expiry", server.DefaultProducerExpiry, "forget producers idle this long with nothing uncommitted (they must init again); 0 keeps them forever")
	fs.Var(&f.retention, "checkpoint-retention", "checkpoints whose records (details for the API and UI) the state store keeps; older ones are deleted")
	fs.DurationVar(&f.commitLinger, "commit-linger", server.DefaultCommitLinger, "how soon a ?wait=commit write starts a checkpoint, shared by every write waiting then (group commit); 0 leaves waits to --checkpoint-interval")
	fs.DurationVar(&f.commitMinGap, "commit-min-gap", 0, "least time between two checkpoints started by waiting writes: fewer, larger files under steady waiting load, for at least this latency; 0 means no gap")
	fs.DurationVar(&f.idemWindow, "idempotency-window", server.DefaultIdempotencyWindow, "how long Idempotency-Key values are kept after their batch was prepared (above 0)")
	fs.Var(&f.idemMaxKeys, "idempotency-max-keys", "most Idempotency-Key values kept (memory and state store); past it the oldest committed ones are forgotten early, and new keys get 429 when none is committed")
	fs.DurationVar(&f.leaseTimeout, "lease-timeout", server.DefaultLeaseTimeout, "how long the node's lease (<dest>/_nodes/<node>.json) outlives its last renewal: a second process with the same --node refuses to start until then (at least 300ms)")
	fs.Var(&f.trustedProxies, "trusted-proxies", "comma-separated CIDR prefixes (or addresses) of proxies whose X-Forwarded-For or X-Real-IP names the client: failed tokens are then counted per client, not per proxy; empty trusts none")
	fs.StringVar(&f.pprofListen, "pprof-listen", "", "serve Go's /debug/pprof on this loopback address (off when empty)")
	addTLSFlags(fs, &f.tlsFlags)
	addS3Flags(fs, &f.destFlags)
	return fs
}

// durationFlag is a duration flag and what its 0 means.
type durationFlag struct {
	name  string // without the dashes
	value time.Duration
	off   bool // 0 turns it off; otherwise 0 is refused at start
}

// durations is every duration flag of serve, with the one meaning of
// zero (zeroRule): off where off makes sense, refused where it does not.
func (f *serveFlags) durations() []durationFlag {
	return []durationFlag{
		{"checkpoint-interval", f.interval, true},
		{"commit-linger", f.commitLinger, true},
		{"commit-min-gap", f.commitMinGap, true},
		{"orphan-sweep-interval", f.sweepInterval, true},
		{"producer-expiry", f.producerExpiry, true},
		{"wait-timeout", f.waitTimeout, false},
		{"shutdown-timeout", f.shutdownTimeout, false},
		{"body-timeout", f.bodyTimeout, false},
		{"download-stall", f.downloadStall, false},
		{"idempotency-window", f.idemWindow, false},
		{"lease-timeout", f.leaseTimeout, false},
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "auto":
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				return slog.New(slog.NewTextHandler(w, opts)), nil
			}
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json, text or auto", format)
}

// tokenFileWarning returns a warning if every user of the machine may read
// the token file, "" otherwise.
func tokenFileWarning(path string) string {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return ""
	}
	return fmt.Sprintf("the token file %s is readable by every user (mode %v); chmod o-r it", path, fi.Mode().Perm())
}

func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := serveFlagSet(&f, stderr)
	if err := envFlags(fs, args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return usageError(err)
	}
	if err := f.check(); err != nil {
		return err
	}
	p, err := startProcess(ctx, &f, log, stdout)
	if err != nil {
		return err
	}
	return p.Wait(ctx)
}

// check checks what the flags' own parsers can't: ranges, and values that
// depend on each other.
func (f *serveFlags) check() error {
	if !layout.Node(f.node) {
		return fmt.Errorf("%w: --node %q: want 1-64 of [A-Za-z0-9_.-], starting with a letter or digit", errUsage, f.node)
	}
	for _, d := range f.durations() {
		if d.value < 0 {
			return fmt.Errorf("%w: --%s %v: want a duration >= 0", errUsage, d.name, d.value)
		}
		if d.value == 0 && !d.off {
			return fmt.Errorf("%w: --%s 0: want a duration above 0 (it can't be off)", errUsage, d.name)
		}
	}
	if f.leaseTimeout < 300*time.Millisecond {
		return fmt.Errorf("%w: --lease-timeout %v: want at least 300ms (renewals run every third of it)", errUsage, f.leaseTimeout)
	}
	if f.maxRecord > f.maxBody {
		return fmt.Errorf("%w: --max-record %v is above --max-body %v: no body could hold such a record", errUsage, f.maxRecord, f.maxBody)
	}
	if f.maxInflight < 2*f.maxBody {
		return fmt.Errorf("%w: --max-inflight-body %v is below twice --max-body %v: the largest body could never be read", errUsage, f.maxInflight, f.maxBody)
	}
	if f.pprofListen != "" && !isLoopback(f.pprofListen) {
		return fmt.Errorf("%w: --pprof-listen %q: want a loopback host:port", errUsage, f.pprofListen)
	}
	return nil
}

// proxyList is the --trusted-proxies flag: CIDR prefixes, comma-separated.
type proxyList []netip.Prefix

func (p *proxyList) String() string {
	out := make([]string, len(*p))
	for i, x := range *p {
		out[i] = x.String()
	}
	return strings.Join(out, ",")
}

func (p *proxyList) Set(v string) error {
	l, err := auth.ParseTrustedProxies(v)
	if err != nil {
		return err
	}
	*p = l
	return nil
}

// size is a byte count flag: 1048576, 64KiB, 64MiB, 1GiB, 10MB.
type size int64

func (s *size) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *size) Set(v string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}
	orig, mult := v, int64(1)
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("want a positive size like 1048576 or 64MiB")
	}
	if n > math.MaxInt64/mult {
		return fmt.Errorf("%s is over the largest size, %d bytes", orig, int64(math.MaxInt64))
	}
	*s = size(n * mult)
	return nil
}
