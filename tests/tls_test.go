package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/testing/testcert"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/minio/minio-go/v7"
)

// TestTLS runs the binary with --tls-cert and --tls-key: curl and the Go
// client reach it through the test's private CA, plain HTTP is refused,
// answers carry HSTS and the UI cookie is Secure, and a rotated
// certificate is served to new connections after SIGHUP and, without a
// signal, after the file watcher sees the change. A broken rotation keeps
// the last good certificate.
func TestTLS(t *testing.T) {
	dir := workDir(t)
	ca := testcert.NewCA(t, "eosink e2e CA")
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caFile)
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Server(t, "first").Write(t, certPath, keyPath)
	const token = "tls-admin-token-0123456789abcdef"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("admin "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	roots := &tls.Config{RootCAs: ca.Pool()}
	p := newProc(t, dir, procConfig{
		Args:      []string{"--tls-cert", certPath, "--tls-key", keyPath, "--token-file", tokens, "--checkpoint-interval", "200ms", "--node", "tls"},
		ClientTLS: roots,
	})
	p.StartReady()
	ctx := t.Context()

	t.Run("go client", func(t *testing.T) {
		c, err := client.New(p.URL, client.WithTLSConfig(roots), client.WithToken(token), client.WithProducer("tls-client"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Init(ctx); err != nil {
			t.Fatalf("init over TLS: %v", err)
		}
		res, err := c.SendWait(ctx, "secure", [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`)})
		if err != nil || !res.Committed || res.Records != 2 {
			t.Fatalf("send over TLS: %+v %v", res, err)
		}
		noCA, err := client.New(p.URL, client.WithToken(token), client.WithProducer("no-ca"), client.WithRetry(client.Retry{MaxAttempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := noCA.Init(ctx); err == nil || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("init without the CA: %v, want an unknown-authority error", err)
		}
	})

	t.Run("curl", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("curl not found (CI=true, so this fails instead of skipping)")
			}
			t.Skip("curl not found: install curl to run this check")
		}
		out, err := exec.CommandContext(ctx, curl, "-sS", "--fail", "--cacert", caFile, "-H", "Authorization: Bearer "+token,
			"-D", "-", p.URL+"/v1/files?prefix=secure/").CombinedOutput()
		if err != nil {
			t.Fatalf("curl --cacert: %v\n%s", err, out)
		}
		if !regexp.MustCompile(`(?mi)^strict-transport-security: max-age=\d+`).Match(out) || !strings.Contains(string(out), `"path":"secure/`) {
			t.Fatalf("curl --cacert: no HSTS header or not the committed file in the answer:\n%s", out)
		}
		out, err = exec.CommandContext(ctx, curl, "-sS", p.URL+"/healthz").CombinedOutput()
		if err == nil {
			t.Fatalf("curl without the CA succeeded:\n%s", out)
		}
	})

	t.Run("plain HTTP refused", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr+"/v1/files?prefix=secure/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("plain HTTP: %v (want net/http's 400 answer)", err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS server") || strings.Contains(string(body), "secure") {
			t.Fatalf("plain HTTP: %d %q, want 400 'Client sent an HTTP request to an HTTPS server'", resp.StatusCode, body)
		}
	})

	t.Run("secure cookie", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: roots},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := hc.Get(p.URL + "/ui/login")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.Header.Get("Strict-Transport-Security") == "" {
			t.Errorf("UI page without HSTS: %v", resp.Header)
		}
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no csrf field in the login page:\n%s", page)
		}
		form := url.Values{"token": {token}, "next": {"/ui/"}, "csrf": {string(m[1])}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/ui/login", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", p.URL)
		resp, err = hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		var found bool
		for _, c := range resp.Cookies() {
			if c.Name == "eosink_token" {
				found = true
				if !c.Secure || !c.HttpOnly {
					t.Errorf("cookie over TLS: Secure %v HttpOnly %v (%s)", c.Secure, c.HttpOnly, resp.Header.Values("Set-Cookie"))
				}
			}
		}
		if !found {
			t.Fatalf("login: %s, no cookie set (%v)", resp.Status, resp.Header)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		if got := servedCert(t, p.Addr, roots); got != "first" {
			t.Fatalf("serving %q at start", got)
		}
		ca.Server(t, "second").Write(t, certPath, keyPath)
		p.signal(syscall.SIGHUP)
		waitServed(t, p, roots, "second", 10*time.Second)

		// Broken: a certificate that doesn't match the key. The last good
		// one stays, and the failure is logged.
		if err := os.WriteFile(certPath, ca.Server(t, "mismatched").CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		p.signal(syscall.SIGHUP)
		waitLog(t, p, "tls certificate reload failed", 10*time.Second)
		if got := servedCert(t, p.Addr, roots); got != "second" {
			t.Fatalf("after a failed reload serving %q, want %q", got, "second")
		}

		// No signal: the file watcher (every 5s) picks it up.
		start := time.Now()
		ca.Server(t, "third").Write(t, certPath, keyPath)
		waitServed(t, p, roots, "third", 20*time.Second)
		report(t, "file watcher reloaded the certificate after %s", time.Since(start).Round(100*time.Millisecond))
		if !p.Running() {
			t.Fatal("the service exited during the rotations")
		}
	})
	if code := p.Term(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

// signal sends sig to the running service.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("%s: signal %v: not running", p.cfg.Name, sig)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("kill -%d %d: %v", sig, cmd.Process.Pid, err)
	}
}

// servedCert opens a new TLS connection to addr and returns the common
// name of the certificate the server presents.
func servedCert(t testing.TB, addr string, roots *tls.Config) string {
	t.Helper()
	d := tls.Dialer{Config: roots.Clone()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("tls dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName
}

func waitServed(t testing.TB, p *proc, roots *tls.Config, want string, timeout time.Duration) {
	t.Helper()
	var got string
	eventually(t, timeout, 50*time.Millisecond, func() bool { got = servedCert(t, p.Addr, roots); return got == want }, func() string {
		return fmt.Sprintf("still serving %q after %s, want %q; log:\n%s", got, timeout, want, p.logTail(20))
	})
}

func waitLog(t testing.TB, p *proc, text string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, 20*time.Millisecond, func() bool {
		b, err := os.ReadFile(p.LogPath)
		return err == nil && strings.Contains(string(b), text)
	}, func() string { return fmt.Sprintf("%q not logged after %s; log:\n%s", text, timeout, p.logTail(20)) })
}

// TestS3OverTLS runs MinIO with a certificate of the test's private CA and
// the binary with --s3-ca-file: a write and a checkpoint land the object,
// verify passes through the same CA, and without --s3-ca-file the service
// refuses to start, naming the flag (an untrusted certificate is a
// configuration error, not an outage to wait out).
func TestS3OverTLS(t *testing.T) {
	dir := workDir(t)
	ca := testcert.NewCA(t, "minio e2e CA")
	certs := filepath.Join(dir, "minio-certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca.Server(t, "minio").Write(t, filepath.Join(certs, "public.crt"), filepath.Join(certs, "private.key"))
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caFile)
	srv := testsrv.StartMinIOWith(t, testsrv.Options{CertsDir: certs, RootCAs: ca.Pool()})
	ctx := t.Context()
	env := s3Env(srv.AccessKey, srv.SecretKey)
	dest := "s3://" + srv.Bucket + "/tls"

	t.Run("untrusted", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, eosinkBin, "serve", "--listen", freeAddr(t), "--data-dir", filepath.Join(dir, "untrusted-data"),
			"--dest", dest, "--s3-endpoint", srv.Endpoint, "--node", "tls")
		cmd.Env = childEnv(env)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--s3-ca-file") || !strings.Contains(string(out), "certificate") {
			t.Fatalf("serve against an untrusted certificate: %v, want a refusal naming --s3-ca-file:\n%s", err, out)
		}
	})

	p := newProc(t, dir, procConfig{
		Args: []string{"--dest", dest, "--s3-endpoint", srv.Endpoint, "--s3-ca-file", caFile, "--s3-region", "us-east-1",
			"--node", "tls", "--checkpoint-interval", "0"},
		Env: env,
	})
	p.StartReady()
	body := []byte("{\"over\":\"tls\"}\n{\"n\":2}\n")
	postNDJSON(t, p, "secure", body)
	cp, err := p.Checkpoint(ctx)
	if err != nil || cp.State != "committed" || len(cp.Files) != 1 {
		t.Fatalf("checkpoint: %+v %v", cp, err)
	}
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, srv.Bucket, "tls/"+cp.Files[0].Path, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	_ = obj.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("object tls/%s: %q %v, want %q", cp.Files[0].Path, got, err, body)
	}
	b, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(b), `"msg":"s3 credentials","source":"environment"`) {
		t.Errorf("the log does not name the credential source:\n%s", p.logTail(20))
	}
	if strings.Contains(string(b), srv.SecretKey) {
		t.Errorf("the secret key is in the log")
	}
	if code := p.Term(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	requireVerify(t, env, "--dest", dest, "--s3-endpoint", srv.Endpoint, "--s3-ca-file", caFile)
}
