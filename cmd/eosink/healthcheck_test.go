package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/testcert"
)

func TestDefaultHealthURL(t *testing.T) {
	for _, tc := range []struct {
		listen string
		tls    bool
		want   string
	}{
		{"", false, "http://127.0.0.1:8080/healthz"},
		{"0.0.0.0:8080", false, "http://127.0.0.1:8080/healthz"},
		{":9000", true, "https://127.0.0.1:9000/healthz"},
		{"[::]:8443", true, "https://[::1]:8443/healthz"},
		{"10.1.2.3:80", false, "http://10.1.2.3:80/healthz"},
	} {
		if got := defaultHealthURL(tc.listen, tc.tls); got != tc.want {
			t.Errorf("defaultHealthURL(%q, %v) = %q, want %q", tc.listen, tc.tls, got, tc.want)
		}
	}
}

// TestHealthcheck: exit 0 on 200, exit 1 on anything else or no answer; a
// loopback https URL passes without a CA, a --ca-file of another CA fails.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	})
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	ca := testcert.NewCA(t, "health CA")
	secure := httptest.NewUnstartedServer(h)
	secure.TLS = ca.Server(t, "health").TLSConfig(t)
	secure.StartTLS()
	t.Cleanup(secure.Close)
	other := writeFile(t, string(testcert.NewCA(t, "other CA").CertPEM))
	mine := writeFile(t, string(ca.CertPEM))

	for _, tc := range []struct {
		name   string
		status int
		args   []string
		ok     bool
	}{
		{"200", http.StatusOK, []string{"--url", plain.URL + "/healthz"}, true},
		{"503", http.StatusServiceUnavailable, []string{"--url", plain.URL + "/healthz"}, false},
		{"404", http.StatusOK, []string{"--url", plain.URL + "/nope"}, false},
		{"nothing listening", http.StatusOK, []string{"--url", "http://127.0.0.1:1/healthz", "--timeout", "1s"}, false},
		{"https on loopback", http.StatusOK, []string{"--url", secure.URL + "/healthz"}, true},
		{"https, its CA", http.StatusOK, []string{"--url", secure.URL + "/healthz", "--ca-file", mine}, true},
		{"https, another CA", http.StatusOK, []string{"--url", secure.URL + "/healthz", "--ca-file", other}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status = tc.status
			var out bytes.Buffer
			err := run(t.Context(), append([]string{"healthcheck"}, tc.args...), &out, &out)
			var ee exitError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("healthcheck: %v\n%s", err, out.String())
			case !tc.ok && (!errors.As(err, &ee) || ee != 1):
				t.Fatalf("healthcheck: %v, want exit status 1\n%s", err, out.String())
			}
		})
	}
	if err := run(t.Context(), []string{"healthcheck", "--url", "ftp://x"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("bad url: %v", err)
	}
}

func TestVersion(t *testing.T) {
	// A test binary carries no VCS data and no build-script revision.
	if v := version(); !strings.Contains(v, "(revision unknown)") || !strings.Contains(v, runtime.Version()) {
		t.Errorf("version without a revision: %q", v)
	}
}
