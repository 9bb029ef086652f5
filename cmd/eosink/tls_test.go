package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/testcert"
)

// syncBuffer is a log sink read while the reloader writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCertReloader: the certificate is replaced on SIGHUP and on a file
// change, and a reload that fails keeps the last good one and logs why.
func TestCertReloader(t *testing.T) {
	ca := testcert.NewCA(t, "reload CA")
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := ca.Server(t, "first")
	first.Write(t, certPath, keyPath)
	var logs syncBuffer
	r, err := newCertReloader(certPath, keyPath, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serving := func() string {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	if got := serving(); got != "first" {
		t.Fatalf("serving %q at start", got)
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for serving() != want {
			if time.Now().After(deadline) {
				t.Fatalf("still serving %q, want %q; log:\n%s", serving(), want, logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	t.Run("SIGHUP", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		hup := make(chan os.Signal, 1)
		done := make(chan struct{})
		go func() { r.run(ctx, hup, time.Hour); close(done) }()
		defer func() { cancel(); <-done }()
		ca.Server(t, "second").Write(t, certPath, keyPath)
		time.Sleep(20 * time.Millisecond)
		if got := serving(); got != "first" {
			t.Fatalf("reloaded without a signal (poll is 1h): %q", got)
		}
		hup <- os.Interrupt // the value is not looked at
		waitFor("second")
		// A broken pair: the old key with a new certificate.
		if err := os.WriteFile(certPath, ca.Server(t, "mismatched").CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		hup <- os.Interrupt
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), "tls certificate reload failed") {
			if time.Now().After(deadline) {
				t.Fatalf("no reload failure logged:\n%s", logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := serving(); got != "second" {
			t.Fatalf("after a failed reload serving %q, want the last good %q", got, "second")
		}
	})

	t.Run("file change", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { r.run(ctx, nil, 10*time.Millisecond); close(done) }()
		defer func() { cancel(); <-done }()
		ca.Server(t, "third").Write(t, certPath, keyPath)
		waitFor("third")
		if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if got := serving(); got != "third" {
			t.Fatalf("after a broken key serving %q", got)
		}
		ca.Server(t, "fourth").Write(t, certPath, keyPath)
		waitFor("fourth")
	})
}

func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "flags CA")
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Server(t, "flags").Write(t, certPath, keyPath)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", certPath}, "--tls-cert and --tls-key go together"},
		{"key without cert", []string{"--tls-key", keyPath}, "--tls-cert and --tls-key go together"},
		{"missing file", []string{"--tls-cert", certPath + ".nope", "--tls-key", keyPath}, "load tls certificate"},
		{"key for the cert", []string{"--tls-cert", certPath, "--tls-key", certPath}, "load tls certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
			err := run(t.Context(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve %v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("EOSINK_TLS_CERT", certPath)
		t.Setenv("EOSINK_TLS_KEY", keyPath)
		var f serveFlags
		if err := envFlags(serveFlagSet(&f, io.Discard), nil); err != nil {
			t.Fatal(err)
		}
		if f.certFile != certPath || f.keyFile != keyPath {
			t.Fatalf("tls flags from env: %+v", f.tlsFlags)
		}
	})
}

// TestPlainHTTPWarning: serving a non-loopback address without TLS logs a
// loud warning (tokens still work). 192.0.2.1 (TEST-NET-1) is not on this
// machine, so the listen fails after the warning and nothing is bound.
func TestPlainHTTPWarning(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("admin 0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	err := run(t.Context(), []string{"serve", "--data-dir", t.TempDir(), "--listen", "192.0.2.1:0", "--token-file", tokens, "--log-format", "text"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("serve on 192.0.2.1: %v, want a listen error", err)
	}
	if !strings.Contains(stderr.String(), "TLS IS OFF") {
		t.Errorf("no warning logged; log:\n%s", stderr.String())
	}
	for _, listen := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		var logs syncBuffer
		st, err := startTLS(t.Context(), tlsFlags{}, listen, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		if strings.Contains(logs.String(), "TLS IS OFF") {
			t.Errorf("warning on loopback %s: %s", listen, logs.String())
		}
	}
}
