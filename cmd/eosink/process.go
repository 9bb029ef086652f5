package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/eosink/eosink/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/afero"
)

// The request headers a client may send, and how long it may take: more
// is 431, slower is a closed connection. Tokens, cookies and the
// idempotence headers are well under a KiB.
const (
	maxHeaderBytes    = 64 << 10
	readHeaderTimeout = 10 * time.Second
)

// failStopTimeout bounds the HTTP server's stop when the process stops
// without a final checkpoint (the engine failed, or the HTTP server did).
const failStopTimeout = 5 * time.Second

// process is one running eosink serve: the engine, the HTTP server with
// the root mux in front of it, and what they hold. startProcess builds it;
// Wait serves until the end, then stops it through Close, the one
// shutdown path.
type process struct {
	f       *serveFlags
	log     *slog.Logger
	fs      afero.Fs // the OS file system, with renames that never replace
	tls     *serviceTLS
	eng     atomic.Pointer[server.Engine]   // set once the engine is open; metrics read it
	cat     atomic.Pointer[catalog.Catalog] // set once the handlers are built; the commit hook tells it
	endWait func()                          // ends the commit feed's long polls (api.Server.EndWaits)
	hs      *http.Server                    // nil until listening
	addr    string                          // the address listened on (the port, when :0 was asked)
	pprof   *http.Server                    // nil without --pprof-listen
	httpErr chan error                      // the HTTP server's end
}

// startProcess opens the engine and starts serving. On an error what it
// started is stopped again.
func startProcess(ctx context.Context, f *serveFlags, log *slog.Logger, stdout io.Writer) (_ *process, err error) {
	p := &process{f: f, log: log, fs: durable.NewOsFs(), httpErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			_ = p.Close(false)
		}
	}()
	tokens, err := loadTokens(f, log)
	if err != nil {
		return nil, err
	}
	if p.tls, err = startTLS(ctx, f.tlsFlags, f.listen, log); err != nil {
		return nil, err
	}
	dataDir, staging, err := p.makeDirs()
	if err != nil {
		return nil, err
	}
	dest, destName, err := openDest(ctx, f.destFlags, p.fs, staging, f.node, log)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	eng, err := p.openEngine(reg, dest, dataDir, staging)
	if err != nil {
		return nil, err
	}
	root, err := p.rootHandler(eng, dest, reg, tokens)
	if err != nil {
		return nil, err
	}
	if err := p.listen(ctx, root, stdout); err != nil {
		return nil, err
	}
	log.Info("eosink serving", "listen", p.addr, "dest", destName, "data_dir", dataDir, "node", f.node,
		"checkpoint_interval", f.interval.String(), "auth", tokens != nil, "tls", p.tls.config != nil, "version", version())
	return p, nil
}

// loadTokens reads --token-file. Without one, only a loopback --listen
// (or --insecure-no-auth) is served.
func loadTokens(f *serveFlags, log *slog.Logger) (*auth.Tokens, error) {
	if f.tokenFile == "" {
		if !isLoopback(f.listen) && !f.insecureNoAuth {
			return nil, fmt.Errorf("%w: --listen %s is not a loopback address: give --token-file, or --insecure-no-auth to serve it without authorization", errUsage, f.listen)
		}
		return nil, nil
	}
	tokens, err := auth.LoadTokens(f.tokenFile)
	if err != nil {
		return nil, err
	}
	if msg := tokenFileWarning(f.tokenFile); msg != "" {
		log.Warn(msg, "path", f.tokenFile)
	}
	return tokens, nil
}

// makeDirs creates the data dir and its staging dir, and defaults --dest
// to file://<data-dir>/files.
func (p *process) makeDirs() (dataDir, staging string, err error) {
	if dataDir, err = filepath.Abs(p.f.dataDir); err != nil {
		return "", "", fmt.Errorf("--data-dir: %w", err)
	}
	if err := p.fs.MkdirAll(dataDir, 0o755); err != nil {
		return "", "", fmt.Errorf("create data dir: %w", err)
	}
	if p.f.dest == "" {
		p.f.dest = "file://" + filepath.Join(dataDir, "files")
	}
	staging = filepath.Join(dataDir, "staging")
	if err := p.fs.MkdirAll(staging, 0o755); err != nil {
		return "", "", fmt.Errorf("create staging dir: %w", err)
	}
	return dataDir, staging, nil
}

