package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// routeUnmatched is the route label of a request that no route matched, so
// that no raw path ever becomes a label value.
const routeUnmatched = "unmatched"

// httpMetrics counts and times the API's requests by route pattern,
// method and status code. Every label is bounded: the route is the chi
// pattern (e.g. /v1/streams/{stream}/records), never the path; methods
// outside the standard ones are "other"; codes are what handlers write.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newHTTPMetrics registers the request metrics on reg; nil reg means no
// metrics. Metrics already registered there (a second Server on the same
// registry) are shared.
func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := []string{"route", "method", "code"}
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eosink_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code."}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eosink_http_request_duration_seconds",
			Help: "Time from a request's arrival to the end of its answer, by route pattern, method and status code.",
			// Up to a minute: writes with wait=commit and downloads take long.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, labels),
	}
	if err := register(reg, &m.requests); err != nil {
		return nil, err
	}
	if err := register(reg, &m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c on reg, or takes the collector that is there.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(C); ok {
			*c = prev
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("register http metrics: %w", err)
	}
	return nil
}

// instrument is the router's outermost middleware: it learns the route
// pattern once chi has routed the request, and the status code from the
// answer (200 when the handler wrote none).
func (m *httpMetrics) instrument(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := routeUnmatched
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		code := ww.Status()
		if code == 0 {
			code = http.StatusOK
		}
		labels := []string{route, methodLabel(r.Method), strconv.Itoa(code)}
		m.requests.WithLabelValues(labels...).Inc()
		m.duration.WithLabelValues(labels...).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the request method if standard, else "other".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}
