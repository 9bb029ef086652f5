package testsrv

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/internal/testing/testcert"
	"github.com/minio/minio-go/v7"
)

func TestStopRestartKeepsData(t *testing.T) {
	srv := StartMinIO(t)
	ctx := t.Context()
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("survives a restart\n")
	if _, err := c.PutObject(ctx, srv.Bucket, "a/b.txt", bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := c.StatObject(ctx, srv.Bucket, "a/b.txt", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat succeeded against a stopped server")
	}

	endpoint := srv.Endpoint
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if srv.Endpoint != endpoint {
		t.Fatalf("endpoint changed on restart: %s -> %s", endpoint, srv.Endpoint)
	}
	obj, err := c.GetObject(ctx, srv.Bucket, "a/b.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read after restart: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after restart: got %q, want %q", got, want)
	}

	srv.Kill()
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart after kill: %v", err)
	}
	if _, err := c.StatObject(ctx, srv.Bucket, "a/b.txt", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("stat after kill and restart: %v", err)
	}
}

func TestNewBucketIsUnique(t *testing.T) {
	srv := StartMinIO(t)
	b, err := srv.NewBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if b == srv.Bucket {
		t.Fatalf("NewBucket returned the start bucket %s", b)
	}
}

func TestBinaryOverride(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "minio")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, notExec)
	if _, err := Binary(); err == nil {
		t.Fatalf("Binary accepted a non-executable %s", notExec)
	}
	exe := filepath.Join(dir, "minio-exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, exe)
	got, err := Binary()
	if err != nil || got != exe {
		t.Fatalf("Binary() = %q, %v; want %q", got, err, exe)
	}
}

// TestTLS: with a certs dir the server speaks HTTPS, the client of Options
// trusts the test's CA, and plain HTTP gets no S3 answer.
func TestTLS(t *testing.T) {
	ca := testcert.NewCA(t, "minio test CA")
	certs := t.TempDir()
	ca.Server(t, "minio").Write(t, filepath.Join(certs, "public.crt"), filepath.Join(certs, "private.key"))
	srv := StartMinIOWith(t, Options{CertsDir: certs, RootCAs: ca.Pool()})
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if c.EndpointURL().Scheme != "https" {
		t.Fatalf("client endpoint %s, want https", c.EndpointURL())
	}
	want := []byte("over tls\n")
	if _, err := c.PutObject(t.Context(), srv.Bucket, "tls.txt", bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put over tls: %v", err)
	}
	plainOpts := srv.Options()
	plainOpts.Secure, plainOpts.Transport = false, nil
	plain, err := minio.New(srv.Endpoint, plainOpts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.StatObject(t.Context(), srv.Bucket, "tls.txt", minio.StatObjectOptions{}); err == nil {
		t.Fatal("plain HTTP to the TLS server answered")
	}
}
