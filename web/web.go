package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/recoverer"
	"github.com/eosink/eosink/server"
)

// Engine is what the UI needs of *server.Engine.
type Engine interface {
	// Status returns a snapshot; it must be cheap (every page calls it).
	Status() server.Status
	// ProducersPage returns up to limit producers after the cursor after,
	// sorted by id, and the next page's cursor ("" after the last); it
	// must not wait on the ingest lock.
	ProducersPage(after string, limit int) ([]server.ProducerState, string, error)
	// ProducerCount returns how many producers are known; it must be cheap.
	ProducerCount() int
	// Checkpoint runs a checkpoint and waits for its end; an aborted
	// checkpoint is a result, not an error.
	Checkpoint(ctx context.Context) (server.CheckpointResult, error)
	// The engine's read-only checkpoint queries (server/query.go), which
	// the catalog reads this node's checkpoints through.
	catalog.State
}

// Authenticator tells a token's role (*auth.Gate, shared with the API so
// that the UI's form and cookies count against the same limit of invalid
// tokens). It must be safe for concurrent use and take the same time
// whichever token matches. ok is false for an unknown token; wait is then
// non-zero when the request's client address sent too many of them: the
// answer is 429 with Retry-After. A valid token is always served.
type Authenticator interface {
	Authenticate(r *http.Request, token string) (role auth.Role, ok bool, wait time.Duration)
}

var _ Engine = (*server.Engine)(nil)

// Defaults for Config fields left zero.
const (
	DefaultPageSize          = 500
	DefaultCheckpointTimeout = time.Minute
	DefaultDownloadPrefix    = "/v1/files/"
)

// Prefix is the path under which the UI serves everything; GET / redirects
// there.
const Prefix = "/ui/"

// Config holds the UI's dependencies.
type Config struct {
	Engine Engine           // required
	Files  committer.Reader // required: the destination
	// Catalog is the read model of committed files, shared with the API so
	// a process holds one manifest cache; nil builds one over Files and
	// Engine.
	Catalog *catalog.Catalog

	// Auth checks tokens; nil turns the login off and every visitor is
	// admin (the command serves only loopback addresses then).
	Auth Authenticator
	// Logger receives internal errors; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Node is this process's node id. When set, per-stream rates count only
	// this node's files, whose checkpoint ids the state store knows.
	Node string

	DownloadPrefix string // where files download from; default "/v1/files/" (the API)
	// FeedURL is where the API serves the commit feed ("/v1/commits"):
	// the overview and the checkpoints page then show new commits as they
	// happen, read by a script with the session's cookie. "" shows none.
	FeedURL           string
	PageSize          int           // rows per page of a folder; default 500
	CheckpointTimeout time.Duration // longest "Checkpoint now" waits; default 1m
}

// ui serves the web UI. Its handlers are safe for concurrent use.
type ui struct {
	eng      Engine
	cat      *catalog.Catalog
	auth     Authenticator
	log      *slog.Logger
	now      func() time.Time
	node     string
	download string
	feed     string
	pageSize int
	ckptWait time.Duration

	csrfKey []byte
	origin  *http.CrossOriginProtection
	pages   map[string]*template.Template
	static  map[string]asset
}

