package format

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func TestMediaType(t *testing.T) {
	for name, want := range map[string]string{
		"a.parquet": "application/vnd.apache.parquet", "a.ndjson": "application/x-ndjson",
		"a.ndjson.gz": "application/gzip", "a.txt.zst": "application/zstd",
		"a.txt": "text/plain; charset=utf-8", "a.json": "application/json",
		"a.bin": "application/octet-stream", "a": "application/octet-stream",
	} {
		if got := MediaType(name); got != want {
			t.Errorf("MediaType(%q) = %q, want %q", name, got, want)
		}
	}
}

// Decompress reads gzip and zstd back, concatenated members and frames
// too, and a cut stream is ErrCorrupt, not a short file.
func TestDecompress(t *testing.T) {
	var gz, zs bytes.Buffer
	for range 2 {
		w := gzip.NewWriter(&gz)
		_, _ = w.Write([]byte("{\"a\":1}\n"))
		_ = w.Close()
		z, _ := zstd.NewWriter(&zs)
		_, _ = z.Write([]byte("{\"a\":1}\n"))
		_ = z.Close()
	}
	for name, data := range map[string][]byte{"f.ndjson.gz": gz.Bytes(), "f.ndjson.zst": zs.Bytes(), "f.ndjson": []byte("{\"a\":1}\n{\"a\":1}\n")} {
		r, err := Decompress(bytes.NewReader(data), name, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != "{\"a\":1}\n{\"a\":1}\n" {
			t.Errorf("%s: %q, %v", name, got, err)
		}
		_ = r.Close()
		if name == "f.ndjson" {
			continue
		}
		r, err = Decompress(bytes.NewReader(data[:len(data)-5]), name, 8<<20)
		if err == nil {
			_, err = io.ReadAll(r)
		}
		if !errors.Is(err, ErrCorrupt) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s cut: %v, want ErrCorrupt", name, err)
		}
	}
}
