package client_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/testing/testcert"
)

// TestTLSConfig: a service behind HTTPS with a private CA is reached with
// WithTLSConfig's RootCAs and refused without them.
func TestTLSConfig(t *testing.T) {
	r := newRig(t, 20*time.Millisecond).start()
	ca := testcert.NewCA(t, "client test CA")
	ts := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "eosink").TLSCertificate(t)}}
	ts.StartTLS()
	t.Cleanup(ts.Close)

	tcs := []struct {
		name    string
		opts    []client.Option
		wantErr string // "" means the batch is committed
	}{
		{"private CA trusted", []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()})}, ""},
		{"system roots only", nil, "certificate signed by unknown authority"},
		{"another CA", []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: testcert.NewCA(t, "other").Pool()})}, "certificate signed by unknown authority"},
	}
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]client.Option{client.WithProducer("tls-" + strings.ReplaceAll(tc.name, " ", "-")),
				client.WithRetry(client.Retry{Min: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 2})}, tc.opts...)
			c, err := client.New(ts.URL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Init(ctx(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("init over TLS: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("init over TLS: %v", err)
			}
			recs, keys := records("tls", 3)
			if _, err := c.SendWait(ctx(t), "secure", recs); err != nil {
				t.Fatalf("send over TLS: %v", err)
			}
			r.expectOnce("secure", keys)
		})
	}
	if _, err := client.New(ts.URL, client.WithHTTPClient(&http.Client{}), client.WithTLSConfig(&tls.Config{})); err == nil {
		t.Fatal("WithHTTPClient and WithTLSConfig together: accepted")
	}
}
