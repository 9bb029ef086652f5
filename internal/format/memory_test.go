package format

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/eosink/eosink/internal/testing/heap"
	"github.com/eosink/eosink/internal/testing/orders"
)

// The memory of a Parquet encode is bounded by its row group size, not by
// the file's size: measured (live heap after full GCs) each time a row
// group is complete in memory, it stays under RowGroupBytes + 8 MiB, and
// it does not grow over the row groups of a 24 MiB file. The writer keeps a
// row group as compressed pages plus one uncompressed page buffer per
// column; measured here: ~2 MiB for 1 MiB groups, ~3.5 MiB for 8 MiB,
// ~5 MiB for 16 MiB.
func TestParquetMemoryBound(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("encodes 24 MiB four times; memory means nothing under the race detector")
	}
	src := filepath.Join(t.TempDir(), "m.ndjson")
	var all []byte
	for _, r := range orders.Records(t, 5, 330000) { // ~24 MiB, each record its own
		all = append(append(all, r...), '\n')
	}
	if err := os.WriteFile(src, all, 0o644); err != nil {
		t.Fatal(err)
	}
	srcBytes := int64(len(all))
	all = nil
	for i, group := range []int64{1 << 20, 1 << 20, DefaultRowGroupBytes, 16 << 20} {
		base := heap.Live()
		var at []int64 // live heap above base at each full row group
		enc := Encoding{Format: "parquet", Schema: orders.Schema, RowGroupBytes: group}
		enc.beforeRowGroup = func() { at = append(at, heap.Live()-base) }
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Encode(io.Discard, bufio.NewReaderSize(in, encodeBufferSize), enc)
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			continue // warm-up: parquet-go and zstd keep pools across files
		}
		full := at[:len(at)-1] // the last is the partial group before Close
		if want := int(srcBytes / group); len(full) != want {
			t.Fatalf("row groups of %d MiB: %d full groups, want %d", group>>20, len(full), want)
		}
		lo, hi := slices.Min(full), slices.Max(full)
		t.Logf("source %d MiB, row groups of %d MiB of source: %d groups, live heap +%.1f..+%.1f MiB",
			srcBytes>>20, group>>20, len(full), float64(lo)/(1<<20), float64(hi)/(1<<20))
		if limit := group + 8<<20; hi > limit {
			t.Errorf("row groups of %d MiB: live heap +%d bytes, want at most %d", group>>20, hi, limit)
		}
		if len(full) > 10 && hi-lo > 4<<20 {
			t.Errorf("row groups of %d MiB: live heap grew from +%d to +%d bytes over %d row groups", group>>20, lo, hi, len(full))
		}
	}
}
