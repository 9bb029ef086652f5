package format

import (
	"fmt"
	"sync"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// PageCodecs holds the Parquet page codecs that many files share, so that
// their encoders (zstd: about 2 MiB each, mostly match tables) are made
// once, not once per file: parquet-go's own zstd codec keeps its encoders
// in a sync.Pool of the codec, which a new codec per file never reuses,
// and sizes each one's history for an 8 MiB window (16 MiB allocated per
// encoder), where a page is at most a few hundred KiB. Safe for concurrent
// use.
type PageCodecs struct {
	concurrency int
	mu          sync.Mutex
	codecs      map[string]compress.Codec
}

// NewPageCodecs returns codecs that compress at most concurrency pages at
// once each (zstd), the others waiting.
func NewPageCodecs(concurrency int) *PageCodecs {
	return &PageCodecs{concurrency: max(concurrency, 1), codecs: map[string]compress.Codec{}}
}

// codec returns the shared codec for a Parquet page compression name.
func (p *PageCodecs) codec(name string) (compress.Codec, error) {
	if p == nil {
		return pageCodec(name, 1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.codecs[name]; c != nil {
		return c, nil
	}
	c, err := pageCodec(name, p.concurrency)
	if err != nil {
		return nil, err
	}
	p.codecs[name] = c
	return c, nil
}

// zstdPages is a zstd page codec with a window of pageWindow. A page is
// about parquet-go's page buffer (256 KiB), past it by a batch of rows
// at most, and a frame of up to a window's bytes is one segment whose
// matches all lie within it: for such pages a larger window writes the
// same bytes (TestPageCodecWindow) and only costs memory, its history
// (2 MiB for 1 MiB; about 1 MiB less per encoder at 512 KiB). Its frames
// are what parquet-go's codec writes (no checksum, single segment for a
// page).
type zstdPages struct {
	enc *zstd.Encoder
	dec pqzstd.Codec // decoding is parquet-go's: only tests read with it
}

func newZstdPages(concurrency int) (*zstdPages, error) {
	enc, err := zstd.NewWriter(nil, pageOptions(concurrency, pageWindow)...)
	if err != nil {
		return nil, fmt.Errorf("start zstd page codec: %w", err)
	}
	return &zstdPages{enc: enc}, nil
}

func (z *zstdPages) String() string                              { return "ZSTD" }
func (z *zstdPages) CompressionCodec() pqformat.CompressionCodec { return pqformat.Zstd }

func (z *zstdPages) Encode(dst, src []byte) ([]byte, error) {
	return z.enc.EncodeAll(src, dst[:0]), nil
}

func (z *zstdPages) Decode(dst, src []byte) ([]byte, error) { return z.dec.Decode(dst, src) }

var _ compress.Codec = (*zstdPages)(nil)

// pageWindow is the zstd window of Parquet pages.
const pageWindow = 512 << 10

// pageLevel is the zstd level of Parquet pages: the library's default
// (zstd's level 3). Level 1 (SpeedFastest) was measured and not taken
// (BenchmarkPageLevel; BENCHMARKS.md, issue 26, h4-pq): it compresses
// the harness's pages (mostly random text) in about half the CPU time for
// a file 0.4% larger, but web-log-like records' files come out 9% larger,
// for 20% less CPU on their pages.
const pageLevel = zstd.SpeedDefault

// pageOptions are the zstd encoder's options for Parquet pages with a
// window of window bytes: the page level; frames as parquet-go's codec
// writes them (no checksum, an empty page an empty frame); and lower
// memory, which sizes the history for the window (640 KiB at 512 KiB
// rather than 1 MiB) and grows the block buffers as needed, without
// changing a byte of the frames (TestPageCodecLowMem).
func pageOptions(concurrency, window int) []zstd.EOption {
	return []zstd.EOption{
		zstd.WithEncoderConcurrency(concurrency),
		zstd.WithEncoderLevel(pageLevel),
		zstd.WithWindowSize(window),
		zstd.WithZeroFrames(true),
		zstd.WithEncoderCRC(false),
		zstd.WithLowerEncoderMem(true),
	}
}

// isZstdPages reports whether name is zstd pages, a Parquet stream's default.
func isZstdPages(name string) bool { return name == "" || name == streamconf.CompressionZstd }
