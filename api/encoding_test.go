package api

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/enginetest"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

// TestContentEncodingDecodes: gzip and zstd bodies are stored decoded; the
// limits apply to the decoded size; a body that does not decode, truncated
// included, is 400 invalid_body and nothing of it is stored.
func TestContentEncodingDecodes(t *testing.T) {
	const limit = 64 << 10
	r := newRig(t, rigOpts{api: func(c *Config) { c.MaxBody = limit }})
	big := bytes.Repeat([]byte(`{"pad":"`+strings.Repeat("x", 1000)+`"}`+"\n"), limit/1000+10) // decodes over the limit
	tests := []struct {
		name   string
		enc    string
		body   func(marker string) []byte
		status int
		code   string
	}{
		{"gzip", "gzip", func(m string) []byte { return gzipped(t, []byte(`{"m":"`+m+`"}`+"\n")) }, http.StatusAccepted, ""},
		{"x-gzip", "x-gzip", func(m string) []byte { return gzipped(t, []byte(`{"m":"`+m+`"}`+"\n")) }, http.StatusAccepted, ""},
		{"zstd", "zstd", func(m string) []byte { return zstded(t, []byte(`{"m":"`+m+`"}`+"\n")) }, http.StatusAccepted, ""},
		{"gzip of two members", "gzip", func(m string) []byte {
			return append(gzipped(t, []byte(`{"m":"`+m+`"}`+"\n")), gzipped(t, []byte(`{"m":"`+m+`-2"}`+"\n"))...)
		}, http.StatusAccepted, ""},
		{"gzip truncated", "gzip", func(m string) []byte {
			g := gzipped(t, []byte(`{"m":"`+m+`"}`+"\n"+strings.Repeat(`{"a":1}`+"\n", 100)))
			return g[:len(g)-12]
		}, http.StatusBadRequest, "invalid_body"},
		{"zstd truncated", "zstd", func(m string) []byte {
			z := zstded(t, []byte(`{"m":"`+m+`"}`+"\n"+strings.Repeat(`{"a":1}`+"\n", 100)))
			return z[:len(z)-5]
		}, http.StatusBadRequest, "invalid_body"},
		{"gzip of garbage", "gzip", func(m string) []byte { return []byte(`{"m":"` + m + `"}` + "\n") }, http.StatusBadRequest, "invalid_body"},
		{"gzip over the limit decoded", "gzip", func(m string) []byte { return gzipped(t, append([]byte(`{"m":"`+m+`"}`+"\n"), big...)) }, http.StatusRequestEntityTooLarge, "too_large"},
		{"zstd over the limit decoded", "zstd", func(m string) []byte { return zstded(t, append([]byte(`{"m":"`+m+`"}`+"\n"), big...)) }, http.StatusRequestEntityTooLarge, "too_large"},
		{"gzip bad json inside", "gzip", func(m string) []byte { return gzipped(t, []byte(`{"m":"`+m+`"}`+"\nnot json\n")) }, http.StatusBadRequest, "invalid_json"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := fmt.Sprintf("ENC-%02d", i)
			rec := r.do("POST", "/v1/streams/s/records", string(tt.body(marker)), "Content-Type", "application/x-ndjson", "Content-Encoding", tt.enc)
			if tt.status == http.StatusAccepted {
				expectStatus(t, rec, tt.status)
			} else {
				expectError(t, rec, tt.status, tt.code)
			}
			r.checkpoint()
			hits := grep(t, r.base, `{"m":"`+marker+`"}`)
			if stored := len(hits) > 0; stored != (tt.status == http.StatusAccepted) {
				t.Fatalf("marker stored in %v; status %d", hits, rec.Code)
			}
		})
	}
}

// TestDecompressionBomb: a small body that inflates far beyond the limit
// is refused 413 without allocating more than about the limit.
func TestDecompressionBomb(t *testing.T) {
	const limit = 1 << 20
	r := newRig(t, rigOpts{api: func(c *Config) { c.MaxBody = limit }})
	zeros := make([]byte, 1<<20)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	for range 64 { // 64 MiB of zeros
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	bomb := buf.Bytes()
	zeros = nil
	for _, enc := range []string{"gzip", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			body := bomb
			if enc == "zstd" {
				zw, _ := zstd.NewWriter(nil)
				var zb bytes.Buffer
				zw.Reset(&zb)
				chunk := make([]byte, 1<<20)
				for range 64 {
					_, _ = zw.Write(chunk)
				}
				_ = zw.Close()
				body = zb.Bytes()
			}
			req := request("POST", "/v1/streams/s/records", string(body), "Content-Type", "text/plain", "Content-Encoding", enc)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rec := r.serve(req)
			runtime.ReadMemStats(&after)
			expectError(t, rec, http.StatusRequestEntityTooLarge, "too_large")
			bound := uint64(4 * limit)
			if enc == "zstd" {
				bound += 2 * zstdMaxWindow // its window, held against the budget
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > bound {
				t.Fatalf("allocated %d bytes for a %d-byte body that inflates to 64 MiB; limit %d, bound %d", got, len(body), limit, bound)
			}
			if testing.Verbose() {
				t.Logf("%s bomb of %d bytes: allocated %d bytes", enc, len(body), after.TotalAlloc-before.TotalAlloc)
			}
		})
	}
}

