package staging

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/testing/cputime"
	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/spf13/afero"
)

// benchSource stages about size bytes of order records once per benchmark.
func benchSource(b *testing.B, fs afero.Fs, name string, size int) Summary {
	b.Helper()
	// Distinct records: repeating a few would let zstd's window find whole
	// repeats and flatter it against per-flush frames.
	return stage(b, fs, name, orders.Records(b, 42, size/100))
}

// benchDir is a directory on tmpfs when there is one, so that Encode's
// fsync measures nothing but the encoding.
func benchDir(b *testing.B) string {
	b.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "eosink-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// benchEncodings are the encodings the benchmarks measure, by
// sub-benchmark name; arriving: BenchmarkCreateEncoded measures it too.
var benchEncodings = []struct {
	name     string
	enc      Encoding
	arriving bool
}{
	{"plain", Encoding{Format: "ndjson", Compression: "none"}, true},
	{"gzip", Encoding{Format: "ndjson", Compression: "gzip"}, false},
	{"zstd", Encoding{Format: "ndjson", Compression: "zstd"}, true},
	{"parquet-zstd", Encoding{Format: "parquet", Compression: "zstd", Schema: orders.Schema}, true},
	{"parquet-snappy", Encoding{Format: "parquet", Compression: "snappy", Schema: orders.Schema}, false},
}

// BenchmarkEncode measures Encode at pre-commit: MB/s of source records
// (wall), CPU ns per record and CPU MB/s (user+system, which a loaded
// machine distorts less), and out/in, the output's size over the source's.
//
//	go test -run XXX -bench BenchmarkEncode -count 5 ./staging/
func BenchmarkEncode(b *testing.B) {
	for _, bc := range benchEncodings {
		b.Run(bc.name, func(b *testing.B) {
			fs := afero.NewBasePathFs(afero.NewOsFs(), benchDir(b))
			src := benchSource(b, fs, "b.ndjson", 8<<20)
			dst := EncodedName(src.Temp)
			b.SetBytes(src.Bytes)
			b.ReportAllocs()
			var out Summary
			cpu0 := cputime.Used()
			for b.Loop() {
				var err error
				if out, err = Encode(fs, src, dst, bc.enc); err != nil {
					b.Fatal(err)
				}
				if err := fs.Remove(dst); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cputime.Used()-cpu0, src)
			b.ReportMetric(float64(out.Bytes)/float64(src.Bytes), "out/in")
		})
	}
}

// BenchmarkIngestFrames measures the alternative to re-encoding at
// pre-commit: compressing each flush of the Txn buffer (DefaultBufferSize)
// as its own zstd frame or gzip member at ingest, which concatenate into a
// valid file. Same metrics as BenchmarkEncode; this CPU would be spent on
// the write path.
func BenchmarkIngestFrames(b *testing.B) {
	fs := afero.NewMemMapFs()
	src := benchSource(b, fs, "b.ndjson", 8<<20)
	data, err := afero.ReadFile(fs, src.Temp)
	if err != nil {
		b.Fatal(err)
	}
	// 1 MiB: internal/format's zstd window.
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(true))
	if err != nil {
		b.Fatal(err)
	}
	gw, err := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		frame func(dst *bytes.Buffer, p []byte)
	}{
		{"zstd", func(dst *bytes.Buffer, p []byte) { dst.Write(zw.EncodeAll(p, nil)) }},
		{"gzip", func(dst *bytes.Buffer, p []byte) {
			gw.Reset(dst)
			_, _ = gw.Write(p)
			_ = gw.Close()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			var out bytes.Buffer
			cpu0 := cputime.Used()
			for b.Loop() {
				out.Reset()
				for p := data; len(p) > 0; {
					n := min(len(p), DefaultBufferSize)
					bc.frame(&out, p[:n])
					p = p[n:]
				}
			}
			if n, err := format.Count(bytes.NewReader(out.Bytes()), int64(out.Len()), "b.ndjson."+map[string]string{"zstd": "zst", "gzip": "gz"}[bc.name]); err != nil || n != src.Records {
				b.Fatalf("frames decode to %d records, %v", n, err)
			}
			reportCPU(b, cputime.Used()-cpu0, src)
			b.ReportMetric(float64(out.Len())/float64(len(data)), "out/in")
		})
	}
}

// reportCPU reports CPU time per record and source MB per CPU second.
func reportCPU(b *testing.B, cpu time.Duration, src Summary) {
	b.Helper()
	if cpu <= 0 {
		return
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(src.Records), "cpu-ns/record")
	b.ReportMetric(float64(src.Bytes)*float64(b.N)/cpu.Seconds()/1e6, "cpu-MB/s")
}

// BenchmarkCreateEncoded measures encoding as batches arrive: appends of
// 100 records (about 10 KiB) to a CreateEncoded Txn with background steps,
// then PreCommit. Same metrics as BenchmarkEncode, for the whole.
//
//	go test -run XXX -bench BenchmarkCreateEncoded -count 5 ./staging/
func BenchmarkCreateEncoded(b *testing.B) {
	for _, bc := range benchEncodings {
		if !bc.arriving {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			fs := afero.NewBasePathFs(afero.NewOsFs(), benchDir(b))
			recs := orders.Records(b, 42, (8<<20)/100)
			batches := orders.Batches(recs, 100)
			var size int64
			for _, batch := range batches {
				size += int64(len(batch))
			}
			es := NewEncoders(2, 0)
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := cputime.Used()
			for b.Loop() {
				tx, err := CreateEncoded(fs, "/b.inprogress", 0, bc.enc, es)
				if err != nil {
					b.Fatal(err)
				}
				for i, batch := range batches {
					if err := tx.Append(batch, bytes.Count(batch, []byte{'\n'}), "p", int64(i)); err != nil {
						b.Fatal(err)
					}
				}
				sum, err := tx.PreCommit()
				if err != nil {
					b.Fatal(err)
				}
				if err := tx.Abort(); err != nil {
					b.Fatal(err)
				}
				_ = sum
			}
			reportCPU(b, cputime.Used()-cpu0, Summary{Bytes: size, Records: int64(len(recs))})
		})
	}
}
