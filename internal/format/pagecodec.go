package format

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
// once each (zstd), the others waiting; zstd's encoders are made as pages
// need them (see zstdPages).
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
	// Each encoder compresses one page at a time (EncodeAll keeps
	// nothing between calls: any encoder writes a page's same bytes). One
	// is made at the start. A page that finds none idle waits for one,
	// unless a page waited within pageEncoderIdle: then another is made,
	// at most max. One is always kept; another, once idle for
	// pageEncoderIdle, is dropped for the GC. Pages compressed at once
	// only now and then (a checkpoint's last step beside the next file's
	// first: a page's wait is ~1 ms) then neither keep nor keep making an
	// encoder (~2.3 MiB: match tables and history), and steady concurrent
	// streams make theirs at their second wait and keep them.
	mu       sync.Mutex
	freed    sync.Cond   // an encoder was returned
	idle     []idleCodec // least recently returned first
	made     int         // encoders in use or idle
	max      int
	lastWait time.Time // when a page last waited; zero: never
	opts     []zstd.EOption
	dec      pqzstd.Codec // decoding is parquet-go's: only tests read with it
	now      func() time.Time

	extras atomic.Int64 // encoders made after the first (tests)
}

type idleCodec struct {
	enc   *zstd.Encoder
	since time.Time
}

// pageEncoderIdle is how long an idle page encoder beyond one is kept.
const pageEncoderIdle = time.Second

func newZstdPages(concurrency int) (*zstdPages, error) {
	return newZstdPagesWith(concurrency, pageOptions(1, pageWindow))
}

// newZstdPagesWith is newZstdPages with encoders of opts (for tests).
func newZstdPagesWith(concurrency int, opts []zstd.EOption) (*zstdPages, error) {
	z := &zstdPages{max: max(concurrency, 1), opts: opts, now: time.Now}
	z.freed.L = &z.mu
	enc, err := z.newEncoder() // the options are checked now, not at the first page
	if err != nil {
		return nil, err
	}
	z.idle, z.made = []idleCodec{{enc: enc}}, 1
	return z, nil
}

func (z *zstdPages) newEncoder() (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(nil, z.opts...)
	if err != nil {
		return nil, fmt.Errorf("start zstd page codec: %w", err)
	}
	return enc, nil
}

// get returns the encoder returned last; if none is idle, a new one if
// fewer than max exist and a page waited lately, or else it waits.
func (z *zstdPages) get() (*zstd.Encoder, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for {
		if n := len(z.idle); n > 0 {
			enc := z.idle[n-1].enc
			z.idle[n-1] = idleCodec{}
			z.idle = z.idle[:n-1]
			return enc, nil
		}
		now := z.now()
		if z.made < z.max && !z.lastWait.IsZero() && now.Sub(z.lastWait) < pageEncoderIdle {
			enc, err := z.newEncoder()
			if err == nil {
				z.made++
				z.extras.Add(1)
			}
			return enc, err
		}
		z.lastWait = now
		z.freed.Wait()
	}
}

// put returns enc, and drops the least recently returned idle encoder if
// it has been idle for pageEncoderIdle and another is idle too.
func (z *zstdPages) put(enc *zstd.Encoder) {
	now := z.now()
	z.mu.Lock()
	z.idle = append(z.idle, idleCodec{enc: enc, since: now})
	if len(z.idle) > 1 && now.Sub(z.idle[0].since) >= pageEncoderIdle {
		z.idle[0] = idleCodec{}
		z.idle = z.idle[1:]
		z.made--
	}
	z.mu.Unlock()
	z.freed.Signal()
}

func (z *zstdPages) String() string                              { return "ZSTD" }
func (z *zstdPages) CompressionCodec() pqformat.CompressionCodec { return pqformat.Zstd }

func (z *zstdPages) Encode(dst, src []byte) ([]byte, error) {
	enc, err := z.get()
	if err != nil {
		return dst[:0], err
	}
	defer z.put(enc)
	return enc.EncodeAll(src, dst[:0]), nil
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
