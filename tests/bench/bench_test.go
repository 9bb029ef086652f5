package main

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBodiesAreValidRecordsOfTheRightSize(t *testing.T) {
	for _, s := range scenarios {
		b := body(s, producerID(7))
		if len(b) != s.Records*s.RecordBytes {
			t.Errorf("%s: body is %d bytes, want %d", s.Name, len(b), s.Records*s.RecordBytes)
		}
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		if len(lines) != s.Records {
			t.Fatalf("%s: %d lines, want %d", s.Name, len(lines), s.Records)
		}
		for i, l := range lines {
			if len(l)+1 != s.RecordBytes || !json.Valid(l) {
				t.Fatalf("%s: line %d (%d bytes) invalid: %s", s.Name, i+1, len(l), l)
			}
		}
	}
}

func TestQuantileAndMedian(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(v, 0.5); q != 5 {
		t.Errorf("p50 = %v, want 5", q)
	}
	if q := quantile(v, 0.99); q != 10 {
		t.Errorf("p99 = %v, want 10", q)
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("quantile of nothing should be NaN")
	}
	if m := median([]float64{3, 1, math.NaN(), 2, 10}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}

func TestHistQuantile(t *testing.T) {
	text := `# HELP x_seconds x
# TYPE x_seconds histogram
x_seconds_bucket{le="0.1"} 0
x_seconds_bucket{le="0.2"} 50
x_seconds_bucket{le="0.4"} 100
x_seconds_bucket{le="+Inf"} 100
x_seconds_sum 20
x_seconds_count 100
other{a="b"} 3
other{a="c"} 4
`
	ss := parseProm(text)
	if q := histQuantile(ss, "x_seconds", 0.5); math.Abs(q-0.2) > 1e-9 {
		t.Errorf("p50 = %v, want 0.2", q)
	}
	if q := histQuantile(ss, "x_seconds", 0.75); math.Abs(q-0.3) > 1e-9 {
		t.Errorf("p75 = %v, want 0.3", q)
	}
	if s := promSum(ss, "other"); s != 7 {
		t.Errorf("sum = %v, want 7", s)
	}
}

func TestBaselineAppendsEachBody(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	srv := httptest.NewServer(newBaselineHandler(f, true))
	defer srv.Close()
	for _, b := range []string{"a\n", "b\n"} {
		resp, err := http.Post(srv.URL+"/v1/streams/s/records", "text/plain", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var wr struct {
			Bytes int `json:"bytes"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&wr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || wr.Bytes != len(b) {
			t.Fatalf("status %d bytes %d", resp.StatusCode, wr.Bytes)
		}
	}
	got, _ := os.ReadFile(path)
	if string(got) != "a\nb\n" {
		t.Errorf("file holds %q", got)
	}
}

func TestWriteJSONTurnsNaNIntoNull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	r := &report{Summary: []summaryRow{{Scenario: "x", CkptP50ms: math.NaN(), RecordsPerSec: 3}}}
	if err := writeJSON(path, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"checkpoint_p50_ms": null`)) || !bytes.Contains(b, []byte(`"records_per_s": 3`)) {
		t.Errorf("JSON:\n%s", b)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "10.0.0.1:80": false, "example.com:80": false} {
		if got := isLoopbackHost(addr); got != want {
			t.Errorf("isLoopbackHost(%q) = %v", addr, got)
		}
	}
}

func TestMeasureListCountsEntries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/producers":
			_, _ = w.Write([]byte(`{"producers":[{"producer":"a"},{"producer":"b"},{"producer":"c"}],"next":"c"}`))
		default:
			_, _ = w.Write([]byte(`<html>x</html>`))
		}
	}))
	defer srv.Close()
	hc := plainClient()
	for _, tc := range []struct {
		url   string
		items int
		bytes int
	}{
		{"/v1/producers", 3, 77},
		{"/ui/", -1, 14},
	} {
		l := measureList(t.Context(), hc, srv.URL, tc.url)
		if l.Status != http.StatusOK || l.Items != tc.items || l.Bytes != tc.bytes {
			t.Errorf("%s: status %d, %d items, %d bytes; want 200, %d, %d", tc.url, l.Status, l.Items, l.Bytes, tc.items, tc.bytes)
		}
	}
}
