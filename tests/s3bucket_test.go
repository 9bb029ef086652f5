package tests

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/minio/minio-go/v7"
)

// s3Bucket is a fresh bucket on a MinIO server with a client for it and the
// prefix a test's service writes under: the destination most S3 tests set up.
type s3Bucket struct {
	srv    *testsrv.MinIO
	c      *minio.Client
	bucket string
	prefix string
}

// newS3Bucket creates a fresh bucket on srv and a client for it, or fails
// the test.
func newS3Bucket(t testing.TB, srv *testsrv.MinIO, prefix string) s3Bucket {
	t.Helper()
	bucket, err := srv.NewBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	return s3Bucket{srv: srv, c: c, bucket: bucket, prefix: prefix}
}

// url is the service's --dest value.
func (b s3Bucket) url() string { return "s3://" + b.bucket + "/" + b.prefix }

// dest reads the committed files back for the invariant check.
func (b s3Bucket) dest() invariant.S3Dest {
	return invariant.S3Dest{Client: b.c, Bucket: b.bucket, Prefix: b.prefix}
}

// s3Flags are the service's flags to reach the server directly.
func (b s3Bucket) s3Flags() []string {
	return []string{"--s3-endpoint", b.srv.Endpoint, "--s3-insecure"}
}

// destFlags are --dest and s3Flags.
func (b s3Bucket) destFlags() []string { return append([]string{"--dest", b.url()}, b.s3Flags()...) }

// env is the service's environment with the server's credentials.
func (b s3Bucket) env() []string { return s3Env(b.srv.AccessKey, b.srv.SecretKey) }

// s3Proxy sits between eosink and MinIO on a loopback port and forwards
// every request unchanged (the Host header too, which SigV4 signs). A test
// arms it to run a function, such as stopping MinIO, when a request of a
// kind arrives, before forwarding it: that places an outage exactly at one
// step of a checkpoint, which timing from outside cannot.
type s3Proxy struct {
	Addr string

	mu      sync.Mutex
	match   func(r *http.Request) bool
	action  func()
	handle  func(w http.ResponseWriter, r *http.Request, forward http.Handler)
	hits    int
	hitAt   time.Time
	hitDesc string
	cut     bool // every request's connection is dropped, as in an outage
}

func startS3Proxy(t testing.TB, target string) *s3Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &s3Proxy{Addr: ln.Addr().String()}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: target})
			pr.Out.Host = pr.In.Host // signed by the client
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		if p.cut && (p.match == nil || !p.match(r)) {
			p.mu.Unlock()
			drop(w)
			return
		}
		var act func()
		var handle func(w http.ResponseWriter, r *http.Request, forward http.Handler)
		if p.match != nil && p.match(r) {
			act, handle, p.match = p.action, p.handle, nil
			p.hits++
			p.hitAt = time.Now()
			p.hitDesc = r.Method + " " + r.URL.String()
		}
		p.mu.Unlock()
		if act != nil {
			act()
		}
		if handle != nil {
			handle(w, r, rp)
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// Arm runs action once, on the first request that match accepts, before
// forwarding it.
func (p *s3Proxy) Arm(match func(r *http.Request) bool, action func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.action, p.handle = match, action, nil
}

// ArmHandler hands the first request that match accepts to h, which may
// forward it (or not) as it likes.
func (p *s3Proxy) ArmHandler(match func(r *http.Request) bool, h func(w http.ResponseWriter, r *http.Request, forward http.Handler)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.action, p.handle = match, nil, h
}

// Cut drops every request's connection from now on (an S3 outage that
// MinIO itself does not see: its memory of uploads survives), or, with
// false, forwards again. An armed request is still handled as armed.
func (p *s3Proxy) Cut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
}

// drop closes the request's connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

// Hit returns whether the armed request came, and which it was.
func (p *s3Proxy) Hit() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits > 0, p.hitDesc
}

// isComplete matches CompleteMultipartUpload (POST ?uploadId=).
func isComplete(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
}

// isCommitRequest matches the first request of an S3 commit:
// CompleteMultipartUpload (POST ?uploadId=) in multipart mode, the
// server-side UploadPartCopy (PUT with x-amz-copy-source) in copy mode.
func isCommitRequest(r *http.Request) bool {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return true
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		return true
	}
	return false
}
