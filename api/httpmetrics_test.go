package api

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// requestCounts gathers eosink_http_requests_total and the histogram's
// counts from reg as "route method code" → count.
func requestCounts(t *testing.T, reg *prometheus.Registry) (counter, histogram map[string]uint64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	counter, histogram = map[string]uint64{}, map[string]uint64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			key := l["route"] + " " + l["method"] + " " + l["code"]
			switch f.GetName() {
			case "eosink_http_requests_total":
				counter[key] = uint64(m.GetCounter().GetValue())
			case "eosink_http_request_duration_seconds":
				histogram[key] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return counter, histogram
}

// TestHTTPMetrics: requests are counted and timed by route pattern (never
// the raw path), method and code, including unmatched paths, unknown
// methods, a handler that writes no status (200), and a panic the
// recoverer turns into a 500.
func TestHTTPMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui/boom" {
			panic("boom")
		}
		_, _ = w.Write([]byte("ui page")) // no WriteHeader: 200
	})
	r := newRig(t, rigOpts{api: func(c *Config) { c.Registerer = reg }})
	// The UI beside the API, as eosink serve's root mux has it: Mount's
	// middleware covers it too.
	root := chi.NewRouter()
	r.srv.Mount(root)
	root.Get("/ui/*", ui.ServeHTTP)
	r.srv.handler = root
	// A second Server on the same registry shares the metrics.
	newServer(t, r.eng, r.srv.files, func(c *Config) { c.Registerer = reg })

	requests := []struct {
		method, target, body string
		status               int
	}{
		{"POST", "/v1/streams/clicks/records", "{}\n", http.StatusAccepted},
		{"POST", "/v1/streams/views/records", "{}\n", http.StatusAccepted},
		{"POST", "/v1/streams/views/records", "{\n", http.StatusBadRequest},
		{"GET", "/v1/streams/views/records", "", http.StatusMethodNotAllowed},
		{"GET", "/v1/files/clicks/no-such-file.ndjson", "", http.StatusNotFound},
		{"GET", "/no/such/route", "", http.StatusNotFound},
		{"BREW", "/healthz", "", http.StatusMethodNotAllowed},
		{"GET", "/healthz", "", http.StatusOK},
		{"GET", "/ui/files/clicks/", "", http.StatusOK},
		{"GET", "/ui/boom", "", http.StatusInternalServerError},
	}
	for _, q := range requests {
		rec := r.do(q.method, q.target, q.body, "Content-Type", "application/x-ndjson")
		if rec.Code != q.status {
			t.Fatalf("%s %s: %d, want %d: %s", q.method, q.target, rec.Code, q.status, rec.Body.String())
		}
	}

	counter, histogram := requestCounts(t, reg)
	want := map[string]uint64{
		"/v1/streams/{stream}/records POST 202": 2,
		"/v1/streams/{stream}/records POST 400": 1,
		"/v1/files/* GET 404":                   1,
		"/healthz GET 200":                      1,
		"/ui/* GET 200":                         1,
		"/ui/* GET 500":                         1,
		routeUnmatched + " GET 404":             1,
		// chi routes no pattern for a method a path lacks.
		routeUnmatched + " GET 405":   1,
		routeUnmatched + " other 405": 1,
	}
	for k, n := range want {
		if counter[k] != n || histogram[k] != n {
			t.Errorf("%s: counted %d, timed %d, want %d", k, counter[k], histogram[k], n)
		}
	}
	if len(counter) != len(want) || len(histogram) != len(want) {
		t.Errorf("series counted %v, timed %v; want %v", counter, histogram, want)
	}
}

func TestMethodLabel(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"GET", "GET"}, {"POST", "POST"}, {"DELETE", "DELETE"}, {"OPTIONS", "OPTIONS"},
		{"get", "other"}, {"BREW", "other"}, {"", "other"},
	} {
		if got := methodLabel(tt.in); got != tt.want {
			t.Errorf("methodLabel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
