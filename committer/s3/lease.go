package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/eosink/eosink/committer"
	"github.com/minio/minio-go/v7"
)

var (
	_ committer.Leaser  = (*S3)(nil)
	_ committer.Remover = (*S3)(nil)
)

// ReadLease reads name; its version is the object's ETag.
func (s *S3) ReadLease(ctx context.Context, name string) ([]byte, string, error) {
	if !validName(name) {
		return nil, "", fmt.Errorf("read lease %q: bad name", name)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.Key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("read lease %s: %w", name, classify(err))
	}
	defer obj.Close()
	info, err := obj.Stat()
	if err != nil {
		if code(err) == minio.NoSuchKey {
			return nil, "", fmt.Errorf("read lease %s: %w", name, committer.ErrNotFound)
		}
		return nil, "", fmt.Errorf("read lease %s: %w", name, classify(err))
	}
	data, err := io.ReadAll(io.LimitReader(obj, 1<<20))
	if err != nil {
		return nil, "", fmt.Errorf("read lease %s: %w", name, classify(err))
	}
	return data, info.ETag, nil
}

// WriteLease is one PutObject with If-None-Match: * (create-only, version
// "") or If-Match: <ETag> (compare-and-swap); the server decides, so
// concurrent writers from any host are serialized. Before its first write
// it checks that the server honours both conditions (checkLeaseConditions);
// one that ignores either gets ErrUnsupported, every time: a lease the
// server does not enforce would only pretend to fence.
func (s *S3) WriteLease(ctx context.Context, name string, data []byte, version string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("write lease %q: bad name", name)
	}
	if err := s.leaseConditions(ctx); err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	etag, err := s.putIf(ctx, s.Key(name), data, version)
	switch {
	case err == nil:
		return etag, nil
	case code(err) == minio.PreconditionFailed && version == "":
		return "", fmt.Errorf("write lease %s: %w", name, committer.ErrExists)
	case code(err) == minio.PreconditionFailed || code(err) == minio.NoSuchKey:
		return "", fmt.Errorf("write lease %s: %w: %w", name, committer.ErrPrecondition, err)
	}
	return "", fmt.Errorf("write lease %s: %w", name, classify(err))
}

// putIf puts data at key create-only (version "") or if its ETag is
// version. The error is minio-go's, unwrapped.
func (s *S3) putIf(ctx context.Context, key string, data []byte, version string) (string, error) {
	opts := minio.PutObjectOptions{ContentType: "application/json"}
	if version == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(version)
	}
	info, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), "", "", opts)
	if err != nil {
		return "", err
	}
	return info.ETag, nil
}

func (s *S3) leaseConditions(ctx context.Context) error {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.leaseRan {
		return s.leaseOK
	}
	err := s.checkLeaseConditions(ctx)
	if err != nil && !errors.Is(err, committer.ErrUnsupported) {
		return err // could not tell (network): ask again next time
	}
	s.leaseRan, s.leaseOK = true, err
	return err
}

// checkLeaseConditions probes, on a scratch key under _nodes/, that the
// server refuses a create-only PutObject over an existing key and a
// PutObject whose If-Match names another ETag, and accepts one whose
// If-Match names the current ETag.
func (s *S3) checkLeaseConditions(ctx context.Context) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	key := s.Key("_nodes/.probe-" + s.node + "-" + hex.EncodeToString(rnd[:]))
	defer func() {
		_ = s.client.RemoveObject(context.WithoutCancel(ctx), s.bucket, key, minio.RemoveObjectOptions{})
	}()
	etag, err := s.putIf(ctx, key, []byte("1"), "")
	if err != nil {
		return fmt.Errorf("check conditional writes: %w", classify(err))
	}
	refused := func(err error) bool { return code(err) == minio.PreconditionFailed }
	if _, err := s.putIf(ctx, key, []byte("2"), ""); !refused(err) {
		if err != nil && !isAnswer(err) {
			return fmt.Errorf("check conditional writes: %w", classify(err))
		}
		return fmt.Errorf("%w: the server ignores If-None-Match: * on PutObject (%v); node leases need it", committer.ErrUnsupported, err)
	}
	if _, err := s.putIf(ctx, key, []byte("3"), "00000000000000000000000000000000"); !refused(err) {
		if err != nil && !isAnswer(err) {
			return fmt.Errorf("check conditional writes: %w", classify(err))
		}
		return fmt.Errorf("%w: the server ignores If-Match on PutObject (%v); node leases need it", committer.ErrUnsupported, err)
	}
	if _, err := s.putIf(ctx, key, []byte("4"), etag); err != nil {
		if !isAnswer(err) {
			return fmt.Errorf("check conditional writes: %w", classify(err))
		}
		return fmt.Errorf("%w: the server refuses If-Match with the current ETag on PutObject: %w", committer.ErrUnsupported, err)
	}
	return nil
}

// isAnswer reports whether err is a 4xx answer of the server (not a
// network failure or a 5xx, after which the probe proves nothing).
func isAnswer(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode >= 400 && r.StatusCode < 500 && r.StatusCode != http.StatusTooManyRequests
}
