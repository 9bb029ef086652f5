package client

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
)

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"2", 2 * time.Second},
		{" 7 ", 7 * time.Second},
		{"999999999", 24 * time.Hour},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tc := range cases {
		if got := retryAfter(tc.in, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestAPIErrorUnwrap(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   error
	}{
		{409, "producer_fenced", ErrFenced},
		{409, "unknown_producer", ErrUnknownProducer},
		{409, "invalid_epoch", ErrInvalidEpoch},
		{409, "out_of_order_sequence", ErrOutOfOrder},
		{413, "too_large", ErrTooLarge},
		{400, "invalid_json", ErrInvalidJSON},
		{400, "invalid_stream", ErrInvalidStream},
		{400, "invalid_producer_headers", ErrBadRequest},
		{415, "unsupported_media_type", ErrUnsupportedMediaType},
		{401, "unauthorized", ErrUnauthorized},
		{403, "forbidden", ErrForbidden},
		{404, "not_found", ErrNotFound},
		{429, "backpressure", ErrBackpressure},
		{503, "not_ready", ErrNotReady},
		{503, "aborted", ErrAborted},
		{503, "shutting_down", ErrServer},
		{507, "insufficient_storage", ErrInsufficientStorage},
		{500, "internal", ErrServer},
		{502, "", ErrServer},
		{413, "", ErrTooLarge},
		{418, "", ErrUnexpectedStatus},
	}
	for _, tc := range cases {
		err := error(&APIError{Status: tc.status, Code: tc.code})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s: unwraps to %v, want %v", tc.status, tc.code, errors.Unwrap(err), tc.want)
		}
	}
}

// TestRefusedUnheard: which answers prove the service did not take the
// batch (its sequence number may be reused).
func TestRefusedUnheard(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   bool
	}{
		{400, "invalid_json", true},
		{409, "out_of_order_sequence", true},
		{429, "backpressure", true},
		{503, "not_ready", true},
		{503, "shutting_down", true},
		{507, "insufficient_storage", true},
		{503, "aborted", false},
		{500, "internal", false},
		{502, "", false},
		{400, "", false},
	}
	for _, tc := range cases {
		if got := (&APIError{Status: tc.status, Code: tc.code}).refusedUnheard(); got != tc.want {
			t.Errorf("%d %q: %v, want %v", tc.status, tc.code, got, tc.want)
		}
	}
}

func TestStreakBudget(t *testing.T) {
	s := streak{pol: Retry{Min: time.Millisecond, Max: 4 * time.Millisecond, MaxAttempts: 3}.withDefaults()}
	for i := range 2 {
		d, ok := s.next(0)
		if !ok || d <= 0 || d > 4*time.Millisecond {
			t.Fatalf("failure %d: %v %v", i+1, d, ok)
		}
	}
	if _, ok := s.next(0); ok {
		t.Fatal("third failure of three attempts: retried")
	}
	s = streak{pol: Retry{Min: time.Millisecond, MaxElapsed: time.Second}.withDefaults()}
	if d, ok := s.next(2 * time.Second); ok {
		t.Fatalf("Retry-After beyond MaxElapsed: waits %v", d)
	}
	s = streak{pol: Retry{Min: time.Millisecond, MaxElapsed: -1}.withDefaults()}
	if d, ok := s.next(time.Hour); !ok || d != time.Hour {
		t.Fatalf("no elapsed bound: %v %v", d, ok)
	}
}

func TestEncode(t *testing.T) {
	body, err := encode([][]byte{[]byte(`{"a":1}`), []byte(`2`)})
	if err != nil || string(body) != "{\"a\":1}\n2\n" {
		t.Fatalf("%q %v", body, err)
	}
	for _, recs := range [][][]byte{nil, {[]byte("")}, {[]byte(" \t")}, {[]byte("1\n2")}} {
		if _, err := encode(recs); err == nil {
			t.Errorf("%q accepted", recs)
		}
	}
}

// TestErrorCodes: every code the client tells apart is one the API sends.
func TestErrorCodes(t *testing.T) {
	for code := range codeErrors {
		if !slices.Contains(api.ErrorCodes, code) {
			t.Errorf("client knows code %q, which is not in api.ErrorCodes", code)
		}
	}
}
