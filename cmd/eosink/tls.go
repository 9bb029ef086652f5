package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// certPollInterval is how often the certificate files are checked for a
// change (a rotation by a tool that sends no SIGHUP, e.g. a Kubernetes
// secret volume or certbot without a deploy hook).
const certPollInterval = 5 * time.Second

// hstsValue is sent on every answer over TLS: browsers then refuse plain
// HTTP to this host for a year. No includeSubDomains: eosink does not own
// its host's subdomains.
const hstsValue = "max-age=31536000"

type tlsFlags struct {
	certFile string
	keyFile  string
}

func addTLSFlags(fs *flag.FlagSet, f *tlsFlags) {
	fs.StringVar(&f.certFile, "tls-cert", "", "serve HTTPS with this PEM certificate (chain); reloaded on SIGHUP or when the file changes")
	fs.StringVar(&f.keyFile, "tls-key", "", "the PEM private key of --tls-cert")
}

// serviceTLS is the service's TLS: off (config nil) or a certificate
// reloaded on SIGHUP and on file change. SIGHUP is taken either way, so
// that a reload signal never ends the process.
type serviceTLS struct {
	config   *tls.Config // nil: plain HTTP
	reloader *certReloader
	stop     context.CancelFunc
	done     chan struct{}
}

// startTLS loads the certificate (an error if it can't) and starts its
// reloader, which runs until Close. Without TLS on a non-loopback address
// it logs a warning: tokens would cross the network in clear text.
func startTLS(ctx context.Context, f tlsFlags, listen string, log *slog.Logger) (*serviceTLS, error) {
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together: give both or neither", errUsage)
	}
	st := &serviceTLS{done: make(chan struct{})}
	if f.certFile != "" {
		r, err := newCertReloader(f.certFile, f.keyFile, log)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		st.reloader = r
		st.config = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	} else if !isLoopback(listen) {
		log.Warn("!!! TLS IS OFF on a non-loopback address: tokens and records cross the network in clear text; give --tls-cert and --tls-key, or put a TLS proxy in front", "listen", listen)
	}
	ctx, st.stop = context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(st.done)
		defer signal.Stop(hup)
		if st.reloader == nil {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					log.Info("SIGHUP: nothing to reload (TLS is off)")
				}
			}
		}
		st.reloader.run(ctx, hup, certPollInterval)
	}()
	return st, nil
}

// Close stops the reloader and the SIGHUP handling.
func (s *serviceTLS) Close() {
	s.stop()
	<-s.done
}

// scheme is the URL scheme the service answers on.
func (s *serviceTLS) scheme() string {
	if s.config == nil {
		return "http"
	}
	return "https"
}

// handler adds Strict-Transport-Security to answers over TLS.
func (s *serviceTLS) handler(h http.Handler) http.Handler {
	if s.config == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		h.ServeHTTP(w, r)
	})
}

// serve runs hs on ln, over TLS when on. A plain HTTP request to the TLS
// port gets net/http's 400 "Client sent an HTTP request to an HTTPS
// server" and never reaches a handler.
func (s *serviceTLS) serve(hs *http.Server, ln net.Listener) error {
	if s.config == nil {
		return hs.Serve(ln)
	}
	hs.TLSConfig = s.config
	return hs.ServeTLS(ln, "", "")
}

// certReloader holds the current certificate. A reload that fails keeps
// the last good one, so a half-done rotation never takes the service down.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu   sync.RWMutex
	cert *tls.Certificate
	seen [2]os.FileInfo // the files as of the last load attempt
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	r.seen = r.stat()
	if err := r.reload(); err != nil {
		return nil, err
	}
	leaf := r.current().Leaf
	log.Info("tls certificate loaded", "path", certFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate: the current certificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current(), nil
}

func (r *certReloader) current() *tls.Certificate {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cert
}

// reload reads both files; on success the new pair serves every new
// connection, on failure the old one stays.
func (r *certReloader) reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load tls certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return fmt.Errorf("parse tls certificate %s: %w", r.certFile, err)
		}
	}
	r.mu.Lock()
	r.cert = &c
	r.mu.Unlock()
	return nil
}

// run reloads on every signal from hup and whenever either file changes
// (another inode, size or modification time), until ctx ends.
func (r *certReloader) run(ctx context.Context, hup <-chan os.Signal, poll time.Duration) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		why := ""
		select {
		case <-ctx.Done():
			return
		case <-hup:
			why = "SIGHUP"
		case <-tick.C:
			now := r.stat()
			if sameStat(now, r.seen) {
				continue
			}
			// Remember what was tried: a failed load is not retried until
			// a file changes again (the rest of the rotation lands).
			r.seen, why = now, "file changed"
		}
		old := r.current().Leaf
		if err := r.reload(); err != nil {
			r.log.Error("tls certificate reload failed; still serving the previous certificate", "reason", why, "err", err,
				"serving_subject", old.Subject.String(), "serving_not_after", old.NotAfter.UTC().Format(time.RFC3339))
			continue
		}
		leaf := r.current().Leaf
		r.log.Info("tls certificate reloaded", "reason", why, "path", r.certFile, "subject", leaf.Subject.String(),
			"serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

func (r *certReloader) stat() [2]os.FileInfo {
	var out [2]os.FileInfo
	for i, p := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(p); err == nil {
			out[i] = fi
		}
	}
	return out
}

func sameStat(a, b [2]os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size():
			return false
		}
	}
	return true
}
