package tests

import (
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
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
