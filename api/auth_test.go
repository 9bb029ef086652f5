package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/go-chi/chi/v5"
)

// routeSet returns "METHOD /pattern" for every route of the router, with
// chi's trailing "/*" written as the document's "/{path}".
func routeSet(t *testing.T, h http.Handler) []string {
	t.Helper()
	var out []string
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasSuffix(route, "/*") {
			route = strings.TrimSuffix(route, "*") + "{path}"
		}
		out = append(out, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestAuthTable sends every route with every kind of credentials.
func TestAuthTable(t *testing.T) {
	r := filled(t, rigOpts{api: withAuth})
	r.initProducer("p")
	file := decode[FileList](t, r.admin("GET", "/v1/files", "")).Files[0].Path

	const (
		open = iota
		ingestOnly
		producers // ingest or read
		readOnly
		adminOnly
	)
	routes := []struct {
		pattern, target, body, ct string
		who                       int
		ok                        int
	}{
		{"POST /v1/streams/{stream}/records", "/v1/streams/s/records", "{}", "application/x-ndjson", ingestOnly, 202},
		{"POST /v1/producers/{producer}/init", "/v1/producers/q/init", "", "", ingestOnly, 200},
		{"GET /v1/producers/{producer}", "/v1/producers/p", "", "", producers, 200},
		{"GET /v1/producers", "/v1/producers", "", "", producers, 200},
		{"GET /v1/producers/{producer}/streams/{stream}/seqs/{seq}", "/v1/producers/p/streams/clicks/seqs/0", "", "", producers, 404},
		{"GET /v1/commits", "/v1/commits?limit=1", "", "", readOnly, 200},
		{"DELETE /v1/producers/{producer}", "/v1/producers/nobody", "", "", adminOnly, 404},
		{"POST /v1/checkpoints", "/v1/checkpoints", "", "", adminOnly, 200},
		{"GET /v1/checkpoints/{id}", "/v1/checkpoints/1", "", "", readOnly, 200},
		{"GET /v1/checkpoints", "/v1/checkpoints?limit=5", "", "", readOnly, 200},
		{"GET /v1/streams", "/v1/streams", "", "", readOnly, 200},
		{"PUT /v1/streams/{stream}", "/v1/streams/conf", `{"compression":"gzip"}`, "application/json", adminOnly, 200},
		{"GET /v1/streams/{stream}", "/v1/streams/clicks", "", "", readOnly, 200},
		{"GET /v1/files", "/v1/files?prefix=clicks", "", "", readOnly, 200},
		{"GET /v1/files/{path}", "/v1/files/" + file, "", "", readOnly, 200},
		{"HEAD /v1/files/{path}", "/v1/files/" + file, "", "", readOnly, 200},
		{"GET /v1/openapi.yaml", "/v1/openapi.yaml", "", "", readOnly, 200},
		{"GET /metrics", "/metrics", "", "", readOnly, 200},
		{"GET /", "/", "", "", readOnly, 200},
		{"GET /healthz", "/healthz", "", "", open, 200},
		{"GET /readyz", "/readyz", "", "", open, 200},
	}
	var patterns []string
	for _, rt := range routes {
		patterns = append(patterns, rt.pattern)
	}
	slices.Sort(patterns)
	if got := routeSet(t, r.srv.Handler()); !slices.Equal(got, patterns) {
		t.Fatalf("the table misses routes:\nrouter %q\ntable  %q", got, patterns)
	}

	type cred struct {
		name string
		hdr  []string
		role auth.Role // 0: no valid token
	}
	creds := []cred{
		{"none", nil, 0},
		{"unknown token", []string{"Authorization", "Bearer " + enginetest.TokAdmin + "x"}, 0},
		{"token prefix", []string{"Authorization", "Bearer " + enginetest.TokAdmin[:10]}, 0},
		{"basic scheme", []string{"Authorization", "Basic " + enginetest.TokAdmin}, 0},
		{"empty bearer", []string{"Authorization", "Bearer "}, 0},
		{"ingest", []string{"Authorization", "Bearer " + enginetest.TokIngest}, auth.RoleIngest},
		{"read", []string{"Authorization", "Bearer " + enginetest.TokRead}, auth.RoleRead},
		{"admin", []string{"Authorization", "bearer " + enginetest.TokAdmin}, auth.RoleAdmin},
		{"read cookie", []string{"Cookie", auth.CookieName + "=" + enginetest.TokRead}, auth.RoleRead},
		{"admin cookie", []string{"Cookie", auth.CookieName + "=" + enginetest.TokAdmin}, auth.RoleAdmin},
		{"ingest cookie", []string{"Cookie", auth.CookieName + "=" + enginetest.TokIngest}, auth.RoleIngest},
		{"bad header beats good cookie", []string{"Authorization", "Bearer nope", "Cookie", auth.CookieName + "=" + enginetest.TokAdmin}, 0},
	}
	for _, rt := range routes {
		method := strings.Fields(rt.pattern)[0]
		for _, c := range creds {
			role := c.role
			if method != http.MethodGet && method != http.MethodHead && strings.HasSuffix(c.name, " cookie") {
				role = 0 // cookies count for GET and HEAD only
			}
			want := rt.ok
			if rt.who != open {
				allowed := role == auth.RoleAdmin ||
					rt.who == ingestOnly && role == auth.RoleIngest ||
					rt.who == producers && (role == auth.RoleIngest || role == auth.RoleRead) ||
					rt.who == readOnly && role == auth.RoleRead
				switch {
				case role == 0:
					want = http.StatusUnauthorized
				case !allowed:
					want = http.StatusForbidden
				}
			}
			hdr := append([]string{}, c.hdr...)
			if rt.ct != "" {
				hdr = append(hdr, "Content-Type", rt.ct)
			}
			rec := r.do(method, rt.target, rt.body, hdr...)
			if rec.Code != want {
				t.Errorf("%s as %s: %d, want %d: %s", rt.pattern, c.name, rec.Code, want, rec.Body.String())
				continue
			}
			switch want {
			case http.StatusUnauthorized:
				if e := decode[ErrorResponse](t, rec); e.Error != "unauthorized" || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s as %s: %+v %q", rt.pattern, c.name, e, rec.Header().Get("WWW-Authenticate"))
				}
			case http.StatusForbidden:
				if e := decode[ErrorResponse](t, rec); e.Error != "forbidden" {
					t.Errorf("%s as %s: %+v", rt.pattern, c.name, e)
				}
			}
			if method == http.MethodPost && strings.HasSuffix(rt.pattern, "/records") && rec.Header().Get(CheckpointHeader) == "" {
				t.Errorf("%s as %s: no %s", rt.pattern, c.name, CheckpointHeader)
			}
		}
	}
}

// TestOpenAPIMatchesRoutes checks that openapi.yaml documents exactly the
// routes the router serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	// With the UI's routes beside the API's, as eosink serve's root mux
	// adds them (cmd/eosink's TestRootRoutes pins that table).
	r := newRig(t, rigOpts{})
	root := chi.NewRouter()
	r.srv.Mount(root)
	for _, p := range []string{"/", "/ui", "/ui/*"} {
		root.Get(p, http.NotFound)
	}
	root.Post("/ui/*", http.NotFound)
	served := routeSet(t, root)
	t.Logf("served %q", served)
	documented := openAPIOperations(t, string(openAPI))
	if !slices.Equal(served, documented) {
		t.Fatalf("router and openapi.yaml differ:\nserved     %q\ndocumented %q", served, documented)
	}
	if len(served) < 15 {
		t.Fatalf("only %d routes", len(served))
	}
}

// openAPIOperations reads "METHOD /path" pairs from the document's paths
// section: paths are keys indented two spaces, operations keys indented
// four, as the file's header comment promises.
func openAPIOperations(t *testing.T, doc string) []string {
	t.Helper()
	var out []string
	in, path := false, ""
	for n, line := range strings.Split(doc, "\n") {
		switch {
		case line == "paths:":
			in = true
			continue
		case !in || line == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
			continue
		case line[0] != ' ':
			in = false
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		key, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case indent == 2:
			if !ok || rest != "" || !strings.HasPrefix(key, "/") {
				t.Fatalf("openapi.yaml line %d: want a path key, got %q", n+1, line)
			}
			path = key
		case indent == 4:
			m := strings.ToUpper(key)
			if !ok || rest != "" || !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}, m) {
				t.Fatalf("openapi.yaml line %d: want an operation, got %q", n+1, line)
			}
			out = append(out, m+" "+path)
		}
	}
	slices.Sort(out)
	return out
}
