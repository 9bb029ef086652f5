package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Tokens of startServe's token file.
const (
	testReadToken  = "read-token-0123456789"
	testAdminToken = "admin-token-0123456789"
)

// startServe runs eosink serve in the test process on a loopback port with
// a token file, the given flags after the test's own, and returns its base
// URL; it stops when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	base, _ := startProcessT(t, args...)
	return base
}

// startProcessT is startServe that returns the process too.
func startProcessT(t *testing.T, args ...string) (string, *process) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("read "+testReadToken+"\nadmin "+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	args = append([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--token-file", tokens,
		"--checkpoint-interval", "0", "--node", "n1"}, args...)
	if err := envFlags(fs, args); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := startProcess(ctx, &f, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case <-p.eng.Load().Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready")
	}
	return "http://" + p.addr, p
}

// noRedirects returns a client that answers a redirect as it is, without
// following it.
func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// statusOf sends req through c and returns the answer's status.
func statusOf(t *testing.T, c *http.Client, req *http.Request) int {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

// TestHeaderLimits: request headers are bounded in size (431 beyond) and
// in time; net/http's default let each connection hold 1 MiB of them.
func TestHeaderLimits(t *testing.T) {
	base, p := startProcessT(t)
	if p.hs.ReadHeaderTimeout <= 0 || p.hs.ReadHeaderTimeout > readHeaderTimeout {
		t.Fatalf("ReadHeaderTimeout %v", p.hs.ReadHeaderTimeout)
	}
	do := func(n int) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/v1/streams", nil)
		req.Header.Set("Authorization", "Bearer "+testReadToken)
		req.Header.Set("X-Pad", strings.Repeat("p", n))
		return statusOf(t, http.DefaultClient, req)
	}
	if code := do(1000); code != http.StatusOK {
		t.Fatalf("1 KB of headers: %d, want 200", code)
	}
	if code := do(maxHeaderBytes + 8<<10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d bytes of headers: %d, want 431", maxHeaderBytes+8<<10, code)
	}
}

// TestTrustedProxiesFlag: with --trusted-proxies (here from
// EOSINK_TRUSTED_PROXIES) naming the loopback proxy, invalid tokens are
// counted per forwarded client, through the API and the UI's login form
// alike: one guesser behind the proxy is answered 429 and other clients of
// the proxy are not; a valid token is served to the guesser too.
func TestTrustedProxiesFlag(t *testing.T) {
	t.Setenv("EOSINK_TRUSTED_PROXIES", "127.0.0.0/8,::1")
	base := startServe(t)
	get := func(client, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/v1/streams", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", client)
		return statusOf(t, http.DefaultClient, req)
	}
	for i := range 20 {
		if code := get("203.0.113.5", fmt.Sprintf("guess-%016d", i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, code)
		}
	}
	expectStatuses(t, get, []statusCase{
		{"guess over the limit", "203.0.113.5", "guess-one-too-many-000", http.StatusTooManyRequests},
		{"the guesser's valid token", "203.0.113.5", testReadToken, http.StatusOK},
		{"another client's invalid token", "198.51.100.6", "typo-token-0000000000", http.StatusUnauthorized},
	})

	// The login form counts against the same limit.
	page, err := http.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	_ = page.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(html)
	if m == nil {
		t.Fatalf("no csrf field in the login page")
	}
	login := func(client, token string) int {
		t.Helper()
		form := url.Values{"csrf": {string(m[1])}, "token": {token}, "next": {"/ui/"}}
		req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", client)
		return statusOf(t, noRedirects(), req)
	}
	expectStatuses(t, login, []statusCase{
		{"the guesser at the login form", "203.0.113.5", "form-guess-0000000000", http.StatusTooManyRequests},
		{"the guesser's valid login", "203.0.113.5", testAdminToken, http.StatusSeeOther},
		{"another client at the login form", "198.51.100.6", "form-typo-00000000000", http.StatusUnauthorized},
	})
}

// statusCase is a request from client with token, and the status it must get.
type statusCase struct {
	what, client, token string
	want                int
}

// expectStatuses sends each case through do, in order, and fails the test
// at the first wrong status.
func expectStatuses(t *testing.T, do func(client, token string) int, cases []statusCase) {
	t.Helper()
	for _, c := range cases {
		if code := do(c.client, c.token); code != c.want {
			t.Fatalf("%s: %d, want %d", c.what, code, c.want)
		}
	}
}

func TestProxyListFlag(t *testing.T) {
	var p proxyList
	if err := p.Set("10.0.0.0/8, 192.168.0.1"); err != nil || p.String() != "10.0.0.0/8,192.168.0.1/32" {
		t.Fatalf("%v %v", p.String(), err)
	}
	if err := p.Set("10.0.0.0/40"); err == nil || !strings.Contains(err.Error(), "10.0.0.0/40") {
		t.Fatalf("bad prefix: %v", err)
	}
}
