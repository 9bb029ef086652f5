package api

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

const (
	tStaging = "/data/staging"
	tDest    = "/data/files"
	tNode    = "n1"
	// tSecret is the content of files outside the destination; no answer
	// of the API may ever hold it.
	tSecret = "TOP-SECRET-OUTSIDE-DEST"
)

// Tokens of the test rigs with authorization.
const (
	tokIngest = "ingest-token-0123456789"
	tokRead   = "read-token-0123456789"
	tokAdmin  = "admin-token-0123456789"
)

// rig is a real engine over a MemMapFs with the local committer, its state
// store in a temp dir, served by a Server.
type rig struct {
	t    *testing.T
	base afero.Fs // the whole disk, secrets included
	fs   afero.Fs // what the engine sees (base, or an InjectFS over it)
	eng  *server.Engine
	srv  *Server
}

type rigOpts struct {
	engine  func(*server.Config)
	api     func(*Config)
	inject  faultfs.Injector
	noReady bool // do not wait for recovery
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	base := afero.NewMemMapFs()
	for _, p := range []string{"/data/secret.txt", "/secret.txt", "/data/staging-secret.txt", "/data/files-secret.txt"} {
		if err := afero.WriteFile(base, p, []byte(tSecret+" "+p+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{tDest, tStaging} {
		if err := base.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &rig{t: t, base: base, fs: base}
	if o.inject != nil {
		r.fs = faultfs.NewInjectFS(base, o.inject)
	}
	loc := local.New(r.fs, tDest, tStaging)
	ecfg := server.Config{
		Node: tNode, FS: r.fs, StagingDir: tStaging, StorePath: filepath.Join(t.TempDir(), "state.db"),
		Committer: loc, Publisher: loc, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	if o.engine != nil {
		o.engine(&ecfg)
	}
	eng, err := server.Open(ecfg)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	r.eng = eng
	t.Cleanup(func() { _ = eng.Close() })
	if !o.noReady {
		r.waitReady()
	}
	acfg := Config{Engine: eng, Files: local.New(base, tDest, tStaging)}
	if o.api != nil {
		o.api(&acfg)
	}
	srv, err := New(acfg)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	r.srv = srv
	return r
}

func (r *rig) waitReady() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	if err := r.eng.WaitReady(ctx); err != nil {
		r.t.Fatalf("wait ready: %v", err)
	}
}

func withAuth(c *Config) {
	c.Auth = mustTokens(map[string]Role{tokIngest: RoleIngest, tokRead: RoleRead, tokAdmin: RoleAdmin})
	// The tables send many invalid tokens from httptest's one address;
	// TestAuthFailureLimit tests the limit.
	c.AuthFailures = 1 << 20
}

func mustTokens(m map[string]Role) *Tokens {
	t, err := NewTokens(m)
	if err != nil {
		panic(err)
	}
	return t
}

// request builds a request to a loopback Host; target is sent as is, so it
// may hold "..", "%2F" and the like. hdr is key, value pairs.
func request(method, target, body string, hdr ...string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	// checkOpenAPI reads the body again.
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	req.Host = "localhost:8080" // what curl sends to the default --listen
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return req
}

// serve serves req and checks the request and answer against openapi.yaml.
func (r *rig) serve(req *http.Request) *httptest.ResponseRecorder {
	r.t.Helper()
	var body []byte
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			r.t.Fatal(err)
		}
		body, _ = io.ReadAll(rc)
	}
	check := req.Clone(req.Context())
	rec := httptest.NewRecorder()
	r.srv.ServeHTTP(rec, req)
	checkOpenAPI(r.t, check, body, rec)
	return rec
}

func (r *rig) do(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	return r.serve(request(method, target, body, hdr...))
}

// admin does a request with the admin token (harmless without auth).
func (r *rig) admin(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	return r.do(method, target, body, append(hdr, "Authorization", "Bearer "+tokAdmin)...)
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %d %q: %v", v, rec.Code, rec.Body.String(), err)
	}
	return v
}

func expectStatus(t *testing.T, rec *httptest.ResponseRecorder, want int) {
	t.Helper()
	if rec.Code != want {
		t.Fatalf("status %d, want %d: %s", rec.Code, want, rec.Body.String())
	}
}

// checkpoint runs a checkpoint through the API and expects it committed.
func (r *rig) checkpoint() Checkpoint {
	r.t.Helper()
	rec := r.admin("POST", "/v1/checkpoints", "")
	expectStatus(r.t, rec, http.StatusOK)
	c := decode[Checkpoint](r.t, rec)
	if c.State != "committed" {
		r.t.Fatalf("checkpoint %d: %s %s", c.ID, c.State, c.Error)
	}
	return c
}

// initProducer inits a producer through the API and returns its epoch.
func (r *rig) initProducer(id string) int64 {
	r.t.Helper()
	rec := r.admin("POST", "/v1/producers/"+id+"/init", "")
	expectStatus(r.t, rec, http.StatusOK)
	return decode[Producer](r.t, rec).Epoch
}

// grep returns every file of the whole disk (staging and state of the
// engine's filesystem included) whose content holds s.
func grep(t *testing.T, fsys afero.Fs, s string) []string {
	t.Helper()
	var hits []string
	err := afero.Walk(fsys, "/", func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := afero.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), s) {
			hits = append(hits, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// destFiles returns the destination's files and their content.
func destFiles(t *testing.T, fsys afero.Fs) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := afero.Walk(fsys, tDest, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := afero.ReadFile(fsys, p)
		out[strings.TrimPrefix(p, tDest+"/")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// switchInjector fails the operations match selects while it is on.
type switchInjector struct {
	on    atomic.Bool
	match func(op faultfs.Op) bool
	err   error
}

func (s *switchInjector) MaybeError(op faultfs.Op) error {
	if s.on.Load() && s.match(op) {
		return s.err
	}
	return nil
}
