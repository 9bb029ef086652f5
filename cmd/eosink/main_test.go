package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("EOSINK_CHECKPOINT_INTERVAL", "250ms")
	t.Setenv("EOSINK_MAX_BODY", "2MiB")
	t.Setenv("EOSINK_NODE", "from-env")
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := envFlags(fs, []string{"--node", "from_flag"}); err != nil {
		t.Fatal(err)
	}
	if f.interval != 250*time.Millisecond || f.maxBody != 2<<20 || f.node != "from_flag" {
		t.Fatalf("interval %v, max body %d, node %q", f.interval, f.maxBody, f.node)
	}
	t.Setenv("EOSINK_MAX_BODY", "lots")
	if err := envFlags(serveFlagSet(&serveFlags{}, io.Discard), nil); err == nil || !strings.Contains(err.Error(), "EOSINK_MAX_BODY") {
		t.Fatalf("bad env value: %v", err)
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "10MB": 10e6, "512K": 512 << 10} {
		var s size
		if err := s.Set(in); err != nil || int64(s) != want {
			t.Errorf("size %q = %d, %v; want %d", in, s, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "MiB", "1.5GiB", "x"} {
		var s size
		if err := s.Set(bad); err == nil {
			t.Errorf("size %q accepted", bad)
		}
	}
}

func TestListenNeedsAuthOffLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:1": true, "[::1]:80": true, "0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir()}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("serving 0.0.0.0 without tokens: %v", err)
	}
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "eosink ") {
		t.Fatalf("version: %q %v", out.String(), err)
	}
	if err := run(context.Background(), []string{"frobnicate"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("unknown command: %v", err)
	}
	if err := run(context.Background(), []string{"serve", "--help"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if err := run(context.Background(), []string{"verify"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("verify without --dest: %v", err)
	}
}

// verify --dry-run on a local destination: nothing remote to sweep, and
// the JSON report carries the (empty) orphan list beside the verification.
func TestVerifyDryRunLocal(t *testing.T) {
	dest := t.TempDir()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"verify", "--dest", "file://" + dest, "--dry-run"}, &out, io.Discard); err != nil {
		t.Fatalf("verify --dry-run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "dry run: 0 uploads and staging objects found") || strings.Contains(out.String(), "ORPHAN") {
		t.Fatalf("verify --dry-run output:\n%s", out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"verify", "--dest", "file://" + dest, "--dry-run", "--json", "--node", "n1"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Manifests *int           `json:"manifests"`
		Orphans   map[string]any `json:"orphans"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Manifests == nil || doc.Orphans == nil {
		t.Fatalf("verify --dry-run --json: %v\n%s", err, out.String())
	}
}
