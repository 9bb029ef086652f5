package format

import (
	"errors"
	"fmt"
	"io"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Default sizes for encoding.
const (
	// DefaultRowGroupBytes bounds a Parquet row group: a new row group starts
	// after this many bytes of source records. The Parquet writer holds one
	// row group in memory, as compressed pages plus one uncompressed page
	// buffer (256 KiB) per column, so this bounds an encode's memory
	// whatever the file's size: at most RowGroupBytes + 8 MiB of live heap
	// (TestParquetMemoryBound; measured ~3.5 MiB at this default, flat
	// across a file's row groups). parquet-go's buffer pools add garbage
	// that the GC reclaims (up to ~40 MiB seen in HeapInuse at 8-16 MiB
	// groups). 8 MiB of NDJSON makes row groups of about 0.5 MiB of zstd
	// pages for typical records: small by warehouse standards, fine for
	// DuckDB; a stream that is scanned more than written can raise it.
	DefaultRowGroupBytes = 8 << 20
	encodeBufferSize     = 256 << 10
	// MaxRecordBytes bounds one record (line) that Encode and the readers
	// accept; larger ones are refused rather than buffered.
	MaxRecordBytes = 64 << 20
)

// ErrUnsupported means an encoding or file kind this package can't do.
var ErrUnsupported = errors.New("unsupported encoding")

// Encoding says how plain records (NDJSON or text lines) become a file
// of a stream's format.
type Encoding struct {
	// Format is streamconf.FormatNDJSON, FormatText, FormatParquet, or
	// FormatAuto (the same as ndjson/text: the bytes are the records).
	Format string
	// Compression: for ndjson and text, none, gzip or zstd, the whole file
	// one stream; for Parquet, the page codec: none, snappy, gzip or zstd
	// ("" is zstd).
	Compression string
	// Schema is the Parquet schema; required for Parquet.
	Schema *streamconf.Schema
	// RowGroupBytes bounds Parquet row groups in source bytes; 0 means
	// DefaultRowGroupBytes.
	RowGroupBytes int64

	// beforeRowGroup, if set, runs when a Parquet row group is complete in
	// memory, just before it is written: the memory test measures there.
	beforeRowGroup func()
}

// EncodingFor returns the encoding of a validated stream configuration.
func EncodingFor(c streamconf.Config) Encoding {
	return Encoding{Format: c.Format, Compression: c.Compression, Schema: c.Schema}
}

// Plain reports whether the final bytes are the plain records' bytes, so
// no Encode is needed.
func (e Encoding) Plain() bool {
	return e.Format != streamconf.FormatParquet && (e.Compression == "" || e.Compression == streamconf.CompressionNone)
}

// Encode writes the plain records read from r to w in encoding e. For
// Parquet it returns the records written (counted as rows); for the
// others -1: their bytes are the records', counted by the caller as they
// pass. Memory: gzip and zstd stream through fixed buffers (about 1 MiB
// for zstd's window and state, 256 KiB of gzip state); Parquet holds one
// row group (see DefaultRowGroupBytes).
func Encode(w io.Writer, r io.Reader, e Encoding) (records int64, err error) {
	switch {
	case e.Format == streamconf.FormatParquet:
		return encodeParquet(w, r, e)
	case e.Compression == streamconf.CompressionGzip:
		return -1, encodeGzip(w, r)
	case e.Compression == streamconf.CompressionZstd:
		return -1, encodeZstd(w, r)
	case e.Plain():
		_, err = io.Copy(w, r)
		return -1, err
	}
	return -1, fmt.Errorf("%w: format %q, compression %q", ErrUnsupported, e.Format, e.Compression)
}

func encodeGzip(w io.Writer, r io.Reader) error {
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return fmt.Errorf("start gzip: %w", err)
	}
	if _, err := io.Copy(zw, r); err != nil {
		_ = zw.Close() // the copy's error is the one to report
		return fmt.Errorf("gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("finish gzip: %w", err)
	}
	return nil
}

// zstdWindow bounds zstd's memory; 1 MiB loses little ratio on records.
const zstdWindow = 1 << 20

func encodeZstd(w io.Writer, r io.Reader) error {
	zw, err := zstd.NewWriter(w,
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithWindowSize(zstdWindow),
		zstd.WithEncoderCRC(true))
	if err != nil {
		return fmt.Errorf("start zstd: %w", err)
	}
	if _, err := zw.ReadFrom(r); err != nil {
		_ = zw.Close() // the copy's error is the one to report
		return fmt.Errorf("zstd: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("finish zstd: %w", err)
	}
	return nil
}

// Framer compresses plain records as independent zstd frames or gzip
// members, which concatenate into one valid file (Decompress and
// OpenRecords read such files, as do zstd(1), gzip(1) and DuckDB): a file
// can then be compressed a piece at a time as its records arrive, with no
// codec state kept between pieces. A Framer reuses its codec's state from
// one frame to the next (zstd: about 1 MiB for its window and tables;
// gzip: about 256 KiB). Not safe for concurrent use.
type Framer struct {
	compression string
	zw          *zstd.Encoder
	gw          *gzip.Writer
}

// NewFramer returns a Framer for compression (gzip or zstd).
func NewFramer(compression string) (*Framer, error) {
	f := &Framer{compression: compression}
	var err error
	switch compression {
	case streamconf.CompressionZstd:
		f.zw, err = zstd.NewWriter(nil,
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithWindowSize(zstdWindow),
			zstd.WithEncoderCRC(true))
	case streamconf.CompressionGzip:
		f.gw, err = gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	default:
		return nil, fmt.Errorf("%w: frames of compression %q", ErrUnsupported, compression)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", compression, err)
	}
	return f, nil
}

// Frame writes what r holds to w as one complete frame (member).
func (f *Framer) Frame(w io.Writer, r io.Reader) error {
	if f.zw != nil {
		f.zw.Reset(w)
		if _, err := f.zw.ReadFrom(r); err != nil {
			_ = f.zw.Close() // the copy's error is the one to report
			return fmt.Errorf("zstd: %w", err)
		}
		if err := f.zw.Close(); err != nil {
			return fmt.Errorf("finish zstd frame: %w", err)
		}
		f.zw.Reset(nil) // keep no reference to w
		return nil
	}
	f.gw.Reset(w)
	if _, err := io.Copy(f.gw, r); err != nil {
		_ = f.gw.Close() // the copy's error is the one to report
		return fmt.Errorf("gzip: %w", err)
	}
	if err := f.gw.Close(); err != nil {
		return fmt.Errorf("finish gzip member: %w", err)
	}
	f.gw.Reset(io.Discard) // keep no reference to w
	return nil
}
