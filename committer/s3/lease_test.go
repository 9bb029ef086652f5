package s3_test

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/spf13/afero"
)

// ignoringS3 is an S3 server that stores objects and ignores If-Match
// and, when ignoreNoneMatch, If-None-Match: conditions some S3-compatible
// servers don't implement.
func ignoringS3(t *testing.T, ignoreNoneMatch bool) *s3.S3 {
	t.Helper()
	var mu sync.Mutex
	objs := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			if !ignoreNoneMatch && r.Header.Get("If-None-Match") == "*" {
				if _, ok := objs[r.URL.Path]; ok {
					w.WriteHeader(http.StatusPreconditionFailed)
					_, _ = io.WriteString(w, `<Error><Code>PreconditionFailed</Code><Message>taken</Message></Error>`)
					return
				}
			}
			data, _ := io.ReadAll(r.Body)
			objs[r.URL.Path] = data
			sum := md5.Sum(data)
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		case http.MethodDelete:
			delete(objs, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	t.Cleanup(srv.Close)
	client, err := minio.New(strings.TrimPrefix(srv.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4("key", "secret", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s3.New(s3.Config{Client: client, Bucket: "bucket", Node: "n1", Staging: afero.NewMemMapFs(), Mode: s3.Multipart})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A server that ignores a condition the lease needs gets ErrUnsupported,
// and the lease is not written: the node refuses to run rather than hold a
// lease that fences nothing.
func TestLeaseRefusesServerIgnoringConditions(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ignoreNoneMatch bool
		want            string
	}{
		{"ignores If-Match", false, "If-Match"},
		{"ignores If-None-Match", true, "If-None-Match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ignoringS3(t, tc.ignoreNoneMatch)
			for range 2 { // the verdict is kept
				_, err := c.WriteLease(t.Context(), "_nodes/n1.json", []byte(`{}`), "")
				if !errors.Is(err, committer.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("lease on a server that %s: %v, want ErrUnsupported naming %s", tc.name, err, tc.want)
				}
			}
		})
	}
}
