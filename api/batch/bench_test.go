package batch_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/eosink/eosink/api/batch"
)

// benchRecords returns n JSON records of exactly size bytes each, without
// their line ends.
func benchRecords(n, size int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		head := fmt.Sprintf(`{"id":%d,"ts":"2026-11-29T09:00:00.000Z","user":{"name":"ünïcode ✓","tags":["a","b"]},"n":[1,2.5,-3e2,true,null],"msg":"`, i)
		recs[i] = []byte(head + strings.Repeat("x", size-len(head)-2) + `"}`)
	}
	return recs
}

func benchParse(b *testing.B, ct string, body []byte) {
	b.Helper()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.Parse(ct, body, batch.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy is the baseline: appending the raw body to a buffer, which
// is what storing a batch costs at least.
func BenchmarkCopy(b *testing.B) {
	body := bytes.Join(benchRecords(100, 1024), []byte("\n"))
	dst := make([]byte, 0, len(body))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		dst = append(dst[:0], body...)
	}
}

func BenchmarkParseNDJSON(b *testing.B) {
	recs := benchRecords(100, 1024)
	b.Run("lf", func(b *testing.B) { // Data aliases the body
		benchParse(b, "application/x-ndjson", append(bytes.Join(recs, []byte("\n")), '\n'))
	})
	b.Run("crlf", func(b *testing.B) { // Data is a copy
		benchParse(b, "application/x-ndjson", append(bytes.Join(recs, []byte("\r\n")), "\r\n"...))
	})
}

// BenchmarkParseNDJSONSmall is the small-record load of issue 26: 1000
// records of 200 bytes, mostly structure (keys, numbers, nesting).
func BenchmarkParseNDJSONSmall(b *testing.B) {
	var body []byte
	for i := range 1000 {
		head := fmt.Sprintf(`{"ts":"2026-11-29T09:%02d:%02d.%03dZ","producer":"bench-p1","i":%d,"event":"page_view","user":{"id":%d,"country":"DE","premium":%t},"latency_ms":%d.%d,"tags":["web","eu"],"pad":"`,
			(i/60)%60, i%60, i%1000, i, 100000+i*7919%900000, i%3 == 0, i%500, i%10)
		body = append(body, head...)
		body = append(body, strings.Repeat("x", 200-len(head)-3)...)
		body = append(body, "\"}\n"...)
	}
	benchParse(b, "application/x-ndjson", body)
}

func BenchmarkParseText(b *testing.B) {
	recs := benchRecords(100, 1024)
	b.Run("lf", func(b *testing.B) {
		benchParse(b, "text/plain", append(bytes.Join(recs, []byte("\n")), '\n'))
	})
	b.Run("crlf", func(b *testing.B) {
		benchParse(b, "text/plain", append(bytes.Join(recs, []byte("\r\n")), "\r\n"...))
	})
}

func BenchmarkParseArray(b *testing.B) {
	recs := benchRecords(100, 1024)
	b.Run("compact", func(b *testing.B) {
		benchParse(b, "application/json", append(append([]byte("["), bytes.Join(recs, []byte(","))...), ']'))
	})
	b.Run("pretty", func(b *testing.B) {
		benchParse(b, "application/json", append(append([]byte("[\n  "), bytes.Join(recs, []byte(",\n  "))...), "\n]\n"...))
	})
}
