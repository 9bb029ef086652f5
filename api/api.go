package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/api/batch"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/recoverer"
	"github.com/eosink/eosink/server"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed openapi.yaml
var openAPI []byte

// Engine is what the API needs of *server.Engine.
type Engine interface {
	// Write appends one batch; see server.Engine.Write for its errors.
	Write(w server.Write) (server.WriteResult, error)
	// InitProducer durably gives a producer a new epoch; it answers once the
	// batches of its older epochs are prepared or aborted.
	InitProducer(ctx context.Context, id string) (server.ProducerState, error)
	// Producer returns one producer's live state; false if unknown.
	Producer(id string) (server.ProducerState, bool)
	// ProducersPage returns up to limit producers after the cursor after,
	// sorted by id, and the next page's cursor ("" after the last). It
	// must not wait on the ingest lock.
	ProducersPage(after string, limit int) ([]server.ProducerState, string, error)
	// DeleteProducer forgets a producer: server.ErrUnknownProducer if
	// there is none, server.ErrProducerBusy while it has uncommitted batches.
	DeleteProducer(ctx context.Context, id string) error
	// Checkpoint runs a checkpoint and waits for its end.
	Checkpoint(ctx context.Context) (server.CheckpointResult, error)
	// Wait waits for checkpoint id to end: nil if committed, an error
	// wrapping server.ErrAborted if aborted, ctx's error on timeout.
	Wait(ctx context.Context, id uint64) error
	// Status returns a snapshot; it must be cheap.
	Status() server.Status
	// The engine's read-only checkpoint queries (server/query.go), which
	// the catalog reads this node's checkpoints through.
	catalog.State
}

var _ Engine = (*server.Engine)(nil)

// Defaults for Config fields left zero (the body and record limits are
// the parser's).
const (
	DefaultMaxBody     = batch.DefaultMaxBody
	DefaultMaxRecord   = batch.DefaultMaxRecord
	DefaultWaitTimeout = 30 * time.Second
	DefaultRetryAfter  = time.Second
)

// Defaults of the limits on bodies in flight.
const (
	DefaultBodyTimeout     = time.Minute
	DefaultMaxInflightBody = 256 << 20
	DefaultDownloadStall   = time.Minute
)

// Defaults of the limit on failed authentication.
const (
	DefaultAuthFailures      = 20
	DefaultAuthFailureWindow = time.Minute
	DefaultAuthFailureTable  = 10000
)

// Config holds the Server's dependencies.
type Config struct {
	Engine Engine           // required
	Files  committer.Reader // required: the destination
	// Catalog is the read model of committed files, shared with the UI so
	// a process holds one manifest cache; nil builds one over Files and
	// Engine.
	Catalog *catalog.Catalog

	// Gatherer is served at /metrics; nil serves an empty registry.
	Gatherer prometheus.Gatherer
	// Registerer takes the HTTP request metrics (httpmetrics.go); nil keeps none.
	Registerer prometheus.Registerer
	// Auth holds the tokens; nil turns authorization off.
	Auth *auth.Tokens
	// Hosts are the Host names served besides the loopback ones when Auth
	// is nil (the --listen address; an unspecified address such as 0.0.0.0
	// admits every IP literal): without tokens, a request naming another
	// host may come from a page whose DNS name was rebound to us.
	Hosts []string
	// Logger receives internal errors; nil discards.
	Logger *slog.Logger

	MaxBody     int64         // bytes of one write body; default 64 MiB
	MaxRecord   int           // bytes of one record; default 1 MiB
	WaitTimeout time.Duration // longest ?wait=commit; default 30s
	RetryAfter  time.Duration // Retry-After of 429 and 503; default 1s
	// BodyTimeout bounds the time a write body may take to arrive, from
	// the start of its reading; a slow sender cannot extend it. Default 1m.
	BodyTimeout time.Duration
	// AuthFailures is how many invalid tokens one client address (an IPv6
	// /64) may send per AuthFailureWindow; beyond, its requests get 429
	// until the window ends. AuthFailureTable bounds the addresses
	// tracked. Defaults 20, 1m, 10000.
	AuthFailures      int
	AuthFailureWindow time.Duration
	AuthFailureTable  int
	// TrustedProxies are the peers whose X-Forwarded-For (or X-Real-IP)
	// names the client whose failures are counted (--trusted-proxies):
	// behind a proxy every client has the proxy's address, and one
	// guesser would hold back the invalid attempts of all. None by default.
	TrustedProxies []netip.Prefix
	// DownloadStall is how long a download may make no progress before it
	// is cut; downloads are not bound by the server's WriteTimeout.
	// Default 1m.
	DownloadStall time.Duration
	// MaxInflightBody bounds the bytes held by all write bodies being read
	// and parsed at once; over it a write is answered 429. A body holds
	// what it received and as much again ahead (at least 64 KiB), not
	// what it declares, so slow senders hold little; one read in several
	// steps holds up to twice its size (its steps, then one slice).
	// Default 256 MiB or twice MaxBody; it must be at least twice MaxBody.
	MaxInflightBody int64
}