// openEngine opens the engine, its metrics on reg.
func (p *process) openEngine(reg *prometheus.Registry, dest destination, dataDir, staging string) (*server.Engine, error) {
	f := p.f
	metrics := server.NewMetrics(reg, p.status)
	eng, err := server.Open(server.Config{
		Node: f.node, FS: p.fs, StagingDir: staging, StorePath: filepath.Join(dataDir, "state.db"),
		Committer: dest, Publisher: dest, TableLocation: tableLocation(f.dest), Logger: p.log,
		CheckpointInterval: f.interval, RollBytes: int64(f.rollSize), MaxUncommittedBytes: int64(f.maxUncommitted),
		MaxOpenFiles: int(f.maxOpenFiles), Retain: int(f.retention), ProducerExpiry: f.producerExpiry,
		CommitLinger: f.commitLinger, CommitMinGap: f.commitMinGap, IdempotencyWindow: f.idemWindow, MaxKeys: int(f.idemMaxKeys),
		Hooks: p.hooks(metrics.Hooks()), SweepInterval: f.sweepInterval,
		ForgottenCompactInterval: server.DefaultForgottenCompactInterval,
		Leaser:                   dest, LeaseTimeout: f.leaseTimeout, Listen: f.listen,
	})
	if err != nil {
		return nil, err
	}
	p.eng.Store(eng)
	return eng, nil
}

// hooks adds to h what tells the commit feed's waiters of this node's
// commits at once (without, they find them at the next poll).
func (p *process) hooks(h server.Hooks) server.Hooks {
	metrics := h.Checkpoint
	node := p.f.node
	h.Checkpoint = func(r server.CheckpointResult) {
		if metrics != nil {
			metrics(r)
		}
		// An empty checkpoint publishes no manifest.
		if cat := p.cat.Load(); cat != nil && r.State == recovery.Committed && len(r.Files) > 0 {
			cat.Notify(node, r.ID)
		}
	}
	return h
}

// status is the engine's status for the metrics; zero until it is open.
func (p *process) status() server.Status {
	if eng := p.eng.Load(); eng != nil {
		return eng.Status()
	}
	return server.Status{}
}

// rootHandler builds the web UI, the API and the root mux that serves both.
func (p *process) rootHandler(eng *server.Engine, dest destination, reg *prometheus.Registry, tokens *auth.Tokens) (http.Handler, error) {
	f := p.f
	// One read model, one manifest cache, for the API and the UI.
	cat, err := catalog.New(catalog.Config{Files: dest, State: eng, Node: f.node, Logger: p.log.With("component", "catalog")})
	if err != nil {
		return nil, err
	}
	apiSrv, err := api.New(api.Config{
		Engine: eng, Files: dest, Catalog: cat, Gatherer: reg, Registerer: reg, Auth: tokens, Logger: p.log, Hosts: []string{f.listen},
		MaxBody: int64(f.maxBody), MaxRecord: int(f.maxRecord), WaitTimeout: f.waitTimeout,
		BodyTimeout: f.bodyTimeout, MaxInflightBody: int64(f.maxInflight), DownloadStall: f.downloadStall,
		TrustedProxies: f.trustedProxies,
	})
	if err != nil {
		return nil, err
	}
	p.cat.Store(cat)
	p.endWait = apiSrv.EndWaits
	// The UI checks tokens through the API's gate: one limit of invalid
	// tokens per client address for the login form, cookies and bearers.
	var auth web.Authenticator
	if g := apiSrv.Gate(); g != nil {
		auth = g
	}
	ui, err := web.New(web.Config{Engine: eng, Files: dest, Catalog: cat, Auth: auth, FeedURL: "/v1/commits",
		Logger: p.log.With("component", "web"), Node: f.node})
	if err != nil {
		return nil, err
	}
	return p.tls.handler(newRootMux(apiSrv, ui)), nil
}

