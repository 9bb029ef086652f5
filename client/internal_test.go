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

// answers are the service's answers the client classifies: the sentinel
// each unwraps to, and whether it proves the service did not take the
// batch (refusedUnheard: its sequence number may be reused).
var answers = []struct {
	status  int
	code    string
	want    error
	unheard bool
}{
	{409, "producer_fenced", ErrFenced, true},
	{409, "unknown_producer", ErrUnknownProducer, true},
	{409, "invalid_epoch", ErrInvalidEpoch, true},
	{409, "out_of_order_sequence", ErrOutOfOrder, true},
	{413, "too_large", ErrTooLarge, true},
	{400, "invalid_json", ErrInvalidJSON, true},
	{400, "invalid_stream", ErrInvalidStream, true},
	{400, "invalid_producer_headers", ErrBadRequest, true},
	{415, "unsupported_media_type", ErrUnsupportedMediaType, true},
	{401, "unauthorized", ErrUnauthorized, true},
	{403, "forbidden", ErrForbidden, true},
	{404, "not_found", ErrNotFound, true},
	{429, "backpressure", ErrBackpressure, true},
	{503, "not_ready", ErrNotReady, true},
	{503, "aborted", ErrAborted, false},
	{503, "shutting_down", ErrServer, true},
	{507, "insufficient_storage", ErrInsufficientStorage, true},
	{500, "internal", ErrServer, false},
	{502, "", ErrServer, false},
	{413, "", ErrTooLarge, false},
	{400, "", ErrBadRequest, false},
	{418, "", ErrUnexpectedStatus, false},
}

func TestAPIErrorUnwrap(t *testing.T) {
	for _, tc := range answers {
		err := error(&APIError{Status: tc.status, Code: tc.code})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %s: unwraps to %v, want %v", tc.status, tc.code, errors.Unwrap(err), tc.want)
		}
	}
}

// TestRefusedUnheard: which answers prove the service did not take the
// batch (its sequence number may be reused).
func TestRefusedUnheard(t *testing.T) {
	for _, tc := range answers {
		if got := (&APIError{Status: tc.status, Code: tc.code}).refusedUnheard(); got != tc.unheard {
			t.Errorf("%d %q: %v, want %v", tc.status, tc.code, got, tc.unheard)
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
