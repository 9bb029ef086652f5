package invariant

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

// Object is one file or object of a destination, its path relative to the
// destination's root, slash-separated.
type Object struct {
	Path string
	Size int64
}

// Dest reads a destination directly (a directory, or a bucket through
// minio-go), never through eosink: the checker must see what a reader of
// the destination sees, temp files and staging objects included, which the
// committers' own readers hide.
type Dest interface {
	String() string
	// List returns every object below the root, recursively; a missing
	// root is an empty destination.
	List(ctx context.Context) ([]Object, error)
	// Read returns an object's whole content.
	Read(ctx context.Context, path string) ([]byte, error)
}

// FSDest is a destination directory on an afero.Fs.
type FSDest struct {
	FS  afero.Fs
	Dir string
}

var _ Dest = FSDest{}

// LocalDest is a destination directory on the real disk (file://dir).
func LocalDest(dir string) FSDest { return FSDest{FS: afero.NewOsFs(), Dir: dir} }

func (d FSDest) String() string { return "file://" + d.Dir }

// List walks the directory.
func (d FSDest) List(ctx context.Context) ([]Object, error) {
	var out []Object
	err := afero.Walk(d.FS, d.Dir, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, d.Dir), string(os.PathSeparator))
		out = append(out, Object{Path: strings.ReplaceAll(rel, string(os.PathSeparator), "/"), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d, err)
	}
	return out, nil
}

// Read reads one file.
func (d FSDest) Read(_ context.Context, p string) ([]byte, error) {
	return afero.ReadFile(d.FS, path.Join(d.Dir, p))
}

// S3Dest is an s3://bucket/prefix destination; Prefix has no slash at
// either end, "" for the bucket's root.
type S3Dest struct {
	Client *minio.Client
	Bucket string
	Prefix string
}

var _ Dest = S3Dest{}

func (d S3Dest) String() string { return "s3://" + d.Bucket + "/" + d.Prefix }

// List lists every object under the prefix.
func (d S3Dest) List(ctx context.Context) ([]Object, error) {
	var out []Object
	opts := minio.ListObjectsOptions{Recursive: true}
	if d.Prefix != "" {
		opts.Prefix = d.Prefix + "/"
	}
	for o := range d.Client.ListObjects(ctx, d.Bucket, opts) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s: %w", d, o.Err)
		}
		out = append(out, Object{Path: strings.TrimPrefix(o.Key, opts.Prefix), Size: o.Size})
	}
	return out, nil
}

// Read gets one object.
func (d S3Dest) Read(ctx context.Context, p string) ([]byte, error) {
	key := p
	if d.Prefix != "" {
		key = d.Prefix + "/" + p
	}
	o, err := d.Client.GetObject(ctx, d.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return b, nil
}
