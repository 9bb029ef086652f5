package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/eosink/eosink/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	fs.StringVar(&f.node, "node", sanitizeNode(host), "node id used in file names; nodes sharing a destination need different ids")
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
	fs.IntVar(&f.idemMaxKeys, "idempotency-max-keys", server.DefaultMaxKeys, "most Idempotency-Key values kept (memory and state store); past it the oldest are forgotten early")
	fs.DurationVar(&f.leaseTimeout, "lease-timeout", server.DefaultLeaseTimeout, "how long the node's lease (<dest>/_nodes/<node>.json) outlives its last renewal: a second process with the same --node refuses to start until then")
	fs.StringVar(&f.pprofListen, "pprof-listen", "", "serve Go's /debug/pprof on this loopback address (off when empty)")
	addTLSFlags(fs, &f.tlsFlags)
	addS3Flags(fs, &f.destFlags)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: eosink serve [flags]\n\nRuns the service. Every flag can also be set as EOSINK_<FLAG>.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

var nodeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.]{0,63}$`)

func sanitizeNode(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	out := strings.TrimLeft(string(b), "_.")
	if len(out) > 64 {
		out = out[:64]
	}
	if out == "" {
		return "node"
	}
	return out
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
	if !nodeRE.MatchString(f.node) {
		return fmt.Errorf("%w: --node %q: want 1-64 of [A-Za-z0-9_.], starting with a letter or digit", errUsage, f.node)
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
	if f.pprofListen != "" && !isLoopback(f.pprofListen) {
		return fmt.Errorf("%w: --pprof-listen %q: want a loopback host:port", errUsage, f.pprofListen)
	}
	var tokens *api.Tokens
	if f.tokenFile != "" {
		if tokens, err = api.LoadTokens(f.tokenFile); err != nil {
			return err
		}
		if msg := tokenFileWarning(f.tokenFile); msg != "" {
			log.Warn(msg, "path", f.tokenFile)
		}
	} else if !isLoopback(f.listen) && !f.insecureNoAuth {
		return fmt.Errorf("%w: --listen %s is not a loopback address: give --token-file, or --insecure-no-auth to serve it without authorization", errUsage, f.listen)
	}
	stls, err := startTLS(ctx, f.tlsFlags, f.listen, log)
	if err != nil {
		return err
	}
	defer stls.Close()
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if f.dest == "" {
		f.dest = "file://" + filepath.Join(dataDir, "files")
	}
	staging := filepath.Join(dataDir, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return fmt.Errorf("create staging dir: %w", err)
	}
	osfs := durable.NewOsFs() // renames that never replace (renameat2)
	dest, destName, err := openDest(ctx, f.destFlags, osfs, staging, f.node, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var eng *server.Engine
	metrics := server.NewMetrics(reg, func() server.Status {
		if eng == nil {
			return server.Status{}
		}
		return eng.Status()
	})
	eng, err = server.Open(server.Config{
		Node: f.node, FS: osfs, StagingDir: staging, StorePath: filepath.Join(dataDir, "state.db"),
		Committer: dest, Publisher: dest, Logger: log,
		CheckpointInterval: f.interval, RollBytes: int64(f.rollSize), MaxUncommittedBytes: int64(f.maxUncommitted),
		MaxOpenFiles: int(f.maxOpenFiles), Retain: int(f.retention), ProducerExpiry: sweepInterval(f.producerExpiry),
		CommitLinger: f.commitLinger, CommitMinGap: f.commitMinGap, IdempotencyWindow: f.idemWindow, MaxKeys: f.idemMaxKeys,
		Hooks: metrics.Hooks(), SweepInterval: sweepInterval(f.sweepInterval),
		Leaser: dest, LeaseTimeout: f.leaseTimeout, Listen: f.listen,
	})
	if err != nil {
		return err
	}
	var auth web.Authenticator
	if tokens != nil {
		auth = tokens
	}
	// One read model, one manifest cache, for the API and the UI.
	cat, err := catalog.New(catalog.Config{Files: dest, State: eng, Node: f.node, Logger: log.With("component", "catalog")})
	if err != nil {
		_ = eng.Close()
		return err
	}
	ui, err := web.New(web.Config{Engine: eng, Files: dest, Catalog: cat, Auth: auth,
		Logger: log.With("component", "web"), Node: f.node})
	if err != nil {
		_ = eng.Close()
		return err
	}
	apiSrv, err := api.New(api.Config{
		Engine: eng, Files: dest, Catalog: cat, Gatherer: reg, Registerer: reg, Auth: tokens, Logger: log, UI: ui, Hosts: []string{f.listen},
		MaxBody: int64(f.maxBody), MaxRecord: int(f.maxRecord), WaitTimeout: f.waitTimeout,
		BodyTimeout: f.bodyTimeout, MaxInflightBody: int64(f.maxInflight), DownloadStall: f.downloadStall,
	})
	if err != nil {
		_ = eng.Close()
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		_ = eng.Close()
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	hs := &http.Server{
		Handler:           stls.handler(apiSrv),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      f.waitTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("eosink serving", "listen", ln.Addr().String(), "dest", destName, "data_dir", dataDir, "node", f.node,
		"checkpoint_interval", f.interval.String(), "auth", tokens != nil, "tls", stls.config != nil, "version", version())
	fmt.Fprintf(stdout, "eosink listening on %s://%s\n", stls.scheme(), ln.Addr())
	httpErr := make(chan error, 1)
	go func() { httpErr <- stls.serve(hs, ln) }()
	if f.pprofListen != "" { // checked to be loopback before anything started
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		go func() {
			err := http.ListenAndServe(f.pprofListen, mux)
			log.Error("pprof server stopped", "err", err)
		}()
	}

	go func() {
		select {
		case <-eng.Ready():
			log.Info("ready: recovery finished, accepting writes")
		case <-ctx.Done():
		case <-eng.Failed():
		}
	}()

	select {
	case <-ctx.Done():
		log.Info("shutting down: final checkpoint", "timeout", f.shutdownTimeout.String())
		sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
		defer cancel()
		engErr := make(chan error, 1)
		go func() { engErr <- eng.Shutdown(sctx) }()
		herr := hs.Shutdown(sctx)
		err := errors.Join(<-engErr, herr)
		if err != nil {
			log.Error("shutdown", "err", err)
			return exitError(1)
		}
		log.Info("stopped cleanly")
		return nil
	case <-eng.Failed():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		_ = eng.Close()
		if err := eng.Err(); errors.Is(err, server.ErrLeaseHeld) || errors.Is(err, committer.ErrUnsupported) {
			return fmt.Errorf("refusing to start: %w", err) // said once, on stderr
		}
		log.Error("engine stopped; exiting so that recovery runs on the next start", "err", eng.Err())
		return exitError(1)
	case err := <-httpErr:
		_ = eng.Close()
		return fmt.Errorf("serve http: %w", err)
	}
}

// sweepInterval maps a period flag (0 is off) to server.Config's (negative
// is off): the orphan sweep's interval and the producer expiry.
func sweepInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
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
