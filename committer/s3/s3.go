package s3

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

var (
	_ committer.Committer      = (*S3)(nil)
	_ committer.RemotePreparer = (*S3)(nil)
	_ committer.Publisher      = (*S3)(nil)
	_ committer.Reader         = (*S3)(nil)
	_ committer.Pager          = (*S3)(nil)
	_ committer.Limiter        = (*S3)(nil)
	_ committer.Mover          = (*S3)(nil)
)

// Errors of this package. They wrap with the committer sentinels where
// one applies.
var (
	// ErrBadStaging means the local staging file's size or CRC-32C is not
	// what the File records.
	ErrBadStaging = errors.New("staging file does not match its record")
	// errGone means the prepared upload or staging object is gone and the
	// final key is empty: only the local staging file can still help.
	errGone = errors.New("prepared upload gone")
)

// Mode chooses how Prepare stages a file.
type Mode int

const (
	// Multipart uploads the file as parts of a multipart upload on the
	// final key; Commit completes it.
	Multipart Mode = iota
	// Copy puts the file at a staging key; Commit copies it server-side.
	Copy
)

func (m Mode) String() string {
	switch m {
	case Multipart:
		return "multipart"
	case Copy:
		return "copy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Sizes and defaults.
const (
	MinPartSize     = 5 << 20  // S3's smallest part but the last
	DefaultPartSize = 16 << 20 // part size when Config.PartSize is 0
	DefaultParallel = 4        // concurrent part uploads per file
	maxParts        = 10000    // S3's largest part number
	maxCopyPart     = 5 << 30  // S3's largest UploadPartCopy range
	metaCRC         = "crc32c" // user metadata key: x-amz-meta-crc32c
	stagingDir      = layout.StagingDir
	cleanupTimeout  = 30 * time.Second
)

// Config configures an S3 committer.
type Config struct {
	Client *minio.Client // required
	Bucket string        // required
	// Prefix is prepended to every key with a slash; empty means the bucket
	// root.
	Prefix string
	// Node is this process's node id; it names Copy mode's staging keys.
	Node string
	// Staging is the local filesystem holding the staging files (File.Temp).
	Staging afero.Fs
	Mode    Mode
	// PartSize is the multipart part size: 0 means DefaultPartSize, and it
	// must be at least MinPartSize. It grows for files that would need more
	// than 10000 parts.
	PartSize int64
	// Parallel bounds concurrent part uploads of one file; 0 means
	// DefaultParallel.
	Parallel int
	// Logger receives warnings about fallbacks and failed best-effort
	// cleanups; nil discards them.
	Logger *slog.Logger
}

// S3 is a committer, publisher and reader over one bucket and prefix. It is
// safe for concurrent use on different files.
type S3 struct {
	client   *minio.Client
	core     *minio.Core
	bucket   string
	prefix   string // without slashes at either end
	node     string
	fs       afero.Fs
	mode     Mode
	partSize int64
	parallel int
	log      *slog.Logger

	leaseMu  sync.Mutex
	leaseOK  error // the result of checkLeaseConditions, once it ran
	leaseRan bool
}

// New checks cfg and returns an S3 committer.
func New(cfg Config) (*S3, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("new s3 committer: client required")
	case cfg.Bucket == "":
		return nil, errors.New("new s3 committer: bucket required")
	case cfg.Staging == nil:
		return nil, errors.New("new s3 committer: staging filesystem required")
	case !layout.Node(cfg.Node):
		return nil, fmt.Errorf("new s3 committer: bad node id %q", cfg.Node)
	case cfg.Mode != Multipart && cfg.Mode != Copy:
		return nil, fmt.Errorf("new s3 committer: unknown mode %v", cfg.Mode)
	case cfg.PartSize != 0 && cfg.PartSize < MinPartSize:
		return nil, fmt.Errorf("new s3 committer: part size %d below the S3 minimum %d", cfg.PartSize, MinPartSize)
	case cfg.PartSize > maxCopyPart:
		return nil, fmt.Errorf("new s3 committer: part size %d above the S3 maximum %d", cfg.PartSize, int64(maxCopyPart))
	case cfg.Parallel < 0:
		return nil, fmt.Errorf("new s3 committer: parallel %d", cfg.Parallel)
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" && !fs.ValidPath(prefix) {
		return nil, fmt.Errorf("new s3 committer: bad prefix %q", cfg.Prefix)
	}
	s := &S3{
		client:   cfg.Client,
		core:     &minio.Core{Client: cfg.Client},
		bucket:   cfg.Bucket,
		prefix:   prefix,
		node:     cfg.Node,
		fs:       cfg.Staging,
		mode:     cfg.Mode,
		partSize: cfg.PartSize,
		parallel: cfg.Parallel,
		log:      cfg.Logger,
	}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if s.parallel == 0 {
		s.parallel = DefaultParallel
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Key returns the object key of a destination-relative name.
func (s *S3) Key(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

// StagingKey returns the key Copy mode stages final at.
func (s *S3) StagingKey(final string) string {
	return s.Key(layout.StagingName(s.node, final))
}

// maxKey is the longest object key S3 takes, in bytes of UTF-8.
const maxKey = 1024

// Limits bounds final names so that every key made from one fits in
// maxKey: the final key, and in Copy mode the longer staging key.
func (s *S3) Limits() committer.Limits {
	longest := len(s.Key(""))
	if s.mode == Copy {
		longest = len(s.StagingKey(""))
	}
	return committer.Limits{MaxName: maxKey - longest}
}

// validName reports whether name can be a destination file: a clean
// relative path outside _staging/.
func validName(name string) bool {
	return fs.ValidPath(name) && name != "." && name != stagingDir && !strings.HasPrefix(name, stagingDir+"/")
}

// Prepare uploads f.Temp: as the parts of a multipart upload on the final
// key (Multipart), or as a staging object plus an empty multipart upload on
// the final key (Copy). The local file must match f.Bytes and, when set,
// f.CRC32C (ErrBadStaging otherwise); an empty f.CRC32C is filled in.
//
// It fails with committer.ErrConflict when the final key exists already.
// On any error after the upload was started, the returned File still names
// the upload so Abort can remove it; Prepare has tried to already.
func (s *S3) Prepare(ctx context.Context, f committer.File) (committer.File, error) {
	if f.Temp == "" || !validName(f.Final) {
		return f, fmt.Errorf("prepare %q: temp name and a valid final name required", f.Final)
	}
	key := s.Key(f.Final)
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
		return f, fmt.Errorf("prepare %s: final object exists: %w", f.Final, committer.ErrConflict)
	} else if code(err) != minio.NoSuchKey {
		return f, fmt.Errorf("prepare %s: stat final object: %w", f.Final, classify(err))
	}
	crc, err := s.checkStaging(f)
	if err != nil {
		return f, fmt.Errorf("prepare %s: %w", f.Final, err)
	}
	f.CRC32C = crc
	f.UploadID, f.Parts, f.StagingKey, f.ETag = "", nil, "", ""

	if s.mode == Copy {
		f.StagingKey = s.StagingKey(f.Final)
		if f.ETag, err = s.putStaging(ctx, f); err != nil {
			s.cleanup(ctx, f, "prepare")
			return f, fmt.Errorf("prepare %s: stage: %w", f.Final, err)
		}
		if f.UploadID, err = s.core.NewMultipartUpload(ctx, s.bucket, key, s.putOptions(f.Final, f.CRC32C)); err != nil {
			s.cleanup(ctx, f, "prepare")
			return f, fmt.Errorf("prepare %s: start upload: %w", f.Final, classify(err))
		}
		return f, nil
	}

	if f.UploadID, err = s.core.NewMultipartUpload(ctx, s.bucket, key, s.putOptions(f.Final, f.CRC32C)); err != nil {
		return f, fmt.Errorf("prepare %s: start upload: %w", f.Final, classify(err))
	}
	if f.Parts, err = s.uploadParts(ctx, key, f.UploadID, f); err != nil {
		s.cleanup(ctx, f, "prepare")
		return f, fmt.Errorf("prepare %s: %w", f.Final, err)
	}
	return f, nil
}

// Commit makes f visible under its final key, create-only, then deletes the
// staging object and the local staging file.
//
// It returns nil when the object is already there with f's size and CRC-32C
// (an earlier Commit), committer.ErrConflict when it holds other content,
// and committer.ErrLost when neither the upload, the staging object, the
// final object nor the local staging file exists.
func (s *S3) Commit(ctx context.Context, f committer.File) error {
	if !validName(f.Final) {
		return fmt.Errorf("commit %q: invalid final name", f.Final)
	}
	err := s.complete(ctx, f)
	if errors.Is(err, errGone) {
		err = s.reupload(ctx, f)
	}
	if err != nil {
		return fmt.Errorf("commit %s: %w", f.Final, err)
	}
	if f.StagingKey != "" {
		if err := s.client.RemoveObject(ctx, s.bucket, f.StagingKey, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
			return fmt.Errorf("commit %s: delete staging object: %w", f.Final, classify(err))
		}
	}
	if err := s.removeTemp(f); err != nil {
		return fmt.Errorf("commit %s: %w", f.Final, err)
	}
	return nil
}

// reupload uploads f again from its local staging file when what Prepare
// made is gone and nothing is final (an upload expired by the server during
// a long outage, say). Without the local file the data is lost.
func (s *S3) reupload(ctx context.Context, f committer.File) error {
	if f.Temp == "" {
		return committer.ErrLost
	}
	if _, err := s.fs.Stat(f.Temp); errors.Is(err, os.ErrNotExist) {
		return committer.ErrLost
	} else if err != nil {
		return fmt.Errorf("stat staging file: %w", err)
	}
	s.log.Warn("prepared upload gone, uploading again from the staging file", "path", f.Final, "op", "commit", "upload_id", f.UploadID)
	// An earlier try of this may have been cut off by a crash with its
	// upload started: no record holds that one. The keys are this file's
	// alone and nothing is final, so every upload on them is a leftover.
	for _, k := range []string{s.Key(f.Final), s.StagingKey(f.Final)} {
		if err := s.abortUploads(ctx, k); err != nil {
			return fmt.Errorf("upload again: %w", err)
		}
	}
	g, err := s.Prepare(ctx, f)
	if err != nil {
		return fmt.Errorf("upload again: %w", err)
	}
	if err := s.complete(ctx, g); err != nil {
		// g's upload is in no record: remove it now rather than leak it.
		// A retry of Commit uploads again.
		s.cleanup(ctx, g, "commit")
		if errors.Is(err, errGone) {
			// Cut off again; the staging file is still here, so the next
			// try uploads once more.
			return fmt.Errorf("upload again: the new upload is gone too: %w", committer.ErrTransient)
		}
		return err
	}
	if g.StagingKey != "" {
		if err := s.client.RemoveObject(ctx, s.bucket, g.StagingKey, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
			return fmt.Errorf("delete staging object: %w", classify(err))
		}
	}
	return nil
}

// complete makes f's prepared upload the final object. It returns errGone
// when the prepared state is gone and the final key is empty.
func (s *S3) complete(ctx context.Context, f committer.File) error {
	if f.UploadID == "" {
		// Not prepared by this committer (or by an older version of it).
		if err := s.checkFinal(ctx, f); !errors.Is(err, committer.ErrNotFound) {
			return err
		}
		return errGone
	}
	key := s.Key(f.Final)
	parts := completeParts(f.Parts)
	if f.StagingKey != "" {
		var err error
		if parts, err = s.copyParts(ctx, key, f); err != nil {
			switch code(err) {
			case minio.NoSuchUpload, minio.NoSuchKey, minio.PreconditionFailed:
				// The upload was completed or aborted, or the staging
				// object is gone or changed: the final object decides.
				return s.finalOrGoneAbort(ctx, f)
			}
			return fmt.Errorf("copy staging object: %w", classify(err))
		}
	}
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	_, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, f.UploadID, parts, opts)
	if err == nil {
		return nil
	}
	switch code(err) {
	case minio.PreconditionFailed, minio.NoSuchUpload, "InvalidPart":
		// The key is taken: by this file on an earlier try whose answer
		// was lost, or by other content. Or the upload is gone. Or — a
		// Complete cut off mid-way on MinIO — the upload still exists but
		// its parts were used up and can never complete: with no final
		// object that is gone too, and the staging file is uploaded again.
		return s.finalOrGoneAbort(ctx, f)
	}
	return fmt.Errorf("complete upload: %w", classify(err))
}

// finalOrGoneAbort is finalOrGone, and then aborts f's prepared upload,
// which may still be listed (dead, or left behind by a cut-off Complete)
// although the final object decided the outcome.
func (s *S3) finalOrGoneAbort(ctx context.Context, f committer.File) error {
	err := s.finalOrGone(ctx, f)
	if err != nil && !errors.Is(err, errGone) {
		return err
	}
	if aerr := s.core.AbortMultipartUpload(ctx, s.bucket, s.Key(f.Final), f.UploadID); aerr != nil && code(aerr) != minio.NoSuchUpload {
		return fmt.Errorf("abort spent upload: %w", classify(aerr))
	}
	return err
}

func (s *S3) finalOrGone(ctx context.Context, f committer.File) error {
	err := s.checkFinal(ctx, f)
	if errors.Is(err, committer.ErrNotFound) {
		return errGone
	}
	return err
}

// checkFinal reports whether the final object is f: nil when its size and
// CRC-32C metadata match, committer.ErrConflict when not, and
// committer.ErrNotFound when there is no final object.
func (s *S3) checkFinal(ctx context.Context, f committer.File) error {
	info, err := s.client.StatObject(ctx, s.bucket, s.Key(f.Final), minio.StatObjectOptions{})
	if err != nil {
		if code(err) == minio.NoSuchKey {
			return fmt.Errorf("stat final object: %w", committer.ErrNotFound)
		}
		return fmt.Errorf("stat final object: %w", classify(err))
	}
	got := userMeta(info, metaCRC)
	if info.Size != f.Bytes || (f.CRC32C != "" && !strings.EqualFold(got, f.CRC32C)) {
		return fmt.Errorf("%w: %d bytes with crc32c %q, expected %d bytes with %q",
			committer.ErrConflict, info.Size, got, f.Bytes, f.CRC32C)
	}
	return nil
}

// Abort removes everything Prepare may have made for f: its upload and any
// other upload on its exact final and staging keys, the staging object and
// the local staging file. The final key is never touched (I7).
func (s *S3) Abort(ctx context.Context, f committer.File) error {
	if !validName(f.Final) {
		return fmt.Errorf("abort %q: invalid final name", f.Final)
	}
	key := s.Key(f.Final)
	if f.UploadID != "" {
		if err := s.core.AbortMultipartUpload(ctx, s.bucket, key, f.UploadID); err != nil && code(err) != minio.NoSuchUpload {
			return fmt.Errorf("abort %s: abort upload: %w", f.Final, classify(err))
		}
	}
	staging := s.StagingKey(f.Final)
	keys := []string{key, staging}
	if f.StagingKey != "" && f.StagingKey != staging {
		keys = append(keys, f.StagingKey)
	}
	for _, k := range keys {
		if err := s.abortUploads(ctx, k); err != nil {
			return fmt.Errorf("abort %s: %w", f.Final, err)
		}
	}
	for _, k := range keys[1:] {
		if err := s.client.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
			return fmt.Errorf("abort %s: delete staging object: %w", f.Final, classify(err))
		}
	}
	if err := s.removeTemp(f); err != nil {
		return fmt.Errorf("abort %s: %w", f.Final, err)
	}
	return nil
}

// abortUploads aborts every incomplete upload whose key is exactly key.
func (s *S3) abortUploads(ctx context.Context, key string) error {
	ids, err := s.Uploads(ctx, key)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.core.AbortMultipartUpload(ctx, s.bucket, key, id); err != nil && code(err) != minio.NoSuchUpload {
			return fmt.Errorf("abort upload of %s: %w", key, classify(err))
		}
	}
	return nil
}

