package format

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/cputime"
	"github.com/eosink/eosink/internal/testing/heap"
	"github.com/parquet-go/parquet-go"
)

// encodeWith writes recs as one Parquet file, its pages kept in pf (nil:
// the heap), and returns the file.
func encodeWith(t testing.TB, recs [][]byte, e Encoding, pf PageFile) []byte {
	t.Helper()
	var out bytes.Buffer
	pw, err := NewParquetWriterPages(&out, e, nil, pf)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := pw.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A writer whose pages wait in a page file writes the same bytes as one
// whose pages wait on the heap: for each codec, row groups of several
// sizes (a row group a page, many pages, several row groups reusing the
// file from 0), records that compress to nothing and that don't, and a
// file with no records.
func TestParquetPageFileSameBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var recs [][]byte
	for i := range 6000 {
		if i%2 == 0 {
			recs = append(recs, benchRecord(i))
		} else {
			recs = append(recs, webLogRecord(r, i))
		}
	}
	recs = append(recs, []byte(`{"ts":"2026-11-29T09:00:00Z","pad":"`+string(bytes.Repeat([]byte("x"), 600<<10))+`"}`)) // a page over the pend and scratch buffers
	for _, c := range []string{"", streamconf.CompressionSnappy, streamconf.CompressionNone, streamconf.CompressionGzip} {
		for _, group := range []int64{64 << 10, 1 << 20, DefaultRowGroupBytes} {
			for _, n := range []int{0, 1, len(recs)} {
				e := Encoding{Format: "parquet", Schema: benchSchema, Compression: c, RowGroupBytes: group}
				want := encodeWith(t, recs[:n], e, nil)
				pf, err := os.Create(filepath.Join(t.TempDir(), "pages"))
				if err != nil {
					t.Fatal(err)
				}
				got := encodeWith(t, recs[:n], e, pf)
				fi, _ := pf.Stat()
				pf.Close()
				if !bytes.Equal(got, want) {
					t.Fatalf("codec %q, row groups of %d, %d records: %d bytes with a page file, %d without, not the same", c, group, n, len(got), len(want))
				}
				if n > 0 && fi.Size() == 0 {
					t.Fatalf("codec %q, %d records: page file empty", c, n)
				}
				if limit := group + 2<<20; fi.Size() > limit {
					t.Errorf("codec %q, row groups of %d: page file of %d bytes, want at most %d (one row group's pages)", c, group, fi.Size(), limit)
				}
			}
		}
	}
}

// A failed write of the page file fails the writer, and so the file.
func TestParquetPageFileError(t *testing.T) {
	pf, err := os.Create(filepath.Join(t.TempDir(), "pages"))
	if err != nil {
		t.Fatal(err)
	}
	pf.Close() // writes fail
	var out bytes.Buffer
	pw, err := NewParquetWriterPages(&out, Encoding{Format: "parquet", Schema: benchSchema, RowGroupBytes: 1 << 20}, nil, pf)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4096 && err == nil; i++ {
		err = pw.WriteRecord(benchRecord(i))
	}
	if err == nil {
		err = pw.Close()
	}
	if err == nil {
		t.Fatal("writer with a closed page file: no error")
	}
	t.Log(err)
}

