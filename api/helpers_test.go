package api

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// failStaging fails every operation of kind on a staging file (its
// ".inprogress" name) with err: a failed sync aborts the checkpoint before
// "prepared", a failed open refuses the write.
func failStaging(kind faultfs.OpKind, err error) faultfs.Injector {
	return faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == kind && strings.HasSuffix(op.Path, ".inprogress") {
			return err
		}
		return nil
	})
}

// rig is an engine rig (internal/testing/enginetest: the destination is
// checked when the test ends) over a disk with secrets outside the
// destination (no answer may ever hold enginetest.Secret), served by a
// Server.
type rig struct {
	*enginetest.Rig
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
	er := enginetest.New(t, enginetest.Options{Secrets: true, Inject: o.inject, Config: o.engine, NoReady: o.noReady})
	r := &rig{Rig: er, t: t, base: er.Base, fs: er.FS, eng: er.Engine()}
	r.srv = newServer(t, r.eng, local.New(r.base, enginetest.Dest, enginetest.Staging), o.api)
	return r
}

// newServer serves eng and the committed files: the one place the tests
// build a Server.
func newServer(t *testing.T, eng *server.Engine, files committer.Reader, mod func(*Config)) *Server {
	t.Helper()
	cfg := Config{Engine: eng, Files: files}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	return srv
}

func (r *rig) waitReady() { r.t.Helper(); r.WaitReady() }

func withAuth(c *Config) {
	c.Auth = mustTokens(enginetest.TokenRoles())
	// The tables send many invalid tokens from httptest's one address;
	// TestAuthFailureLimit tests the limit.
	c.AuthFailures = 1 << 20
}

func mustTokens(m map[string]auth.Role) *auth.Tokens {
	t, err := auth.NewTokens(m)
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
	return r.do(method, target, body, append(hdr, "Authorization", "Bearer "+enginetest.TokAdmin)...)
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

// getOK GETs target, expects 200 and decodes the answer.
func getOK[T any](r *rig, target string) T {
	r.t.Helper()
	rec := r.do("GET", target, "")
	expectStatus(r.t, rec, http.StatusOK)
	return decode[T](r.t, rec)
}

// expectError fails the test unless rec is an error answer with status
// and code, and returns it.
func expectError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) ErrorResponse {
	t.Helper()
	expectStatus(t, rec, status)
	e := decode[ErrorResponse](t, rec)
	if e.Error != code {
		t.Fatalf("answer %+v, want code %s", e, code)
	}
	return e
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
	err := afero.Walk(fsys, enginetest.Dest, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := afero.ReadFile(fsys, p)
		out[strings.TrimPrefix(p, enginetest.Dest+"/")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