// New checks cfg and returns the UI's handler. It serves GET / (a redirect
// to /ui/) and everything under /ui/.
func New(cfg Config) (http.Handler, error) {
	if cfg.Engine == nil || cfg.Files == nil {
		return nil, errors.New("new web ui: engine and files are required")
	}
	if v := reflect.ValueOf(cfg.Auth); cfg.Auth != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		cfg.Auth = nil // a nil *auth.Gate means no auth, as in api.Config
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DownloadPrefix == "" {
		cfg.DownloadPrefix = DefaultDownloadPrefix
	}
	if !strings.HasPrefix(cfg.DownloadPrefix, "/") || !strings.HasSuffix(cfg.DownloadPrefix, "/") {
		return nil, fmt.Errorf("new web ui: download prefix %q must start and end with '/'", cfg.DownloadPrefix)
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Catalog == nil {
		var err error
		cfg.Catalog, err = catalog.New(catalog.Config{Files: cfg.Files, State: cfg.Engine, Node: cfg.Node, Logger: cfg.Logger, Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("new web ui: %w", err)
		}
	}
	if cfg.CheckpointTimeout <= 0 {
		cfg.CheckpointTimeout = DefaultCheckpointTimeout
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("new web ui: csrf key: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("new web ui: %w", err)
	}
	static, err := loadStatic()
	if err != nil {
		return nil, fmt.Errorf("new web ui: %w", err)
	}
	u := &ui{
		eng:      cfg.Engine,
		cat:      cfg.Catalog,
		auth:     cfg.Auth,
		log:      cfg.Logger,
		now:      cfg.Now,
		node:     cfg.Node,
		download: cfg.DownloadPrefix,
		feed:     cfg.FeedURL,
		pageSize: cfg.PageSize,
		ckptWait: cfg.CheckpointTimeout,
		csrfKey:  key,
		origin:   http.NewCrossOriginProtection(),
		pages:    pages,
		static:   static,
	}
	return u.routes(), nil
}

// routes is the one route table.
func (u *ui) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", u.redirectHome)
	mux.HandleFunc("GET /ui", u.redirectHome)
	mux.HandleFunc("GET /ui/{$}", u.page(u.overview))
	mux.HandleFunc("GET /ui/files/{path...}", u.page(u.browse))
	mux.HandleFunc("GET /ui/files", u.page(u.browse))
	mux.HandleFunc("GET /ui/streams", u.page(u.streams))
	mux.HandleFunc("GET /ui/streams/config", u.page(u.streamConfigs)) // streams.go
	mux.HandleFunc("GET /ui/checkpoints", u.page(u.checkpoints))
	mux.HandleFunc("GET /ui/checkpoints/{id}", u.page(u.checkpointPage))
	mux.HandleFunc("GET /ui/producers", u.page(u.producers))
	mux.HandleFunc("GET /ui/nodes", u.page(u.nodes))
	mux.HandleFunc("GET /ui/login", u.loginPage)
	mux.HandleFunc("POST /ui/login", u.post(u.login))
	mux.HandleFunc("POST /ui/logout", u.post(u.logout))
	mux.HandleFunc("POST /ui/checkpoint", u.post(u.checkpointNow))
	mux.HandleFunc("GET /ui/static/{name}", u.serveStatic)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.fail(w, r, http.StatusNotFound, "Not found", "There is no page at this address.")
	})
	return u.recoverer(u.headers(u.cleanPath(mux)))
}

// csp forbids inline script and inline style, framing, plugins and
// foreign origins. SVG charts use presentation attributes, which it allows.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// headers sets the security headers on every response.
func (u *ui) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// cleanPath refuses, before any routing, a path that is not clean: an
// empty, "." or ".." segment, or one that unescapes to hold '/', '\\' or
// a control byte. So no handler (and no redirect of the mux) ever sees
// one.
func (u *ui) cleanPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := splitEscaped(r.URL.EscapedPath()); !ok {
			u.fail(w, r, http.StatusBadRequest, "Invalid path", "The address must be a clean path inside the destination.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer answers 500 for a panicking handler and logs the panic.
func (u *ui) recoverer(next http.Handler) http.Handler {
	return recoverer.Wrap(next, u.log, "ui handler panicked", func(w http.ResponseWriter) {
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
	})
}

func (u *ui) redirectHome(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the active nav item
	Sess    *session
	CSRF    string
	Status  server.Status
	CSS, JS string // asset URLs, versioned
	Icon    string
	Refresh int // seconds between reloads, 0 for none
	Data    any
}

// render executes page into a buffer, then writes it, so a template error
// is a clean 500.
func (u *ui) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	t, ok := u.pages[page]
	if !ok {
		u.internal(w, r, fmt.Errorf("no template %q", page))
		return
	}
	if v.Sess == nil {
		v.Sess = u.session(r)
	}
	v.CSRF = u.csrfToken(v.Sess.token)
	v.Status = u.eng.Status()
	v.CSS, v.JS, v.Icon = u.assetURL("style.css"), u.assetURL("app.js"), u.assetURL("icon.svg")
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		u.internal(w, r, fmt.Errorf("render %s: %w", page, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders the template name of page alone: a part of a page
// made once and kept (the overview's tables). Its output is escaped as
// the page's own would be, so it goes into the page as it is.
func (u *ui) fragment(page, name string, data any) (template.HTML, error) {
	t, ok := u.pages[page]
	if !ok {
		return "", fmt.Errorf("no template %q", page)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		return "", fmt.Errorf("render %s of %s: %w", name, page, err)
	}
	return template.HTML(buf.String()), nil //nolint:gosec // html/template's own escaped output
}

type failData struct {
	Code    int
	Heading string
	Message string
}

// fail answers an error page.
func (u *ui) fail(w http.ResponseWriter, r *http.Request, status int, heading, msg string) {
	u.render(w, r, status, "error.html", &view{Title: heading, Data: failData{Code: status, Heading: heading, Message: msg}})
}

// internal logs err and answers 500.
func (u *ui) internal(w http.ResponseWriter, r *http.Request, err error) {
	u.log.Error("ui request failed", "op", r.Method+" "+r.URL.Path, "err", err)
	if _, ok := u.pages["error.html"]; !ok || strings.HasPrefix(err.Error(), "render error.html") {
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
		return
	}
	u.fail(w, r, http.StatusInternalServerError, "Something went wrong", "The server could not build this page; its log says why.")
}
