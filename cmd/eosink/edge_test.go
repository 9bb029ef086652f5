package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/afero"
)

// TestTokenFileWarning: a token file other users can read is warned about.
func TestTokenFileWarning(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("admin a-very-long-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for mode, warn := range map[os.FileMode]bool{0o600: false, 0o640: false, 0o644: true, 0o604: true} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		got := tokenFileWarning(p)
		if (got != "") != warn || warn && !strings.Contains(got, p) {
			t.Errorf("mode %v: warning %q, want one: %v", mode, got, warn)
		}
	}
}

// TestExitCodes: every usage or configuration error exits 2, with a reason.
func TestExitCodes(t *testing.T) {
	data := t.TempDir()
	missing := filepath.Join(t.TempDir(), "no-such-dest")
	tests := []struct {
		name string
		args []string
		want string // in the error
	}{
		{"unknown flag", []string{"serve", "--frobnicate"}, "frobnicate"},
		{"bad size", []string{"serve", "--max-body", "lots"}, "max-body"},
		{"size overflow", []string{"serve", "--max-body", "9000000TiB"}, "max-body"},
		{"record over body", []string{"serve", "--max-record", "128MiB"}, "--max-record"},
		{"inflight under two bodies", []string{"serve", "--max-body", "200MiB", "--max-inflight-body", "256MiB"}, "--max-inflight-body"},
		{"negative interval", []string{"serve", "--checkpoint-interval", "-1s"}, "--checkpoint-interval"},
		{"negative linger", []string{"serve", "--commit-linger", "-1ms"}, "--commit-linger"},
		{"negative min gap", []string{"serve", "--commit-min-gap", "-1ms"}, "--commit-min-gap"},
		{"zero idempotency window", []string{"serve", "--idempotency-window", "0"}, "--idempotency-window"},
		{"zero wait timeout", []string{"serve", "--wait-timeout", "0"}, "--wait-timeout 0"},
		{"zero shutdown timeout", []string{"serve", "--shutdown-timeout", "0"}, "--shutdown-timeout 0"},
		{"zero body timeout", []string{"serve", "--body-timeout", "0s"}, "--body-timeout 0"},
		{"zero download stall", []string{"serve", "--download-stall", "0"}, "--download-stall 0"},
		{"zero lease timeout", []string{"serve", "--lease-timeout", "0"}, "--lease-timeout 0"},
		{"short lease timeout", []string{"serve", "--lease-timeout", "100ms"}, "--lease-timeout 100ms"},
		{"negative sweep interval", []string{"serve", "--orphan-sweep-interval", "-1m"}, "--orphan-sweep-interval"},
		{"negative producer expiry", []string{"serve", "--producer-expiry", "-1h"}, "--producer-expiry"},
		{"zero healthcheck timeout", []string{"healthcheck", "--timeout", "0"}, "--timeout 0"},
		{"no idempotency keys", []string{"serve", "--idempotency-max-keys", "0"}, "idempotency-max-keys"},
		{"bad node", []string{"serve", "--node", "-a"}, "--node"},
		{"node with slash", []string{"serve", "--node", "a/b"}, "--node"},
		{"node too long", []string{"serve", "--node", strings.Repeat("a", 65)}, "--node"},
		// A host name with '-' (a Kubernetes pod, eosink-0) is a node id:
		// the next check is the one that fails.
		{"node with dash", []string{"serve", "--node", "eosink-0", "--checkpoint-interval", "-1s"}, "--checkpoint-interval"},
		{"bad log level", []string{"serve", "--log-level", "loud"}, "--log-level"},
		{"bad dest", []string{"serve", "--dest", "ftp://x"}, "--dest"},
		{"relative dest", []string{"serve", "--dest", "file://relative"}, "--dest"},
		{"pprof not loopback", []string{"serve", "--pprof-listen", "10.1.2.3:6060"}, "--pprof-listen"},
		{"pprof not an address", []string{"serve", "--pprof-listen", "nonsense"}, "--pprof-listen"},
		{"bad trusted proxy", []string{"serve", "--trusted-proxies", "10.0.0.0/8,nonsense"}, "trusted-proxies"},
		{"verify missing dest", []string{"verify", "--dest", "file://" + missing}, missing},
		{"verify without dest", []string{"verify"}, "--dest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args[0] == "serve" {
				args = append(args, "--data-dir", data, "--listen", "127.0.0.1:0")
			}
			var stdout bytes.Buffer
			err := run(t.Context(), args, &stdout, io.Discard)
			if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v: exit %d, error %v; want 2 and %q", tt.args, code, err, tt.want)
			}
			if strings.Contains(stdout.String(), "listening") {
				t.Fatalf("%v: served before refusing: %q", tt.args, stdout.String())
			}
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("verify created the destination it was asked to check: %v", err)
	}
}

func TestSizeOverflow(t *testing.T) {
	for _, bad := range []string{"9000000TiB", "9223372036854775807KiB", "9223372036854775808"} {
		var s size
		if err := s.Set(bad); err == nil {
			t.Errorf("size %q accepted as %d", bad, s)
		}
	}
	var s size
	if err := s.Set("8388607TiB"); err != nil || int64(s) != 8388607<<40 {
		t.Errorf("largest TiB size: %d %v", s, err)
	}
}

// TestDestAndStagingApart: neither directory may hold the other; a name
// that merely starts with ".." is inside, not outside.
func TestDestAndStagingApart(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		dest, staging string
		ok            bool
	}{
		{"files", "staging", true},
		{"files", "files/staging", false},
		{"files", "files/..x", false},
		{"data/staging/files", "data/staging", false},
		{"data/staging/..x", "data/staging", false},
		{"same", "same", false},
		{"a..", "a", true},
		{"..x-sibling", "staging2", true},
	}
	for _, tt := range tests {
		dest, staging := filepath.Join(root, tt.dest), filepath.Join(root, tt.staging)
		if err := os.MkdirAll(staging, 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err := openDest(t.Context(), destFlags{dest: "file://" + dest}, afero.NewOsFs(), staging, "n", slog.New(slog.DiscardHandler))
		if (err == nil) != tt.ok {
			t.Errorf("dest %s, staging %s: %v, want ok %v", tt.dest, tt.staging, err, tt.ok)
		}
	}
}
