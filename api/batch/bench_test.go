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
