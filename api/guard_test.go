package api

import (
	"net/http"
	"testing"
)

// TestHostGuardForms: without tokens, only loopback names and the
// --listen names are served, whatever their spelling; names that merely
// start or end like one (a DNS-rebinding page chooses its own name) and
// malformed ones are refused.
func TestHostGuardForms(t *testing.T) {
	r := newRig(t, rigOpts{api: func(c *Config) { c.Hosts = []string{"ingest.internal:8080"} }})
	tests := []struct {
		host string
		ok   bool
	}{
		{"localhost", true},
		{"LOCALHOST:8080", true},
		{"localhost.:8080", true}, // the fully qualified spelling
		{"127.0.0.1", true},
		{"127.0.0.2:80", true}, // all of 127/8 is loopback
		{"[::1]:8080", true},
		{"[0:0:0:0:0:0:0:1]", true},
		{"[::ffff:127.0.0.1]:8080", true},
		{"Ingest.Internal", true},
		{"ingest.internal:9999", true},
		{"127.0.0.1.evil.com", false},
		{"127.0.0.1.evil.com:8080", false},
		{"localhost.evil.com", false},
		{"evil-localhost", false},
		{"localhost..", false},
		{"ingest.internal.evil.com", false},
		{"evil.com", false},
		{"[::2]:8080", false},
		{"10.0.0.1:8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"::1", true},         // lenient spellings of loopback: no DNS name spells them
		{"[::1", true},        // (a rebound page's Host is its own name)
		{"", false},           // HTTP/1.0 without Host
		{"2130706433", false}, // 127.0.0.1 as one number: a browser's spelling, refused
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			req := request("GET", "/v1/files", "")
			req.Host = tt.host
			rec := r.serve(req)
			want := http.StatusOK
			if !tt.ok {
				want = http.StatusForbidden
			}
			expectStatus(t, rec, want)
		})
	}
}