// Uploads returns the ids of the incomplete multipart uploads on exactly
// key. Only exact keys work on MinIO, which ignores folder prefixes.
func (s *S3) Uploads(ctx context.Context, key string) ([]string, error) {
	var ids []string
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, key, keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("list uploads of %s: %w", key, classify(err))
		}
		for _, u := range res.Uploads {
			if u.Key == key {
				ids = append(ids, u.UploadID)
			}
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			return ids, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// cleanup undoes a failed Prepare as far as it can. The caller returns the
// Prepare error, so failures here are only logged; Abort retries them.
func (s *S3) cleanup(ctx context.Context, f committer.File, op string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if f.UploadID != "" {
		if err := s.core.AbortMultipartUpload(ctx, s.bucket, s.Key(f.Final), f.UploadID); err != nil && code(err) != minio.NoSuchUpload {
			s.log.Warn("abort upload of failed prepare; Abort will retry", "path", f.Final, "op", op, "err", err)
		}
	}
	if f.StagingKey != "" {
		if err := s.abortUploads(ctx, f.StagingKey); err != nil {
			s.log.Warn("abort staging upload of failed prepare; Abort will retry", "path", f.Final, "op", op, "err", err)
		}
		if err := s.client.RemoveObject(ctx, s.bucket, f.StagingKey, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
			s.log.Warn("delete staging object of failed prepare; Abort will retry", "path", f.Final, "op", op, "err", err)
		}
	}
}

func (s *S3) removeTemp(f committer.File) error {
	if f.Temp == "" {
		return nil
	}
	if err := s.fs.Remove(f.Temp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove staging file %s: %w", f.Temp, err)
	}
	return nil
}

// putOptions are the options of every object this committer creates.
func (s *S3) putOptions(name, crc string) minio.PutObjectOptions {
	return minio.PutObjectOptions{
		UserMetadata: map[string]string{metaCRC: crc},
		ContentType:  format.MediaType(name),
	}
}

// userMeta returns the user metadata value for key, whatever its case.
func userMeta(info minio.ObjectInfo, key string) string {
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, key) || strings.EqualFold(k, "X-Amz-Meta-"+key) {
			return v
		}
	}
	return ""
}

