package recoverer

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWrap(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	answer := func(w http.ResponseWriter) { http.Error(w, "oops", http.StatusInternalServerError) }
	h := Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic(errors.New("boom"))
	}), log, "handler panicked", answer)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "oops") {
		t.Errorf("answer %d %q, want 500 oops", rec.Code, rec.Body)
	}
	if s := logged.String(); !strings.Contains(s, "handler panicked") || !strings.Contains(s, `op="GET /x"`) || !strings.Contains(s, "panic=boom") {
		t.Errorf("log %q", s)
	}

	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("recovered %v, want http.ErrAbortHandler panicked again", v)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abort", nil))
}
