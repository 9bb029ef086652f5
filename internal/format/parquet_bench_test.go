package format

import (
	"fmt"
	"io"
	"testing"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/cputime"
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
	for _, mode := range []string{"parse", "checked"} {
		b.Run(mode, func(b *testing.B) {
			pages := NewPageCodecs(1)
			vals := make([]streamconf.Value, len(benchSchema.Fields))
			b.ReportAllocs()
			n := 0
			cpu0 := cputime.Used()
			for b.Loop() {
				pw, err := NewParquetWriter(io.Discard, Encoding{Format: "parquet", Schema: benchSchema}, pages)
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
