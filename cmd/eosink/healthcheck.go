package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// healthcheck asks the service's /healthz and exits 0 on 200, 1 otherwise:
// a container HEALTHCHECK for an image without curl. The default URL is
// made from the same environment the service reads (EOSINK_LISTEN,
// EOSINK_TLS_CERT), so it needs no flags in the image.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("healthcheck", "Usage: eosink healthcheck [flags]\n\nExits 0 if the URL answers 200, else 1.", stderr)
	var target, caFile string
	var timeout time.Duration
	fs.StringVar(&target, "url", defaultHealthURL(os.Getenv("EOSINK_LISTEN"), os.Getenv("EOSINK_TLS_CERT") != ""),
		"URL to GET (default from EOSINK_LISTEN and EOSINK_TLS_CERT)")
	fs.StringVar(&caFile, "ca-file", "", "PEM CAs to verify an https URL with; without it a loopback https URL is not verified (it is our own process)")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long (above 0)")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if timeout <= 0 {
		return fmt.Errorf("%w: --timeout %v: want a duration above 0 (it can't be off)", errUsage, timeout)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: --url %q: want http(s)://host:port/path", errUsage, target)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a health check never goes through a proxy
	switch {
	case caFile != "":
		pool, err := caPool(caFile)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	case u.Scheme == "https" && isLoopback(u.Host):
		// The certificate names the service's public host, not 127.0.0.1;
		// nothing secret is sent, and the peer is this machine.
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback liveness probe
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", target, err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "eosink healthcheck: %v\n", err)
		return exitError(1)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "eosink healthcheck: %s: %s %s\n", target, resp.Status, body)
		return exitError(1)
	}
	fmt.Fprintf(stdout, "eosink healthcheck: %s: %s\n", target, resp.Status)
	return nil
}

// defaultHealthURL is /healthz of the address the service listens on; a
// wildcard host (":8080", "0.0.0.0:8080", "[::]:8080") is asked on loopback.
func defaultHealthURL(listen string, tlsOn bool) string {
	if listen == "" {
		listen = defaultListen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		host, port, _ = net.SplitHostPort(defaultListen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/healthz"
}
