package s3_test

import (
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/s3"
	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

// TestLimits: a final name is bounded so that every key made of it fits
// S3's 1,024 bytes: with the prefix, and in Copy mode the staging key.
func TestLimits(t *testing.T) {
	client, err := minio.New("127.0.0.1:1", &minio.Options{}) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		prefix string
		mode   s3.Mode
		want   int
	}{
		{"", s3.Multipart, 1024},
		{"/a/b/", s3.Multipart, 1024 - len("a/b/")},
		{"a/b", s3.Copy, 1024 - len("a/b/_staging/eosink-0/")},
	} {
		c, err := s3.New(s3.Config{Client: client, Bucket: "b", Prefix: tt.prefix, Node: "eosink-0", Staging: afero.NewMemMapFs(), Mode: tt.mode})
		if err != nil {
			t.Fatal(err)
		}
		got := c.Limits()
		if got != (committer.Limits{MaxName: tt.want}) {
			t.Errorf("prefix %q, %v: %+v, want MaxName %d", tt.prefix, tt.mode, got, tt.want)
		}
		name := strings.Repeat("x", got.MaxName)
		if k := c.StagingKey(name); tt.mode == s3.Copy && len(k) != 1024 {
			t.Errorf("staging key of the longest name: %d bytes", len(k))
		}
		if k := c.Key(name); tt.mode == s3.Multipart && len(k) != 1024 {
			t.Errorf("key of the longest name: %d bytes", len(k))
		}
	}
}
