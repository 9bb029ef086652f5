package format

import (
	"fmt"
	"io"
	"path"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// mediaTypes maps a file's last extension to its media type.
var mediaTypes = map[string]string{
	"." + streamconf.ExtNDJSON:  "application/x-ndjson",
	"." + streamconf.ExtText:    "text/plain; charset=utf-8",
	"." + streamconf.ExtParquet: "application/vnd.apache.parquet",
	".json":                     "application/json", // manifests, leases, stream configurations
	streamconf.ExtGzip:          "application/gzip",
	streamconf.ExtZstd:          "application/zstd",
}

// MediaType returns the media type of a file named name, by its last
// extension: what a download is served with and an S3 object stored
// with. An unknown extension is application/octet-stream.
func MediaType(name string) string {
	if t, ok := mediaTypes[path.Ext(name)]; ok {
		return t
	}
	return "application/octet-stream"
}

// Decompress returns a reader of the bytes that r, the start of a file
// named name, holds once decompressed by its extension: gzip (".gz",
// concatenated members allowed) or zstd (".zst", concatenated frames
// allowed, a window of at most maxWindow bytes). Any other file's bytes
// are r's. A stream that ends early or does not decode is an error
// wrapping ErrCorrupt, never io.EOF or io.ErrUnexpectedEOF, so a cut
// stream is never taken for a short file.
func Decompress(r io.Reader, name string, maxWindow uint64) (io.ReadCloser, error) {
	switch path.Ext(name) {
	case streamconf.ExtGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip header: %w", ErrCorrupt, err)
		}
		return &checked{r: zr, close: zr.Close, what: "gzip"}, nil
	case streamconf.ExtZstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(maxWindow))
		if err != nil {
			return nil, fmt.Errorf("start zstd: %w", err)
		}
		return &checked{r: zr, close: func() error { zr.Close(); return nil }, what: "zstd"}, nil
	}
	return io.NopCloser(r), nil
}

// checked is a decompressor whose errors other than a clean io.EOF wrap
// ErrCorrupt.
type checked struct {
	r     io.Reader
	close func() error
	what  string
}

func (c *checked) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %s: %v", ErrCorrupt, c.what, err) // %v: a cut stream is not io.ErrUnexpectedEOF to the caller
	}
	return n, err
}

func (c *checked) Close() error { return c.close() }
