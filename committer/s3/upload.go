package s3

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkStaging reads the local staging file once and returns its CRC-32C
// (hex, as the staging package writes it). Its size must be f.Bytes and its
// checksum f.CRC32C when that is set: what goes up is what was recorded.
func (s *S3) checkStaging(f committer.File) (string, error) {
	file, err := s.fs.Open(f.Temp)
	if err != nil {
		return "", fmt.Errorf("open staging file: %w", err)
	}
	defer file.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, file)
	if err != nil {
		return "", fmt.Errorf("read staging file %s: %w", f.Temp, err)
	}
	crc := hex.EncodeToString(h.Sum(nil))
	if n != f.Bytes || (f.CRC32C != "" && !strings.EqualFold(crc, f.CRC32C)) {
		return "", fmt.Errorf("%w: %s holds %d bytes with crc32c %s, expected %d bytes with %s",
			ErrBadStaging, f.Temp, n, crc, f.Bytes, f.CRC32C)
	}
	return crc, nil
}

// partSizeFor returns the part size for a file of size bytes: the
// configured one, grown when the file would need more than 10000 parts.
func (s *S3) partSizeFor(size int64) int64 {
	ps := s.partSize
	if need := (size + maxParts - 1) / maxParts; need > ps {
		ps = need
	}
	return ps
}

// uploadParts uploads f.Temp as the parts of upload id on key, up to
// s.parallel at once. Every part but the last is partSizeFor bytes; an empty
// file is one empty part. Each part reads its own file handle through a
// SectionReader, so minio-go can seek back and retry it.
func (s *S3) uploadParts(ctx context.Context, key, id string, f committer.File) ([]committer.Part, error) {
	ps := s.partSizeFor(f.Bytes)
	n := int((f.Bytes + ps - 1) / ps)
	if n == 0 {
		n = 1
	}
	return eachPart(ctx, s.parallel, n, ps, f.Bytes, func(ctx context.Context, num int, off, size int64) (committer.Part, error) {
		return s.uploadPart(ctx, key, id, num, f.Temp, off, size)
	})
}

// eachPart runs do for the n parts of an object of total bytes cut at
// every partSize bytes (numbered from 1; the last takes the rest), up to
// parallel at once, and returns their results in part order. The first
// error cancels the others' ctx and is returned.
func eachPart[T any](ctx context.Context, parallel, n int, partSize, total int64, do func(ctx context.Context, num int, off, size int64) (T, error)) ([]T, error) {
	parts := make([]T, n)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range n {
		off := int64(i) * partSize
		size := min(partSize, total-off)
		g.Go(func() error {
			p, err := do(ctx, i+1, off, size)
			parts[i] = p
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

func (s *S3) uploadPart(ctx context.Context, key, id string, num int, name string, off, size int64) (committer.Part, error) {
	file, err := s.fs.Open(name)
	if err != nil {
		return committer.Part{}, fmt.Errorf("open staging file: %w", err)
	}
	defer file.Close()
	r := io.NewSectionReader(file, off, size)
	p, err := s.core.PutObjectPart(ctx, s.bucket, key, id, num, r, size, minio.PutObjectPartOptions{})
	if err != nil {
		return committer.Part{}, fmt.Errorf("upload part %d: %w", num, classify(err))
	}
	return committer.Part{Number: num, ETag: p.ETag, Size: size}, nil
}

// putStaging uploads f.Temp to f.StagingKey and returns the object's ETag:
// one PUT up to a part's size, a completed multipart upload beyond. The
// staging key is this node's own, so the write is not conditional.
func (s *S3) putStaging(ctx context.Context, f committer.File) (string, error) {
	opts := s.putOptions(f.Final, f.CRC32C)
	if f.Bytes <= s.partSizeFor(f.Bytes) {
		file, err := s.fs.Open(f.Temp)
		if err != nil {
			return "", fmt.Errorf("open staging file: %w", err)
		}
		defer file.Close()
		info, err := s.core.PutObject(ctx, s.bucket, f.StagingKey, io.NewSectionReader(file, 0, f.Bytes), f.Bytes, "", "", opts)
		if err != nil {
			return "", fmt.Errorf("put staging object: %w", classify(err))
		}
		return info.ETag, nil
	}
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, f.StagingKey, opts)
	if err != nil {
		return "", fmt.Errorf("start staging upload: %w", classify(err))
	}
	parts, err := s.uploadParts(ctx, f.StagingKey, id, f)
	if err == nil {
		var info minio.UploadInfo
		info, err = s.core.CompleteMultipartUpload(ctx, s.bucket, f.StagingKey, id, completeParts(parts), minio.PutObjectOptions{})
		if err == nil {
			return info.ETag, nil
		}
		err = fmt.Errorf("complete staging upload: %w", classify(err))
	}
	// The caller's cleanup aborts every upload on the staging key.
	return "", err
}

// copyParts copies the staging object into upload f.UploadID on key, in
// ranges of at most 5 GiB, up to s.parallel at once. Each copy requires the
// staging object to still have the ETag Prepare saw. Errors are raw
// minio-go errors, for the caller to classify.
func (s *S3) copyParts(ctx context.Context, key string, f committer.File) ([]minio.CompletePart, error) {
	n := int((f.Bytes + maxCopyPart - 1) / maxCopyPart)
	if n <= 1 {
		// One part, no range: works for an empty object too.
		p, err := s.core.CopyObjectPart(ctx, s.bucket, f.StagingKey, s.bucket, key, f.UploadID, 1, 0, -1, s.copySourceIf(f))
		if err != nil {
			return nil, err
		}
		return []minio.CompletePart{p}, nil
	}
	return eachPart(ctx, s.parallel, n, maxCopyPart, f.Bytes, func(ctx context.Context, num int, off, size int64) (minio.CompletePart, error) {
		return s.core.CopyObjectPart(ctx, s.bucket, f.StagingKey, s.bucket, key, f.UploadID, num, off, size, s.copySourceIf(f))
	})
}

func (s *S3) copySourceIf(f committer.File) map[string]string {
	if f.ETag == "" {
		return nil
	}
	return map[string]string{"x-amz-copy-source-if-match": `"` + f.ETag + `"`}
}

func completeParts(parts []committer.Part) []minio.CompletePart {
	out := make([]minio.CompletePart, 0, len(parts))
	for _, p := range parts {
		out = append(out, minio.CompletePart{PartNumber: p.Number, ETag: p.ETag})
	}
	return out
}
