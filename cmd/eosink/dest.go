package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	s3c "github.com/eosink/eosink/committer/s3"
	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

// destination is where committed files go.
type destination interface {
	committer.Committer
	committer.Publisher
	committer.Reader
	committer.Leaser // the node lease, _nodes/<node>.json
}

type destFlags struct {
	dest       string
	endpoint   string
	insecure   bool
	commitMode string
	region     string // --s3-region; these three in s3conf.go
	caFile     string
	lookup     string
}

// openDest parses --dest and builds its committer. staging is the local
// staging directory (for file:// it must be on the same filesystem); ""
// opens the destination for reading only.
func openDest(ctx context.Context, df destFlags, fsys afero.Fs, staging, node string, log *slog.Logger) (destination, string, error) {
	u, err := url.Parse(df.dest)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --dest %q: %w", errUsage, df.dest, err)
	}
	switch u.Scheme {
	case "file":
		return openLocalDest(df, u, fsys, staging)
	case "s3":
		return openS3Dest(ctx, df, u, fsys, node, log)
	default:
		return nil, "", fmt.Errorf("%w: --dest %q: want file:///path or s3://bucket/prefix", errUsage, df.dest)
	}
}

// openLocalDest opens a file:///abs/path destination, creating it unless
// reading only. It and staging must be apart and on one file system.
func openLocalDest(df destFlags, u *url.URL, fsys afero.Fs, staging string) (destination, string, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, "", fmt.Errorf("%w: --dest %q: want file:///absolute/path", errUsage, df.dest)
	}
	dir := filepath.Clean(u.Path)
	if !filepath.IsAbs(dir) {
		return nil, "", fmt.Errorf("%w: --dest %q: path must be absolute", errUsage, df.dest)
	}
	if staging == "" { // reading only: a missing destination is not an empty one
		if _, err := fsys.Stat(dir); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errNoDest, err)
		}
		return local.New(fsys, dir, staging), dir, nil
	}
	if within(dir, staging) {
		return nil, "", fmt.Errorf("%w: --dest %s: the staging directory %s must not be inside the destination", errUsage, dir, staging)
	}
	if within(staging, dir) {
		return nil, "", fmt.Errorf("%w: --dest %s: the destination must not be inside the staging directory %s", errUsage, dir, staging)
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("create destination %s: %w", dir, err)
	}
	if err := sameDevice(dir, staging); err != nil {
		return nil, "", err
	}
	return local.New(fsys, dir, staging), dir, nil
}

// openS3Dest opens an s3://bucket/prefix destination. A missing bucket is
// a configuration error; an unreachable server is an outage, which
// recovery waits out (not ready meanwhile).
func openS3Dest(ctx context.Context, df destFlags, u *url.URL, fsys afero.Fs, node string, log *slog.Logger) (destination, string, error) {
	bucket := u.Host
	prefix := strings.Trim(u.Path, "/")
	if bucket == "" {
		return nil, "", fmt.Errorf("--dest %q: no bucket", df.dest)
	}
	cl, endpoint, err := newS3Client(df, log)
	if err != nil {
		return nil, "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ok, err := cl.BucketExists(cctx, bucket)
	cancel()
	switch {
	case err == nil && !ok:
		return nil, "", fmt.Errorf("%w: bucket %s does not exist at %s", errNoDest, bucket, endpoint)
	case err != nil:
		if er := minio.ToErrorResponse(err); er.StatusCode == 401 || er.StatusCode == 403 {
			return nil, "", fmt.Errorf("check bucket %s at %s: %w", bucket, endpoint, err)
		}
		if untrustedCert(err) {
			return nil, "", fmt.Errorf("check bucket %s at %s: %w (trust its CA with --s3-ca-file)", bucket, endpoint, err)
		}
		log.Warn("cannot reach the S3 endpoint yet; recovery retries until it can", "endpoint", endpoint, "err", err)
	}
	mode := s3c.Multipart
	switch df.commitMode {
	case "", "multipart":
	case "copy":
		mode = s3c.Copy
	default:
		return nil, "", fmt.Errorf("%w: --s3-commit %q: want multipart or copy", errUsage, df.commitMode)
	}
	c, err := s3c.New(s3c.Config{Client: cl, Bucket: bucket, Prefix: prefix, Node: node, Staging: fsys, Mode: mode, Logger: log})
	if err != nil {
		return nil, "", err
	}
	return c, df.dest, nil
}

// tableLocation is the destination's absolute URI as Iceberg metadata
// names files: file:///abs/path or s3://bucket/prefix, no trailing slash.
// "" for a --dest openDest would refuse.
func tableLocation(dest string) string {
	u, err := url.Parse(dest)
	if err != nil {
		return ""
	}
	switch u.Scheme {
	case "file":
		return "file://" + filepath.ToSlash(filepath.Clean(u.Path))
	case "s3":
		loc := "s3://" + u.Host
		if prefix := strings.Trim(u.Path, "/"); prefix != "" {
			loc += "/" + prefix
		}
		return loc
	}
	return ""
}

// within reports whether path is dir or lies under it; both are absolute.
// A name that only starts with ".." ("..x") is inside, not above.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// sameDevice refuses a destination on another filesystem than staging:
// commit is a rename, which cannot cross filesystems.
func sameDevice(a, b string) error {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return fmt.Errorf("stat %s: %w", a, err)
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return fmt.Errorf("stat %s: %w", b, err)
	}
	if sa.Dev != sb.Dev {
		return fmt.Errorf("destination %s and staging %s are on different filesystems; a commit is a rename and cannot cross them (put --data-dir on the destination's filesystem)", a, b)
	}
	return nil
}
