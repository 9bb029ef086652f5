package api

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// BenchmarkReadBody reads a 100 KiB body with a Content-Length, the
// size of the benchmarks' batches: once the pool is warm it is one
// pooled slice, read in place.
func BenchmarkReadBody(b *testing.B) {
	s := &Server{maxBody: DefaultMaxBody, inflight: &budget{limit: DefaultMaxInflightBody}}
	body := bytes.Repeat([]byte("x"), 100<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/streams/s/records", bytes.NewReader(body))
		got, release, err := s.readBody(httptest.NewRecorder(), r, "")
		if err != nil || len(got) != len(body) {
			b.Fatal(len(got), err)
		}
		release()
	}
}