// Server answers the HTTP API. Its handlers are safe for concurrent use.
type Server struct {
	eng        Engine
	files      committer.Reader
	cat        *catalog.Catalog
	auth       *auth.Tokens
	gate       *auth.Gate // nil when auth is
	metrics    http.Handler
	httpm      *httpMetrics
	log        *slog.Logger
	maxBody    int64
	maxRecord  int
	wait       time.Duration
	retryAfter string
	handler    http.Handler
	bodies     sync.Pool // *[]byte: the first step of request bodies
	bodyTime   time.Duration
	inflight   *budget
	windows    *budget // the part of inflight zstd decoder windows may hold (readBody)
	origin     *http.CrossOriginProtection
	hosts      []string // names served without tokens, besides loopback ones
	anyIP      bool     // without tokens, any IP literal Host is served too
	stall      time.Duration
	feedWaits  waits
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Files == nil {
		return nil, errors.New("new api server: engine and files are required")
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxRecord <= 0 {
		cfg.MaxRecord = int(min(DefaultMaxRecord, cfg.MaxBody))
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Catalog == nil {
		var err error
		if cfg.Catalog, err = catalog.New(catalog.Config{Files: cfg.Files, State: cfg.Engine, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("new api server: %w", err)
		}
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.AuthFailures <= 0 {
		cfg.AuthFailures = DefaultAuthFailures
	}
	if cfg.AuthFailureWindow <= 0 {
		cfg.AuthFailureWindow = DefaultAuthFailureWindow
	}
	if cfg.AuthFailureTable <= 0 {
		cfg.AuthFailureTable = DefaultAuthFailureTable
	}
	if cfg.DownloadStall <= 0 {
		cfg.DownloadStall = DefaultDownloadStall
	}
	if cfg.MaxInflightBody <= 0 {
		cfg.MaxInflightBody = max(DefaultMaxInflightBody, 2*cfg.MaxBody)
	}
	if int64(cfg.MaxRecord) > cfg.MaxBody {
		return nil, fmt.Errorf("new api server: the record limit %d is above the body limit %d: no body could hold such a record", cfg.MaxRecord, cfg.MaxBody)
	}
	if cfg.MaxInflightBody < 2*cfg.MaxBody {
		return nil, fmt.Errorf("new api server: the in-flight body limit %d is below twice the body limit %d: the largest body could never be read", cfg.MaxInflightBody, cfg.MaxBody)
	}
	s := &Server{
		eng:        cfg.Engine,
		files:      cfg.Files,
		cat:        cfg.Catalog,
		auth:       cfg.Auth,
		log:        cfg.Logger,
		metrics:    promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}),
		maxBody:    cfg.MaxBody,
		maxRecord:  cfg.MaxRecord,
		wait:       cfg.WaitTimeout,
		retryAfter: strconv.FormatInt(int64(max(1, (cfg.RetryAfter+time.Second-1)/time.Second)), 10),
		bodyTime:   cfg.BodyTimeout,
		inflight:   &budget{limit: cfg.MaxInflightBody},
		windows:    &budget{limit: max(cfg.MaxInflightBody/2, zstdMaxWindow)},
		origin:     http.NewCrossOriginProtection(),
		stall:      cfg.DownloadStall,
		feedWaits:  waits{done: make(chan struct{})},
	}
	if cfg.Auth != nil {
		s.gate = auth.NewGate(auth.GateConfig{Tokens: cfg.Auth, Failures: cfg.AuthFailures, Window: cfg.AuthFailureWindow,
			Table: cfg.AuthFailureTable, Proxies: cfg.TrustedProxies})
	}
	s.hosts, s.anyIP = hostNames(cfg.Hosts)
	var err error
	if s.httpm, err = newHTTPMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("new api server: %w", err)
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the router.
func (s *Server) Handler() http.Handler { return s.handler }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes is the API served alone (tests, embedding): Mount's routes and,
// at GET /, a small page of links. eosink serve mounts the API on its own
// root router instead, beside the web UI (cmd/eosink).
func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	s.Mount(r)
	r.With(s.allow(auth.RoleRead)).Get("/", s.index)
	return r
}

// Mount registers the API on r, a router with no routes yet: its
// middleware (request metrics by route, panic recovery, the Host and
// Origin guard), which then covers every route r gets, its JSON 404 and
// 405 answers, and its routes. Every route here is in openapi.yaml, and
// the test TestOpenAPIMatchesRoutes keeps the two equal.
func (s *Server) Mount(r chi.Router) {
	r.Use(s.httpm.instrument, s.recoverer, s.guard)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: "no such route"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", allowed(r, req))
		writeError(w, http.StatusMethodNotAllowed, &ErrorResponse{Error: CodeMethodNotAllowed, Message: req.Method + " is not allowed here"})
	})

	// Who may call what; admin passes every check.
	ingest := s.allow(auth.RoleIngest)
	producers := s.allow(auth.RoleIngest, auth.RoleRead)
	read := s.allow(auth.RoleRead)
	admin := s.allow()

	r.Get("/healthz", s.healthz) // open
	r.Get("/readyz", s.readyz)   // open
	r.With(s.openCheckpointHeader, ingest).Post("/v1/streams/{stream}/records", s.postRecords)
	r.With(ingest).Post("/v1/producers/{producer}/init", s.initProducer)
	r.With(producers).Get("/v1/producers/{producer}", s.getProducer)
	r.With(producers).Get("/v1/producers/{producer}/streams/{stream}/seqs/{seq}", s.getSeq) // seqs.go
	r.With(admin).Delete("/v1/producers/{producer}", s.deleteProducer)
	r.With(producers).Get("/v1/producers", s.listProducers)
	r.With(admin).Post("/v1/checkpoints", s.postCheckpoint)
	r.With(read).Get("/v1/checkpoints/{id}", s.getCheckpoint)
	r.With(read).Get("/v1/checkpoints", s.listCheckpoints)
	r.With(read).Get("/v1/streams", s.listStreams)
	r.With(admin).Put("/v1/streams/{stream}", s.putStream) // streams.go
	r.With(read).Get("/v1/streams/{stream}", s.getStream)
	r.With(read).Get("/v1/commits", s.listCommits) // commits.go
	r.With(read).Get("/v1/files", s.listFiles)
	r.With(read).Get("/v1/files/*", s.getFile)
	r.With(read).Head("/v1/files/*", s.getFile)
	r.With(read).Get("/v1/openapi.yaml", s.openapi)
	r.With(read).Get("/metrics", s.metrics.ServeHTTP)
}

