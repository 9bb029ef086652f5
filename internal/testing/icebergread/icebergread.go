// Package icebergread reads eosink's Iceberg tables the way a reader that
// knows nothing of eosink does: apache/iceberg-go's table.NewFromLocation
// on the newest metadata file, then a full scan. Test tooling only.
package icebergread

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	iceio "github.com/apache/iceberg-go/io"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/minio/minio-go/v7"
)

// Table is what a scan of a table's newest metadata saw.
type Table struct {
	Snapshots int
	Rows      []map[string]any // every row, as JSON objects decode
	Summary   map[string]string
}

// Read opens metaLocation (an absolute file:// or s3:// URI of a
// vN.metadata.json) with iceberg-go and scans every row.
func Read(ctx context.Context, fsys iceio.IO, metaLocation string) (*Table, error) {
	tbl, err := icetable.NewFromLocation(ctx, []string{"t"}, metaLocation,
		func(context.Context) (iceio.IO, error) { return fsys, nil }, nil)
	if err != nil {
		return nil, fmt.Errorf("iceberg-go: open %s: %w", metaLocation, err)
	}
	out := &Table{Snapshots: len(tbl.Metadata().Snapshots())}
	if s := tbl.CurrentSnapshot(); s != nil && s.Summary != nil {
		out.Summary = s.Summary.Properties
	}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, fmt.Errorf("iceberg-go: scan: %w", err)
	}
	defer at.Release()
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		var buf bytes.Buffer
		if err := array.RecordToJSON(tr.RecordBatch(), &buf); err != nil {
			return nil, fmt.Errorf("rows to JSON: %w", err)
		}
		dec := json.NewDecoder(&buf)
		for {
			var row map[string]any
			if err := dec.Decode(&row); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("rows to JSON: %w", err)
			}
			out.Rows = append(out.Rows, row)
		}
	}
	return out, tr.Err()
}

// S3 is an iceberg-go IO over minio-go for s3://bucket/key locations, so
// the tests need no cloud SDK: each Open reads the whole object.
type S3 struct{ Client *minio.Client }

func (s S3) split(name string) (string, string, error) {
	rest, ok := strings.CutPrefix(name, "s3://")
	if !ok {
		return "", "", fmt.Errorf("not an s3:// location: %s", name)
	}
	bucket, key, _ := strings.Cut(rest, "/")
	return bucket, key, nil
}

// ReadFile reads a whole object.
func (s S3) ReadFile(name string) ([]byte, error) {
	bucket, key, err := s.split(name)
	if err != nil {
		return nil, err
	}
	obj, err := s.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}

// Open reads a whole object into memory.
func (s S3) Open(name string) (iceio.File, error) {
	b, err := s.ReadFile(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &memFile{Reader: bytes.NewReader(b), name: name, size: int64(len(b))}, nil
}

// Remove is refused: readers don't remove.
func (s S3) Remove(name string) error { return fmt.Errorf("remove %s: read-only", name) }

type memFile struct {
	*bytes.Reader
	name string
	size int64
}

func (f *memFile) Close() error               { return nil }
func (f *memFile) Stat() (fs.FileInfo, error) { return fileInfo{f}, nil }

type fileInfo struct{ f *memFile }

func (i fileInfo) Name() string       { return i.f.name }
func (i fileInfo) Size() int64        { return i.f.size }
func (i fileInfo) Mode() fs.FileMode  { return 0o444 }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }

// Plan opens metaLocation with iceberg-go and plans a full scan (the
// metadata, the manifest list, every manifest), reading no data file: the
// part of a read that table metadata decides. It returns the files to read.
func Plan(ctx context.Context, fsys iceio.IO, metaLocation string) (int, error) {
	tbl, err := icetable.NewFromLocation(ctx, []string{"t"}, metaLocation,
		func(context.Context) (iceio.IO, error) { return fsys, nil }, nil)
	if err != nil {
		return 0, fmt.Errorf("iceberg-go: open %s: %w", metaLocation, err)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return 0, fmt.Errorf("iceberg-go: plan: %w", err)
	}
	return len(tasks), nil
}