// TestIdempotencyKeyAnswers: the HTTP answers of keyed writes.
func TestIdempotencyKeyAnswers(t *testing.T) {
	r := newRig(t, rigOpts{})
	post := func(key, body string, hdr ...string) (int, ErrorResponse, WriteResponse) {
		t.Helper()
		h := append([]string{"Content-Type", "application/x-ndjson", "Idempotency-Key", key}, hdr...)
		rec := r.do("POST", "/v1/streams/s/records", body, h...)
		var e ErrorResponse
		var w WriteResponse
		if rec.Code >= 300 {
			e = decode[ErrorResponse](t, rec)
		} else {
			w = decode[WriteResponse](t, rec)
			if hdr := rec.Header().Get(CheckpointHeader); hdr != fmt.Sprint(w.Checkpoint) {
				t.Fatalf("%s %s, body checkpoint %d", CheckpointHeader, hdr, w.Checkpoint)
			}
		}
		return rec.Code, e, w
	}
	status, _, first := post("batch-1", `{"k":1}`+"\n")
	if status != http.StatusAccepted || first.Duplicate {
		t.Fatalf("first: %d %+v", status, first)
	}
	// The same body gzipped is the same decoded body: a duplicate.
	status, _, dup := post("batch-1", string(gzipped(t, []byte(`{"k":1}`+"\n"))), "Content-Encoding", "gzip")
	if status != http.StatusAccepted || !dup.Duplicate || dup.Committed || dup.Checkpoint != first.Checkpoint {
		t.Fatalf("retry before commit: %d %+v, want 202 duplicate in %d", status, dup, first.Checkpoint)
	}
	status, e, _ := post("batch-1", `{"k":2}`+"\n")
	if status != http.StatusUnprocessableEntity || e.Error != "idempotency_key_reused" {
		t.Fatalf("other body: %d %+v, want 422 idempotency_key_reused", status, e)
	}
	c := r.checkpoint()
	status, _, dup = post("batch-1", `{"k":1}`+"\n")
	if status != http.StatusOK || !dup.Duplicate || !dup.Committed || dup.Checkpoint != c.ID {
		t.Fatalf("retry after commit: %d %+v, want 200 duplicate in %d", status, dup, c.ID)
	}
	// wait=commit on a duplicate waits for its checkpoint (here: already committed).
	rec := r.do("POST", "/v1/streams/s/records?wait=commit", `{"k":1}`+"\n", "Content-Type", "application/x-ndjson", "Idempotency-Key", "batch-1")
	expectStatus(t, rec, http.StatusOK)
	if hits := grep(t, r.base, `{"k":1}`); len(hits) != 1 {
		t.Fatalf("keyed batch stored in %v, want once", hits)
	}
	for _, tc := range []struct {
		name string
		key  string
		hdr  []string
	}{
		{"empty", "", nil},
		{"256 characters", strings.Repeat("k", 256), nil},
		{"not ASCII", "clé", nil},
		{"control character", "a\x01b", nil},
		{"with producer headers", "k", []string{"Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0"}},
		{"twice", "k", []string{"Idempotency-Key", "k2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, e, _ := post(tc.key, `{"bad":1}`+"\n", tc.hdr...)
			if status != http.StatusBadRequest || e.Error != "invalid_producer_headers" {
				t.Fatalf("%d %+v, want 400 invalid_producer_headers", status, e)
			}
		})
	}
	status, _, w := post(strings.Repeat("k", 255), `{"k":3}`+"\n")
	if status != http.StatusAccepted || w.Duplicate {
		t.Fatalf("255-character key: %d %+v", status, w)
	}
}

// TestIdempotencyKeysScopedByToken: with tokens on, a key is the token's:
// another client sending the same key (squatting it, or by chance) is a
// batch of its own, stored, never refused as a reuse nor dropped as a
// duplicate; each token's retry is still its duplicate. Before, keys were
// per stream: the second client's batch was refused with 422.
func TestIdempotencyKeysScopedByToken(t *testing.T) {
	r := newRig(t, rigOpts{api: withAuth})
	post := func(token, body string) *httptest.ResponseRecorder {
		t.Helper()
		return r.do("POST", "/v1/streams/s/records", body, "Content-Type", "application/x-ndjson",
			"Idempotency-Key", "batch-1", "Authorization", "Bearer "+token)
	}
	if rec := post(enginetest.TokIngest, `{"who":"ingest"}`+"\n"); rec.Code != http.StatusAccepted {
		t.Fatalf("ingest token: %d %s", rec.Code, rec.Body)
	}
	rec := post(enginetest.TokAdmin, `{"who":"admin"}`+"\n")
	if rec.Code != http.StatusAccepted || decode[WriteResponse](t, rec).Duplicate {
		t.Fatalf("admin token, same key, its own body: %d %s, want 202 accepted as new", rec.Code, rec.Body)
	}
	for _, tok := range []string{enginetest.TokIngest, enginetest.TokAdmin} {
		who := map[string]string{enginetest.TokIngest: "ingest", enginetest.TokAdmin: "admin"}[tok]
		rec := post(tok, `{"who":"`+who+`"}`+"\n")
		if rec.Code != http.StatusAccepted || !decode[WriteResponse](t, rec).Duplicate {
			t.Fatalf("retry with the %s token: %d %s, want 202 duplicate", who, rec.Code, rec.Body)
		}
	}
	r.checkpoint()
	for _, who := range []string{"ingest", "admin"} {
		if hits := grep(t, r.base, `{"who":"`+who+`"}`); len(hits) != 1 {
			t.Fatalf("%s's batch stored in %v, want once", who, hits)
		}
	}
}