// allowed returns the Allow header of a 405: the methods the router serves
// on the request's path. (chi hands a custom 405 handler no list.)
func allowed(mux chi.Routes, r *http.Request) string {
	p := r.URL.RawPath
	if p == "" {
		p = r.URL.Path
	}
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if mux.Match(chi.NewRouteContext(), m, p) {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// recoverer answers 500 for a panicking handler instead of dropping the
// connection, and logs the panic.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return recoverer.Wrap(next, s.log, "handler panicked", func(w http.ResponseWriter) {
		writeError(w, http.StatusInternalServerError, &ErrorResponse{Error: CodeInternal, Message: "internal error; see the server log"})
	})
}

// writeJSON answers status with v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
	}
	writeJSONBody(w, status, body)
}

// encodeJSON returns v as an answer body; only our own wire types are
// encoded, and they always marshal.
func encodeJSON(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"error":"internal","message":"encode response"}` + "\n"), err
	}
	return append(body, '\n'), nil
}

// writeJSONBody writes an encoded JSON answer.
func writeJSONBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers an error; e.Message must be set.
func writeError(w http.ResponseWriter, status int, e *ErrorResponse) {
	writeJSON(w, status, e)
}

// internal logs err and answers 500.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("request failed", "op", r.Method+" "+r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, &ErrorResponse{Error: CodeInternal, Message: "internal error; see the server log"})
}
