package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// rig is an engine rig (internal/testing/enginetest: the destination is
// checked when the test ends) over a disk with secrets outside the
// destination (no page may ever hold enginetest.Secret), served by the API
// and the UI.
type rig struct {
	*enginetest.Rig
	t     *testing.T
	base  afero.Fs
	eng   *server.Engine
	api   *api.Server
	ui    http.Handler
	h     http.Handler // API and UI together, as the command will serve them
	files committer.Reader
	auth  bool
	clock *clock
}

type rigOpts struct {
	auth   bool
	ui     func(*Config)
	engine func(Engine) Engine // wraps the engine the UI sees
	s3     *testsrv.MinIO      // the destination is this server's bucket, else the MemMapFs
}

// clock is a settable time source; zero means the real time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time {
	if c.t.IsZero() {
		return time.Now()
	}
	return c.t
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	er := enginetest.New(t, enginetest.Options{Secrets: true, S3: o.s3})
	r := &rig{Rig: er, t: t, base: er.Base, eng: er.Engine(), auth: o.auth, clock: &clock{}, files: er.Dest}
	r.api = newAPI(t, r.eng, r.files, o.auth)
	var eng Engine = r.eng
	if o.engine != nil {
		eng = o.engine(r.eng)
	}
	r.ui = newUI(t, eng, r.files, func(c *Config) {
		c.Node, c.Now = enginetest.Node, r.clock.now
		if o.auth {
			c.Auth = r.api.Gate() // one limit of invalid tokens for both, as the command has it
		}
		if o.ui != nil {
			o.ui(c)
		}
	})
	r.h = combine(r.api, r.ui)
	return r
}

// newAPI builds the API over eng: the one place the tests build one.
func newAPI(t testing.TB, eng *server.Engine, files committer.Reader, withAuth bool) *api.Server {
	t.Helper()
	cfg := api.Config{Engine: eng, Files: files}
	if withAuth {
		toks, err := auth.NewTokens(enginetest.TokenRoles())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Auth = toks
	}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	return srv
}

// newUI builds the UI over an engine (its stored checkpoints included) and
// the committed files, with the test's log; mod changes the rest. The one
// place the tests build a UI.
func newUI(t testing.TB, eng Engine, files committer.Reader, mod func(*Config)) http.Handler {
	t.Helper()
	cfg := Config{Engine: eng, Files: files, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("new ui: %v", err)
	}
	return h
}

// combine serves the UI at / and under /ui, and the API elsewhere: what
// the API's route table does once the UI is mounted there.
func combine(apiH, uiH http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/") {
			uiH.ServeHTTP(w, r)
			return
		}
		apiH.ServeHTTP(w, r)
	})
}

// req builds a request to a loopback Host; target is sent as is, so it may hold "..", "%2F"
// and the like. hdr is key, value pairs.
func req(method, target, body string, hdr ...string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.Host = "localhost:8080" // a loopback name, as the API requires without tokens
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func (r *rig) serve(q *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, q)
	return rec
}

// get fetches a UI page with token as the cookie ("" for none).
func (r *rig) get(target, token string) *httptest.ResponseRecorder {
	q := req("GET", target, "")
	if token != "" {
		q.AddCookie(&http.Cookie{Name: auth.CookieName, Value: token})
	}
	return r.serve(q)
}

// page fetches a page as admin and expects 200.
func (r *rig) page(t *testing.T, target string) string {
	t.Helper()
	rec := r.get(target, enginetest.TokAdmin)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d, want 200: %.2000s", target, rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// testLogger writes to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// apiDo calls the API with the admin token.
func (r *rig) apiDo(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	r.t.Helper()
	return r.serve(req(method, target, body, append(hdr, "Authorization", "Bearer "+enginetest.TokAdmin)...))
}

// write ingests records through the API and expects 202.
func (r *rig) write(stream, body string, hdr ...string) {
	r.t.Helper()
	rec := r.apiDo("POST", "/v1/streams/"+stream+"/records", body, append(hdr, "Content-Type", "application/x-ndjson")...)
	if rec.Code != http.StatusAccepted {
		r.t.Fatalf("write %s: %d %s", stream, rec.Code, rec.Body.String())
	}
}

// initProducer inits a producer through the API and returns its epoch.
func (r *rig) initProducer(id string) int64 {
	r.t.Helper()
	rec := r.apiDo("POST", "/v1/producers/"+id+"/init", "")
	if rec.Code != http.StatusOK {
		r.t.Fatalf("init %s: %d %s", id, rec.Code, rec.Body.String())
	}
	var p api.Producer
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		r.t.Fatal(err)
	}
	return p.Epoch
}

// checkpoint runs a checkpoint through the API and expects it committed.
func (r *rig) checkpoint() api.Checkpoint {
	r.t.Helper()
	rec := r.apiDo("POST", "/v1/checkpoints", "")
	if rec.Code != http.StatusOK {
		r.t.Fatalf("checkpoint: %d %s", rec.Code, rec.Body.String())
	}
	var c api.Checkpoint
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		r.t.Fatal(err)
	}
	if c.State != "committed" {
		r.t.Fatalf("checkpoint %d: %s %s", c.ID, c.State, c.Error)
	}
	return c
}