// TestParquetMemoryCandidates prints, for parquet-go's writer settings and
// the page file, the heap of two writers fed alternately (a stream's file
// and the next checkpoint's), measured when one's row group is complete
// in memory: after one GC (what the GC's target follows: sync.Pool
// contents are kept through one more) and after two (live), plus bytes
// allocated and CPU per record. Not a check: run with
//
//	EOSINK_PQMEM=1 go test -run TestParquetMemoryCandidates -v ./internal/format/
func TestParquetMemoryCandidates(t *testing.T) {
	if os.Getenv("EOSINK_PQMEM") == "" || raceEnabled {
		t.Skip("set EOSINK_PQMEM=1 to measure")
	}
	recs := make([][]byte, 4096)
	for i := range recs {
		recs[i] = benchRecord(i)
	}
	type candidate struct {
		name string
		opts []parquet.WriterOption
		file bool
		own  bool // a heapPagePool per writer
	}
	cands := []candidate{
		{name: "default"},
		{name: "pagefile", file: true},
		{name: "chunkpool256k", opts: []parquet.WriterOption{parquet.ColumnPageBuffers(parquet.NewChunkBufferPool(256 << 10))}},
		{name: "pagebuf128k", opts: []parquet.WriterOption{parquet.PageBufferSize(128 << 10)}},
		{name: "pagebuf128k+file", opts: []parquet.WriterOption{parquet.PageBufferSize(128 << 10)}, file: true},
		{name: "writebuf4k", opts: []parquet.WriterOption{parquet.WriteBufferSize(4 << 10)}},
		{name: "heapownpool", opts: nil, own: true},
		{name: "filebufferpool", opts: []parquet.WriterOption{parquet.ColumnPageBuffers(parquet.NewFileBufferPool(t.TempDir(), "pages-*"))}},
	}
	only := os.Getenv("EOSINK_PQMEM_ONLY")
	rounds := 3
	for round := range rounds {
		for _, c := range cands {
			if only != "" && only != c.name {
				continue
			}
			testWriterOptions = c.opts
			pages := NewPageCodecs(1)
			var one, two []int64
			base := heap.Live()
			e := Encoding{Format: "parquet", Schema: benchSchema}
			e.beforeRowGroup = func() {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				one = append(one, int64(ms.HeapAlloc)-base)
				two = append(two, heap.Live()-base)
			}
			var ws [2]*ParquetWriter
			var outs [2]countingDiscard
			for i := range ws {
				var pf PageFile
				if c.file {
					f, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprint("pages", i)))
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					pf = f
				}
				if c.own {
					testWriterOptions = []parquet.WriterOption{parquet.ColumnPageBuffers(&heapPagePool{})}
				}
				w, err := NewParquetWriterPages(&outs[i], e, pages, pf)
				if err != nil {
					t.Fatal(err)
				}
				ws[i] = w
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cputime.Used()
			const n = 8192 * 6 // three row groups each; the first is warm-up
			for i := range n {
				// Writer 1 lags half a row group: their row groups don't end together.
				w := ws[i%2]
				if err := w.WriteRecord(recs[i%len(recs)]); err != nil {
					t.Fatal(err)
				}
				if i == 8192 {
					one, two = one[:0], two[:0]
				}
			}
			cpu := cputime.Used() - cpu0
			runtime.ReadMemStats(&ms1)
			for _, w := range ws {
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			testWriterOptions = nil
			mib := func(v []int64) string {
				s := slices.Clone(v)
				slices.Sort(s)
				return fmt.Sprintf("median %.1f max %.1f MiB", float64(s[len(s)/2])/(1<<20), float64(s[len(s)-1])/(1<<20))
			}
			t.Logf("round %d %-18s one GC: %s; live: %s; alloc %d B/record; cpu %d ns/record (includes the GCs); out %d",
				round, c.name, mib(one), mib(two), (ms1.TotalAlloc-ms0.TotalAlloc)/n, cpu.Nanoseconds()/n, outs[0].n)
		}
	}
}

// heapPagePool is a candidate measured by TestParquetMemoryCandidates: a
// parquet.BufferPool on the heap whose buffers are 64 KiB chunks from a
// free list of its own (no sync.Pool), kept for the writer's life.
type heapPagePool struct{ free [][]byte }

func (p *heapPagePool) GetBuffer() io.ReadWriteSeeker { return &heapPageBuffer{p: p} }
func (p *heapPagePool) PutBuffer(b io.ReadWriteSeeker) {
	hb := b.(*heapPageBuffer)
	p.free = append(p.free, hb.chunks...)
	hb.chunks = nil
}

type heapPageBuffer struct {
	p          *heapPagePool
	chunks     [][]byte
	size, seek int64
}

const heapChunk = 64 << 10

func (b *heapPageBuffer) Write(data []byte) (int, error) {
	n := len(data)
	for len(data) > 0 {
		i, off := int(b.size/heapChunk), int(b.size%heapChunk)
		if i == len(b.chunks) {
			var c []byte
			if k := len(b.p.free); k > 0 {
				c, b.p.free = b.p.free[k-1], b.p.free[:k-1]
			} else {
				c = make([]byte, heapChunk)
			}
			b.chunks = append(b.chunks, c)
		}
		m := copy(b.chunks[i][off:], data)
		data = data[m:]
		b.size += int64(m)
	}
	b.seek = b.size
	return n, nil
}

func (b *heapPageBuffer) Read(dst []byte) (int, error) {
	if b.seek >= b.size {
		return 0, io.EOF
	}
	i, off := int(b.seek/heapChunk), int(b.seek%heapChunk)
	end := min(int64(heapChunk), b.size-int64(i)*heapChunk)
	m := copy(dst, b.chunks[i][off:end])
	b.seek += int64(m)
	return m, nil
}

func (b *heapPageBuffer) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		b.seek = offset
	case io.SeekCurrent:
		b.seek += offset
	case io.SeekEnd:
		b.seek = b.size + offset
	}
	b.seek = max(0, min(b.seek, b.size))
	return b.seek, nil
}
