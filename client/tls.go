package client

import (
	"crypto/tls"
	"net/http"
)

// WithTLSConfig sets the TLS configuration of the default HTTP client, for
// a service with --tls-cert: RootCAs to trust a private CA, Certificates
// for a proxy that wants client certificates. It cannot be combined with
// WithHTTPClient (configure that client's transport instead); New refuses
// both.
func WithTLSConfig(tc *tls.Config) Option { return func(c *config) { c.tls = tc } }

// tlsHTTPClient returns an HTTP client like the default one whose
// transport uses tc.
func tlsHTTPClient(tc *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc.Clone()
	return &http.Client{Transport: tr}
}
