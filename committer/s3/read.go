package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/minio/minio-go/v7"
)

// Publish writes data to name with one conditional PUT (If-None-Match: *):
// readers see all of it or nothing, and an existing name is never replaced.
// It returns committer.ErrExists when name is taken, also when an earlier
// try of the same Publish created it and its answer was lost.
func (s *S3) Publish(ctx context.Context, name string, data []byte) error {
	if !validName(name) {
		return fmt.Errorf("publish %q: invalid name", name)
	}
	c := crc32.Checksum(data, castagnoli)
	crc := fmt.Sprintf("%08x", c)
	sum := md5.Sum(data)
	opts := s.putOptions(name, crc)
	opts.SetMatchETagExcept("*")
	_, err := s.core.PutObject(ctx, s.bucket, s.Key(name), bytes.NewReader(data), int64(len(data)),
		base64.StdEncoding.EncodeToString(sum[:]), "", opts)
	if err != nil {
		if code(err) == minio.PreconditionFailed {
			return fmt.Errorf("publish %s: %w", name, committer.ErrExists)
		}
		return fmt.Errorf("publish %s: %w", name, classify(err))
	}
	return nil
}

// Remove deletes the document name under _forgotten/; a missing key is
// done (committer.Remover).
func (s *S3) Remove(ctx context.Context, name string) error {
	if !validName(name) || !strings.HasPrefix(name, layout.ForgottenDir+"/") {
		return fmt.Errorf("remove %q: not a document under %s/: %w", name, layout.ForgottenDir, committer.ErrConflict)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, s.Key(name), minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
		return fmt.Errorf("remove %s: %w", name, classify(err))
	}
	return nil
}

// List returns the objects whose destination-relative path starts with
// prefix, sorted, without staging objects.
func (s *S3) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	prefix = strings.TrimPrefix(prefix, "/")
	root := ""
	if s.prefix != "" {
		root = s.prefix + "/"
	}
	ctx, cancel := context.WithCancel(ctx) // stops the lister on an early return
	defer cancel()
	var out []committer.Entry
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: root + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, classify(obj.Err))
		}
		rel, ok := strings.CutPrefix(obj.Key, root)
		if !ok || !validName(rel) {
			continue // staging objects, folder markers, odd keys
		}
		out = append(out, committer.Entry{Path: rel, Bytes: obj.Size, Modified: obj.LastModified.UTC()})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// ListPage lists one page with ListObjectsV2's StartAfter: up to limit
// objects under prefix whose destination-relative path sorts after after.
// Staging objects are skipped, so a page may cost more keys than it holds.
func (s *S3) ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	prefix = strings.TrimPrefix(prefix, "/")
	if limit <= 0 {
		return nil, nil
	}
	root := ""
	if s.prefix != "" {
		root = s.prefix + "/"
	}
	opts := minio.ListObjectsOptions{Prefix: root + prefix, Recursive: true, MaxKeys: min(limit+1, 1000)}
	if after != "" {
		opts.StartAfter = root + after
	}
	ctx, cancel := context.WithCancel(ctx) // stops the lister once the page is full
	defer cancel()
	var out []committer.Entry
	for obj := range s.client.ListObjects(ctx, s.bucket, opts) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list page %s after %s: %w", prefix, after, classify(obj.Err))
		}
		rel, ok := strings.CutPrefix(obj.Key, root)
		if !ok || !validName(rel) || rel <= after {
			continue // staging objects, folder markers, odd keys
		}
		out = append(out, committer.Entry{Path: rel, Bytes: obj.Size, Modified: obj.LastModified.UTC()})
		if len(out) >= limit {
			return out, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list page %s after %s: %w", prefix, after, err)
	}
	return out, nil
}

// Open opens a committed object for reading. The reader seeks with ranged
// GETs and lives as long as ctx. A missing object returns
// committer.ErrNotFound.
func (s *S3) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	if !validName(name) {
		return nil, committer.Entry{}, fmt.Errorf("open %q: %w", name, committer.ErrNotFound)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.Key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, classify(err))
	}
	info, err := obj.Stat()
	if err != nil {
		_ = obj.Close() // nothing was read
		if code(err) == minio.NoSuchKey {
			return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, committer.ErrNotFound)
		}
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, classify(err))
	}
	return obj, committer.Entry{Path: name, Bytes: info.Size, Modified: info.LastModified.UTC()}, nil
}
