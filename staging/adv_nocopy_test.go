package staging

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/klauspost/compress/zstd"
	"github.com/spf13/afero"
)

// TestAppendCallerBufferReused: batches of half the buffer or more at an
// empty buffer are written from the caller's bytes (no copy). The caller
// (the HTTP handler, whose body buffers are pooled) reuses its buffer as
// soon as Append returns: scribbling over it right after each Append must
// change nothing in the file, its CRC-32C or, for an encoded Txn, the
// encoded content.
func TestAppendCallerBufferReused(t *testing.T) {
	const bufSize = 1 << 10
	sizes := []int{bufSize / 2, bufSize/2 - 1, bufSize/2 + 1, bufSize - 1, bufSize, 3 * bufSize, 30, bufSize / 2, 700, 700, bufSize / 2}
	for _, enc := range []string{"plain-crash", "plain-os", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			var fs afero.Fs = faultfs.NewCrashFS()
			dir := "/s"
			if enc == "plain-os" {
				fs, dir = afero.NewOsFs(), t.TempDir()
			}
			if err := durable.MkdirAll(fs, dir); err != nil {
				t.Fatal(err)
			}
			name := TempName(dir, "part-a.ndjson")
			var tx *Txn
			var err error
			if enc == "zstd" {
				tx, err = CreateEncoded(fs, TempName(dir, "part-a.ndjson.zst"), bufSize, Encoding{Compression: "zstd"}, NewInlineEncoders(2<<10))
			} else {
				tx, err = Create(fs, name, bufSize)
			}
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			buf := make([]byte, 4*bufSize) // the caller's one reused buffer
			for i, n := range sizes {
				b := buf[:n]
				line := fmt.Sprintf("{\"i\":%d,\"p\":\"", i)
				copy(b, line+strings.Repeat(string(rune('a'+i)), n-len(line)-3)+"\"}\n")
				want.Write(b)
				if err := tx.Append(b, 1, "", 0); err != nil {
					t.Fatal(err)
				}
				for k := range b {
					b[k] = 'X' // the pooled buffer taken by another request
				}
			}
			sum, got := preCommitRead(t, fs, tx)
			// The CRC-32C is the file's: the encoded bytes for an encoded Txn.
			wantCRC := CRC32C(want.Bytes())
			if enc == "zstd" {
				wantCRC = CRC32C(got)
			}
			if sum.Records != int64(len(sizes)) || sum.CRC32C != wantCRC {
				t.Fatalf("summary %+v, want CRC %s", sum, wantCRC)
			}
			if enc == "zstd" {
				d, err := zstd.NewReader(bytes.NewReader(got))
				if err != nil {
					t.Fatal(err)
				}
				got, err = io.ReadAll(d)
				d.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("file holds %d bytes, %d X; want the %d bytes appended", len(got), bytes.Count(got, []byte("X")), want.Len())
			}
		})
	}
}
