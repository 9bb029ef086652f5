package format

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/heap"
)

// compactIndexes changes no byte of a file: for each codec, row groups of
// several sizes (a row group of a few pages, many, several per file),
// strings that repeat and that don't, a column with null pages (producer
// is absent from every other record of a run), and a file with no records.
func TestParquetCompactIndexesSameBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var recs [][]byte
	for i := range 6000 {
		switch {
		case i%3 == 0:
			recs = append(recs, benchRecord(i))
		case i >= 2000 && i < 3000:
			recs = append(recs, fmt.Appendf(nil, `{"ts":"2026-11-29T09:00:00Z","i":%d}`, i)) // nulls: whole null pages
		default:
			recs = append(recs, webLogRecord(r, i))
		}
	}
	for _, c := range []string{"", streamconf.CompressionSnappy, streamconf.CompressionNone} {
		for _, group := range []int64{64 << 10, 1 << 20, DefaultRowGroupBytes} {
			for _, n := range []int{0, 1, len(recs)} {
				e := Encoding{Format: "parquet", Schema: benchSchema, Compression: c, RowGroupBytes: group}
				noCompactIndexes = true
				want := encodeWith(t, recs[:n], e, nil)
				noCompactIndexes = false
				got := encodeWith(t, recs[:n], e, nil)
				if !bytes.Equal(got, want) {
					t.Fatalf("codec %q, row groups of %d, %d records: %d bytes with compacted indexes, %d without, not the same", c, group, n, len(got), len(want))
				}
			}
		}
	}
}

// A file's heap does not grow by its row groups' page bounds, which
// parquet-go keeps whole until Close: 12 row groups of records whose pad
// is a 16 KiB string (so a page's min and max are 32 KiB, ~1 MiB per row
// group) leave the live heap after the 12th row group within 2 MiB of the
// one after the 2nd. Without compactIndexes it grows ~10 MiB. (With the
// load harness's 1 KiB strings it is ~50 KiB a row group, under the
// noise of parquet-go's pools here.)
func TestParquetIndexesHeapPerRowGroup(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("encodes 96 MiB; memory means nothing under the race detector")
	}
	r := rand.New(rand.NewPCG(7, 8))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	pad := make([]byte, 16<<10)
	rec := func(i int) []byte {
		for j := range pad {
			pad[j] = alphabet[r.IntN(len(alphabet))]
		}
		return fmt.Appendf(nil, `{"ts":"2026-11-29T09:00:00Z","i":%d,"pad":"%s"}`, i, pad)
	}
	for _, off := range []bool{true, false} {
		noCompactIndexes = off
		var at []int64
		e := Encoding{Format: "parquet", Schema: benchSchema}
		e.beforeRowGroup = func() { at = append(at, heap.Live()) }
		pw, err := NewParquetWriter(io.Discard, e, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 512 * 12 {
			if err := pw.WriteRecord(rec(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
		noCompactIndexes = false
		if len(at) < 12 {
			t.Fatalf("%d row groups, want 12 or more", len(at))
		}
		growth := at[11] - at[1] // before the 12th row group's write, against before the 2nd's
		t.Logf("compaction off=%v: live heap %+d bytes from the 2nd row group to the 12th", off, growth)
		if !off && growth > 2<<20 {
			t.Errorf("live heap grew %d bytes over 10 row groups, want at most 2 MiB", growth)
		}
	}
}
