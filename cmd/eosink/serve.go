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
	idemMaxKeys     int
	leaseTimeout    time.Duration
	trustedProxies  proxyList
}

func serveFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	f.maxBody, f.maxRecord, f.maxUncommitted, f.rollSize = 64<<20, 1<<20, 1<<30, 1<<30
	f.maxInflight = api.DefaultMaxInflightBody
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&f.dataDir, "data-dir", "./data", "staging files and the state store")
	fs.StringVar(&f.dest, "dest", "", "where committed files go: file:///abs/path or s3://bucket/prefix (default file://<data-dir>/files)")
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "host:port of an S3-compatible server; empty means AWS S3; credentials from the AWS chain: environment, shared credentials file, IAM role")
	fs.BoolVar(&f.insecure, "s3-insecure", false, "talk plain HTTP to --s3-endpoint")
	fs.StringVar(&f.commitMode, "s3-commit", "multipart", "S3 commit mode: multipart (upload at pre-commit, complete at commit) or copy (staging object, server-side copy at commit)")
	fs.StringVar(&f.node, "node", layout.SanitizeNode(host), "node id used in file names; nodes sharing a destination need different ids")
	fs.DurationVar(&f.interval, "checkpoint-interval", 10*time.Second, "periodic checkpoints; 0 means only on request")
	fs.StringVar(&f.tokenFile, "token-file", "", "file of '<role> <token>' lines (roles: ingest, read, admin); without it only loopback addresses may be served")
	fs.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "serve a non-loopback address without tokens (anyone who can connect can write)")
	fs.Var(&f.maxBody, "max-body", "largest write body (e.g. 64MiB)")
	fs.Var(&f.maxRecord, "max-record", "largest record (e.g. 1MiB)")
	fs.Var(&f.maxUncommitted, "max-uncommitted", "uncommitted data held before writes get 429 backpressure")
	f.maxOpenFiles = positive(defaultMaxOpenFiles())
	fs.Var(&f.maxOpenFiles, "max-open-files", "staging files open at once (transactions per checkpoint); reaching it starts a checkpoint early and answers 429; the default is half the open-file limit, less a reserve")
	fs.Var(&f.rollSize, "roll-size", "start a new file beyond this size within a checkpoint")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 30*time.Second, "longest a ?wait=commit write waits before answering 202")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long the final checkpoint may take")
	fs.StringVar(&f.logFormat, "log-format", "auto", "log format: json, text, or auto (text on a terminal)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.sweepInterval, "orphan-sweep-interval", server.DefaultSweepInterval, "how often to remove this node's S3 uploads and staging objects that no checkpoint names (also at every start); 0 turns the periodic sweep off")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", api.DefaultBodyTimeout, "longest a write body may take to arrive; a slower sender gets 408")
	fs.DurationVar(&f.downloadStall, "download-stall", api.DefaultDownloadStall, "a file download that makes no progress this long is cut (downloads are not bound by the server's write timeout)")
	fs.Var(&f.maxInflight, "max-inflight-body", "bytes all write bodies being read may hold at once (at least twice --max-body); over it writes get 429 backpressure")
	fs.DurationVar(&f.producerExpiry, "producer-expiry", server.DefaultProducerExpiry, "forget producers idle this long with nothing uncommitted (they must init again); 0 keeps them forever")
	f.retention = positive(recovery.DefaultRetain)
	fs.Var(&f.retention, "checkpoint-retention", "checkpoints whose records (details for the API and UI) the state store keeps; older ones are deleted")
	fs.DurationVar(&f.commitLinger, "commit-linger", 10*time.Millisecond, "how soon a ?wait=commit write starts a checkpoint, shared by every write waiting then (group commit); 0 leaves waits to --checkpoint-interval")
	fs.DurationVar(&f.commitMinGap, "commit-min-gap", 0, "least time between two checkpoints started by waiting writes: fewer, larger files under steady waiting load, for at least this latency")
	fs.DurationVar(&f.idemWindow, "idempotency-window", server.DefaultIdempotencyWindow, "how long Idempotency-Key values are kept after their batch was prepared")
	fs.IntVar(&f.idemMaxKeys, "idempotency-max-keys", server.DefaultMaxKeys, "most Idempotency-Key values kept (memory and state store); past it the oldest committed ones are forgotten early, and new keys get 429 when none is committed")
	fs.DurationVar(&f.leaseTimeout, "lease-timeout", server.DefaultLeaseTimeout, "how long the node's lease (<dest>/_nodes/<node>.json) outlives its last renewal: a second process with the same --node refuses to start until then")
	fs.Var(&f.trustedProxies, "trusted-proxies", "comma-separated CIDR prefixes (or addresses) of proxies whose X-Forwarded-For or X-Real-IP names the client: failed tokens are then counted per client, not per proxy; empty trusts none")
	fs.StringVar(&f.pprofListen, "pprof-listen", "", "serve Go's /debug/pprof on this loopback address (off when empty)")
	addTLSFlags(fs, &f.tlsFlags)
	addS3Flags(fs, &f.destFlags)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: eosink serve [flags]\n\nRuns the service. Every flag can also be set as EOSINK_<FLAG>.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
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
	for name, d := range map[string]time.Duration{"--checkpoint-interval": f.interval, "--wait-timeout": f.waitTimeout,
		"--shutdown-timeout": f.shutdownTimeout, "--body-timeout": f.bodyTimeout, "--download-stall": f.downloadStall,
		"--commit-linger": f.commitLinger, "--commit-min-gap": f.commitMinGap, "--idempotency-window": f.idemWindow} {
		if d < 0 {
			return fmt.Errorf("%w: %s %v: want a duration >= 0", errUsage, name, d)
		}
	}
	if f.idemWindow == 0 {
		return fmt.Errorf("%w: --idempotency-window 0: want a duration > 0", errUsage)
	}
	if f.idemMaxKeys <= 0 {
		return fmt.Errorf("%w: --idempotency-max-keys %d: want a number > 0", errUsage, f.idemMaxKeys)
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

// sweepInterval maps a period flag (0 is off) to server.Config's (negative
// is off): the orphan sweep's interval and the producer expiry.
func sweepInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
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
