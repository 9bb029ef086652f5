package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/server"
	"github.com/eosink/eosink/web"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/afero"
)

// testRoot builds the process's root handler over an engine on a memory
// file system, as startProcess wires it.
func testRoot(t *testing.T) http.Handler {
	t.Helper()
	fsys := afero.NewMemMapFs()
	dest := local.New(fsys, "/dest", "/staging")
	eng, err := server.Open(server.Config{Node: "eosink-0", FS: fsys, StagingDir: "/staging",
		StorePath: filepath.Join(t.TempDir(), "state.db"), Committer: dest, Publisher: dest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := eng.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ui, err := web.New(web.Config{Engine: eng, Files: dest, Node: "eosink-0"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := api.New(api.Config{Engine: eng, Files: dest, Gatherer: reg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return newRootMux(a, ui)
}

// TestRootRoutes pins the route table eosink serve answers with: the API's
// routes and the UI's as siblings, with the API's 404 and 405 answers and
// its guard in front of every one of them.
func TestRootRoutes(t *testing.T) {
	h := testRoot(t)
	var routes []string
	if err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+route)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(routes)
	want := []string{
		"DELETE /v1/producers/{producer}", "GET /", "GET /healthz", "GET /metrics", "GET /readyz",
		"GET /ui", "GET /ui/*", "GET /v1/checkpoints", "GET /v1/checkpoints/{id}", "GET /v1/commits", "GET /v1/files", "GET /v1/files/*",
		"GET /v1/openapi.yaml", "GET /v1/producers", "GET /v1/producers/{producer}", "GET /v1/producers/{producer}/streams/{stream}/seqs/{seq}", "GET /v1/streams", "GET /v1/streams/{stream}",
		"HEAD /v1/files/*", "POST /ui/*", "POST /v1/checkpoints", "POST /v1/producers/{producer}/init",
		"POST /v1/streams/{stream}/records", "PUT /v1/streams/{stream}",
	}
	if !slices.Equal(routes, want) {
		t.Errorf("routes:\n%q\nwant\n%q", routes, want)
	}
	for _, c := range []struct {
		method, target, host string
		status               int
		allow, body          string // Allow header, a piece of the body
	}{
		{"GET", "/healthz", "", 200, "", ""},
		{"GET", "/readyz", "", 200, "", ""},
		{"GET", "/metrics", "", 200, "", "eosink_http_requests_total"},
		{"GET", "/", "", http.StatusSeeOther, "", ""},
		{"GET", "/ui", "", http.StatusSeeOther, "", ""},
		{"GET", "/ui/", "", 200, "", "eosink"},
		{"GET", "/ui/no-such-page", "", 404, "", ""},
		{"DELETE", "/ui/x", "", 405, "GET, POST", `"method_not_allowed"`},
		{"POST", "/", "", 405, "GET", `"method_not_allowed"`},
		{"HEAD", "/", "", 405, "GET", ""},
		{"GET", "/nope", "", 404, "", `"not_found"`},
		{"GET", "/v1/nope", "", 404, "", `"not_found"`},
		{"PUT", "/v1/checkpoints", "", 405, "GET, POST", `"method_not_allowed"`},
		{"GET", "/v1/streams", "", 200, "", `"streams"`},
		{"GET", "/ui/", "evil.example", 403, "", `"forbidden"`},
		{"GET", "/v1/streams", "evil.example", 403, "", `"forbidden"`},
	} {
		req := httptest.NewRequest(c.method, c.target, nil)
		req.Host = "127.0.0.1:8080"
		if c.host != "" {
			req.Host = c.host
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("%s %s (Host %s): %d Allow %q %.200q; want %d Allow %q and %q", c.method, c.target, req.Host,
				rec.Code, rec.Header().Get("Allow"), rec.Body.String(), c.status, c.allow, c.body)
		}
	}
	// Requests to the UI count in the API's request metrics, by route.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Host = "localhost"
	h.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `route="/ui/*"`) {
		t.Errorf("no request metrics of the UI's routes:\n%s", rec.Body.String())
	}
}