// seed ingests a little into two streams, one with a producer, and
// commits it. It returns the committed file of "clicks".
func (r *rig) seed() string {
	r.t.Helper()
	epoch := r.initProducer("app-1")
	r.write("clicks", "{\"user\":\"ada\",\"n\":1,\"tags\":[\"a\",\"b\"]}\n{\"user\":\"bob\",\"n\":2,\"ok\":true}\n",
		"Producer-Id", "app-1", "Producer-Epoch", fmt.Sprint(epoch), "Producer-Seq", "0")
	r.write("views", "{\"page\":\"/home\"}\n")
	c := r.checkpoint()
	for _, f := range c.Files {
		if f.Stream == "clicks" {
			return f.Path
		}
	}
	r.t.Fatalf("no clicks file in %+v", c.Files)
	return ""
}

// csrfOf returns the form token of a page.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in page")
	}
	return m[1]
}

// form posts a form with token as the cookie.
func (r *rig) form(target, token string, values url.Values, hdr ...string) *httptest.ResponseRecorder {
	q := req("POST", target, values.Encode(), append(hdr, "Content-Type", "application/x-www-form-urlencoded")...)
	if token != "" {
		q.AddCookie(&http.Cookie{Name: auth.CookieName, Value: token})
	}
	return r.serve(q)
}

func expectCode(t *testing.T, rec *httptest.ResponseRecorder, want int) {
	t.Helper()
	if rec.Code != want {
		t.Fatalf("status %d, want %d: %.600s", rec.Code, want, rec.Body.String())
	}
}

func expectContains(t *testing.T, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// memReader is a committer.Reader over a map, for listings too large to
// write to a filesystem quickly.
type memReader struct {
	entries []committer.Entry // sorted by path
	data    map[string][]byte
}

func newMemReader(files map[string][]byte, mod time.Time) *memReader {
	m := &memReader{data: files}
	for p, b := range files {
		m.entries = append(m.entries, committer.Entry{Path: p, Bytes: int64(len(b)), Modified: mod})
	}
	sort.Slice(m.entries, func(i, j int) bool { return m.entries[i].Path < m.entries[j].Path })
	return m
}

func (m *memReader) List(_ context.Context, prefix string) ([]committer.Entry, error) {
	var out []committer.Entry
	for _, e := range m.entries {
		if strings.HasPrefix(e.Path, prefix) {
			out = append(out, e)
		}
	}
	return out, nil
}

// ListPage makes memReader a committer.Pager.
func (m *memReader) ListPage(_ context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	i := sort.Search(len(m.entries), func(i int) bool { return m.entries[i].Path > after && m.entries[i].Path >= prefix })
	var out []committer.Entry
	for ; i < len(m.entries) && len(out) < limit && strings.HasPrefix(m.entries[i].Path, prefix); i++ {
		out = append(out, m.entries[i])
	}
	return out, nil
}

type nopSeekCloser struct{ *bytes.Reader }

func (nopSeekCloser) Close() error { return nil }

func (m *memReader) Open(_ context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	b, ok := m.data[name]
	if !ok {
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, committer.ErrNotFound)
	}
	i := sort.Search(len(m.entries), func(i int) bool { return m.entries[i].Path >= name })
	return nopSeekCloser{bytes.NewReader(b)}, m.entries[i], nil
}

// fakeEngine is an Engine with a fixed status and producers; newFakeUI
// adds its stored checkpoints.
type fakeEngine struct {
	status    server.Status
	producers []server.ProducerState
	ckpt      func(context.Context) (server.CheckpointResult, error)
}

func (f *fakeEngine) Status() server.Status { return f.status }
func (f *fakeEngine) ProducersPage(after string, limit int) ([]server.ProducerState, string, error) {
	var out []server.ProducerState
	for _, p := range f.producers {
		if p.ID > after && len(out) < limit {
			out = append(out, p)
		}
	}
	next := ""
	if len(out) == limit && out[len(out)-1].ID < f.producers[len(f.producers)-1].ID {
		next = out[len(out)-1].ID
	}
	return out, next, nil
}
func (f *fakeEngine) ProducerCount() int { return len(f.producers) }
func (f *fakeEngine) Checkpoint(ctx context.Context) (server.CheckpointResult, error) {
	if f.ckpt != nil {
		return f.ckpt(ctx)
	}
	return server.CheckpointResult{}, server.ErrNotReady
}

// fakeStore is the engine's stored checkpoints over a slice, newest last.
type fakeStore struct {
	cs      []recovery.Checkpoint
	version atomic.Uint64
}

// StateVersion changes at every call: tests change cs as they please, so
// nothing read from it may be kept.
func (f *fakeStore) StateVersion() uint64 { return f.version.Add(1) }

func (f *fakeStore) CheckpointRecord(id uint64) (*recovery.Checkpoint, error) {
	for i := range f.cs {
		if f.cs[i].ID == id {
			c := f.cs[i]
			return &c, nil
		}
	}
	return nil, fmt.Errorf("checkpoint %d: %w", id, recovery.ErrNotFound)
}

func (f *fakeStore) CheckpointRecords(before uint64, limit int) ([]recovery.Checkpoint, error) {
	var out []recovery.Checkpoint
	for i := len(f.cs) - 1; i >= 0 && len(out) < limit; i-- {
		if before == 0 || f.cs[i].ID < before {
			out = append(out, f.cs[i])
		}
	}
	return out, nil
}

// newFakeUI serves files with a fake engine and store.
func newFakeUI(t testing.TB, files committer.Reader, eng *fakeEngine, store *fakeStore, mod func(*Config)) http.Handler {
	t.Helper()
	if eng == nil {
		eng = &fakeEngine{status: server.Status{Ready: true, OpenID: 2, LastDone: 1}}
	}
	if store == nil {
		store = &fakeStore{}
	}
	return newUI(t, struct {
		*fakeEngine
		*fakeStore
	}{eng, store}, files, mod)
}
