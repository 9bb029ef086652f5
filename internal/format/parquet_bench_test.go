package format

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/cputime"
	"github.com/klauspost/compress/zstd"
)

// benchSchema and benchRecord are the load harness's Parquet stream
// (tests/bench): 8 fields, 1 KiB records, most of it one string.
var benchSchema = &streamconf.Schema{Fields: []streamconf.Field{
	{Name: "ts", Type: streamconf.TypeTimestamp, Required: true},
	{Name: "producer", Type: streamconf.TypeString},
	{Name: "i", Type: streamconf.TypeInt64},
	{Name: "event", Type: streamconf.TypeString},
	{Name: "user", Type: streamconf.TypeJSON},
	{Name: "latency_ms", Type: streamconf.TypeDouble},
	{Name: "tags", Type: streamconf.TypeJSON},
	{Name: "pad", Type: streamconf.TypeString},
}}

func benchRecord(i int) []byte {
	b := fmt.Appendf(nil, `{"ts":"2026-11-29T09:%02d:%02d.%03dZ","producer":"bench-p%d","i":%d,"event":"page_view","user":{"id":%d,"country":"DE","premium":%t},"latency_ms":%d.%d,"tags":["web","eu"],"pad":"`,
		(i/60)%60, i%60, i%1000, i%8, i, 100000+i*7919%900000, i%3 == 0, i%500, i%10)
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	x := uint32(i*2654435761) | 1
	for len(b) < 1021 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b = append(b, alphabet[x%uint32(len(alphabet))])
	}
	return append(b, `"}`...)
}

// BenchmarkParquetWriter measures ParquetWriter on the load harness's
// records (zstd pages): ns and bytes allocated per record, parsing each
// record (WriteRecord) or given the write path's checked values
// (WriteChecked, as a Parquet stream's encoder is since issue 26); also
// CPU ns per record (user+system, which a loaded machine distorts less
// than wall time).
//
//	go test -run XXX -bench BenchmarkParquetWriter -count 5 ./internal/format/
func BenchmarkParquetWriter(b *testing.B) {
	recs := make([][]byte, 4096)
	checked := streamconf.NewChecked(benchSchema, len(recs))
	chk := benchSchema.NewChecker(true)
	for i := range recs {
		recs[i] = benchRecord(i)
		vals, err := chk.Fields(recs[i])
		if err != nil || !checked.Add(recs[i], vals) {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"parse", "checked", "checked-pagefile"} {
		b.Run(mode, func(b *testing.B) {
			var pf PageFile // checked-pagefile: the pages wait in a file (NewParquetWriterPages)
			if mode == "checked-pagefile" {
				f, err := os.Create(filepath.Join(b.TempDir(), "pages"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				pf = f
			}
			pages := NewPageCodecs(1)
			vals := make([]streamconf.Value, len(benchSchema.Fields))
			b.ReportAllocs()
			n := 0
			cpu0 := cputime.Used()
			for b.Loop() {
				pw, err := NewParquetWriterPages(io.Discard, Encoding{Format: "parquet", Schema: benchSchema}, pages, pf)
				if err != nil {
					b.Fatal(err)
				}
				for range 16384 { // 16 MiB: two row groups
					i := n % len(recs)
					if mode == "parse" {
						err = pw.WriteRecord(recs[i])
					} else if checked.Value(i, recs[i], vals) {
						err = pw.WriteChecked(recs[i], vals)
					} else {
						b.Fatal("no values")
					}
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				if err := pw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
			if cpu := cputime.Used() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/record")
			}
		})
	}
}

// webLogRecord is a record of the load harness's schema whose strings
// repeat as web logs' do (paths, user agents, countries, status codes),
// with a random session key: data that compresses well, where the
// harness's random padding does not.
func webLogRecord(r *rand.Rand, i int) []byte {
	paths := []string{"/", "/cart", "/checkout/payment", "/api/v2/items?page=", "/search?q=shoes&sort=price", "/account/orders/", "/static/app.js"}
	agents := []string{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
		"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0", "curl/8.4.0"}
	events := []string{"page_view", "click", "add_to_cart", "purchase", "login", "logout"}
	countries := []string{"DE", "FR", "US", "GB", "NL", "PL", "ES", "IT"}
	return fmt.Appendf(nil, `{"ts":"2026-11-29T09:%02d:%02d.%03dZ","producer":"svc-%d","i":%d,"event":%q,"user":{"id":%d,"country":%q,"premium":%t},"latency_ms":%d.%d,"tags":["web","%s"],"pad":"GET %s%d HTTP/1.1 ua=%s session=%016x ref=https://example.com%s status=%d bytes=%d"}`,
		(i/60)%60, i%60, i%1000, i%8, i, events[r.IntN(len(events))], r.IntN(100000), countries[r.IntN(len(countries))], r.IntN(5) == 0,
		r.IntN(900), r.IntN(10), countries[r.IntN(len(countries))], paths[r.IntN(len(paths))], r.IntN(50), agents[r.IntN(len(agents))], r.Uint64(),
		paths[r.IntN(len(paths))], []int{200, 200, 200, 304, 404, 500}[r.IntN(6)], r.IntN(100000))
}

// BenchmarkPageLevel compares zstd levels for Parquet pages (pageLevel):
// CPU per record of writing a whole file (parsing included, the same in
// every row) and the file's size against its records', on the harness's
// records and on web-log-like ones.
//
//	go test -run XXX -bench BenchmarkPageLevel -count 3 ./internal/format/
func BenchmarkPageLevel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	sets := map[string][][]byte{}
	for i := range 8192 { // a row group of each: 8 MiB
		sets["harness"] = append(sets["harness"], benchRecord(i))
	}
	for i := range 24 << 10 {
		sets["weblog"] = append(sets["weblog"], webLogRecord(r, i))
	}
	for _, set := range []string{"harness", "weblog"} {
		for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault} {
			b.Run(fmt.Sprintf("%s/%v", set, level), func(b *testing.B) {
				opts := append(pageOptions(1, pageWindow), zstd.WithEncoderLevel(level))
				z, err := newZstdPagesWith(1, opts)
				if err != nil {
					b.Fatal(err)
				}
				pages := NewPageCodecs(1)
				pages.codecs[""] = z
				var n, in, out int64
				cpu0 := cputime.Used()
				for b.Loop() {
					cw := &countingDiscard{}
					pw, err := NewParquetWriter(cw, Encoding{Format: "parquet", Schema: benchSchema}, pages)
					if err != nil {
						b.Fatal(err)
					}
					for _, rec := range sets[set] {
						if err := pw.WriteRecord(rec); err != nil {
							b.Fatal(err)
						}
						in += int64(len(rec)) + 1
						n++
					}
					if err := pw.Close(); err != nil {
						b.Fatal(err)
					}
					out += cw.n
				}
				if cpu := cputime.Used() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/record")
				}
				b.ReportMetric(float64(out)/float64(in), "out/in")
			})
		}
	}
}

type countingDiscard struct{ n int64 }

func (c *countingDiscard) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