// PreparesRemotely marks S3 as leaving uploads behind Prepare: the engine
// records an intent for each file first, so recovery can abort them.
func (s *S3) PreparesRemotely() {}

// Move copies the object from to to server-side (any size: ComposeObject
// copies in parts beyond 5 GiB), then deletes from. The copy names from's
// ETag, so a from changed meanwhile is not copied. From gone and to
// present is an earlier move; both present with the same size and
// CRC-32C metadata is an earlier move cut short before the delete.
func (s *S3) Move(ctx context.Context, from, to string) error {
	src, dst := s.Key(from), s.Key(to)
	stat := func(key string) (minio.ObjectInfo, bool, error) {
		info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		if code(err) == minio.NoSuchKey {
			return info, false, nil
		}
		return info, err == nil, classify(err)
	}
	sinfo, sok, err := stat(src)
	if err != nil {
		return fmt.Errorf("move %s: stat: %w", from, err)
	}
	dinfo, dok, err := stat(dst)
	if err != nil {
		return fmt.Errorf("move %s: stat: %w", to, err)
	}
	switch {
	case !sok && dok:
		return nil
	case !sok:
		return fmt.Errorf("move %s: %w", from, committer.ErrNotFound)
	case dok:
		if dinfo.Size != sinfo.Size || !strings.EqualFold(userMeta(dinfo, metaCRC), userMeta(sinfo, metaCRC)) {
			return fmt.Errorf("move %s: %w: %s holds other content", from, committer.ErrConflict, to)
		}
	default:
		_, err := s.client.ComposeObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: dst},
			minio.CopySrcOptions{Bucket: s.bucket, Object: src, MatchETag: sinfo.ETag})
		if err != nil {
			return fmt.Errorf("move %s: copy: %w", from, classify(err))
		}
	}
	if err := s.client.RemoveObject(ctx, s.bucket, src, minio.RemoveObjectOptions{}); err != nil && code(err) != minio.NoSuchKey {
		return fmt.Errorf("move %s: remove: %w", from, classify(err))
	}
	return nil
}