// listen starts the HTTP server on --listen and, with --pprof-listen, the
// profiler's.
func (p *process) listen(ctx context.Context, h http.Handler, stdout io.Writer) error {
	f := p.f
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	p.addr = ln.Addr().String()
	p.hs = &http.Server{
		Handler: h,
		// A connection that sends its headers slowly, or endlessly, holds
		// what they take (net/http's default is 1 MiB a connection).
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		WriteTimeout:      f.waitTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	if p.endWait != nil {
		p.hs.RegisterOnShutdown(p.endWait) // a long poll must not hold the stop up
	}
	fmt.Fprintf(stdout, "eosink listening on %s://%s\n", p.tls.scheme(), ln.Addr())
	go func() { p.httpErr <- p.tls.serve(p.hs, ln) }()
	if f.pprofListen != "" { // checked to be loopback before anything started
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		p.pprof = &http.Server{Addr: f.pprofListen, Handler: mux, ReadHeaderTimeout: readHeaderTimeout, MaxHeaderBytes: maxHeaderBytes}
		go func() {
			if err := p.pprof.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				p.log.Error("pprof server stopped", "err", err)
			}
		}()
	}
	eng := p.eng.Load()
	go func() {
		select {
		case <-eng.Ready():
			p.log.Info("ready: recovery finished, accepting writes")
		case <-ctx.Done():
		case <-eng.Failed():
		}
	}()
	return nil
}

// Wait serves until ctx is done (SIGTERM: stop with a final checkpoint),
// the engine fails or the HTTP server stops (stop at once), then stops the
// process with Close. Its error is what the command exits with.
func (p *process) Wait(ctx context.Context) error {
	eng := p.eng.Load()
	select {
	case <-ctx.Done():
		p.log.Info("shutting down: final checkpoint", "timeout", p.f.shutdownTimeout.String())
		if err := p.Close(true); err != nil {
			p.log.Error("shutdown", "err", err)
			return exitError(1)
		}
		p.log.Info("stopped cleanly")
		return nil
	case <-eng.Failed():
		_ = p.Close(false)
		if err := eng.Err(); errors.Is(err, server.ErrLeaseHeld) || errors.Is(err, committer.ErrUnsupported) {
			return fmt.Errorf("refusing to start: %w", err) // said once, on stderr
		}
		p.log.Error("engine stopped; exiting so that recovery runs on the next start", "err", eng.Err())
		return exitError(1)
	case err := <-p.httpErr:
		_ = p.Close(false)
		return fmt.Errorf("serve http: %w", err)
	}
}

// Close stops what the process started, once. graceful stops the HTTP
// server and the engine together, the engine with a final checkpoint,
// both within --shutdown-timeout; otherwise the HTTP server gets
// failStopTimeout and the engine stops at once (recovery runs on the next
// start). It returns the graceful stop's errors.
func (p *process) Close(graceful bool) error {
	var err error
	eng := p.eng.Load()
	switch {
	case graceful:
		sctx, cancel := context.WithTimeout(context.Background(), p.f.shutdownTimeout)
		defer cancel()
		engErr := make(chan error, 1)
		go func() { engErr <- eng.Shutdown(sctx) }()
		herr := p.hs.Shutdown(sctx)
		err = errors.Join(<-engErr, herr)
	default:
		if p.hs != nil {
			sctx, cancel := context.WithTimeout(context.Background(), failStopTimeout)
			defer cancel()
			_ = p.hs.Shutdown(sctx)
		}
		if eng != nil {
			_ = eng.Close()
		}
	}
	if p.pprof != nil {
		_ = p.pprof.Close()
	}
	if p.tls != nil {
		p.tls.Close()
	}
	return err
}
