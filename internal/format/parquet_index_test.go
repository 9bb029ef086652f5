package format

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// TestParquetWriterPageIndex: pages cut after a batch of rows, not after
// a row, still agree with the page index DuckDB filters by: each page's
// first row, null count and bounds are the index's.
func TestParquetWriterPageIndex(t *testing.T) {
	for _, build := range []string{"batched", "reference"} {
		recs := diffRecords(diffSchema, 20000, 77)
		check := diffSchema.NewChecker(true)
		var acc [][]byte
		for _, r := range recs {
			if json.Valid(r) && utf8.Valid(r) && check.Check(r) == nil {
				acc = append(acc, r)
			}
		}
		var data []byte
		if build == "reference" {
			data = refParquet(t, diffSchema, acc, 16<<20)
		} else {
			var file bytes.Buffer
			pw, _ := NewParquetWriter(&file, Encoding{Format: "parquet", Schema: diffSchema, RowGroupBytes: 16 << 20}, nil)
			for _, r := range acc {
				if err := pw.WriteRecord(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := pw.Close(); err != nil {
				t.Fatal(err)
			}
			data = file.Bytes()
		}
		f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		maxPages := 0
		for g, rg := range f.RowGroups() {
			for c, cc := range rg.ColumnChunks() {
				ci, err := cc.ColumnIndex()
				if err != nil {
					t.Fatal(err)
				}
				oi, err := cc.OffsetIndex()
				if err != nil {
					t.Fatal(err)
				}
				pages := cc.Pages()
				var row int64
				for p := 0; ; p++ {
					pg, err := pages.ReadPage()
					if err != nil {
						if p != ci.NumPages() || p != oi.NumPages() {
							t.Fatalf("%s rg %d col %d: %d pages, index %d/%d", build, g, c, p, ci.NumPages(), oi.NumPages())
						}
						break
					}
					if oi.FirstRowIndex(p) != row {
						t.Fatalf("%s rg %d col %d page %d: first row %d, index %d", build, g, c, p, row, oi.FirstRowIndex(p))
					}
					if pg.NumNulls() != ci.NullCount(p) {
						t.Fatalf("%s rg %d col %d page %d: nulls %d, index %d", build, g, c, p, pg.NumNulls(), ci.NullCount(p))
					}
					mn, mx, ok := pg.Bounds()
					if ok && (parquet.CompareNullsLast(pg.Type().Compare)(mn, ci.MinValue(p)) != 0 || parquet.CompareNullsLast(pg.Type().Compare)(mx, ci.MaxValue(p)) != 0) {
						if pg.Type().Kind() != parquet.ByteArray { // byte arrays may be truncated
							t.Fatalf("%s rg %d col %d page %d: bounds %v %v, index %v %v", build, g, c, p, mn, mx, ci.MinValue(p), ci.MaxValue(p))
						}
					}
					row += pg.NumRows()
					parquet.Release(pg)
				}
				pages.Close()
				maxPages = max(maxPages, ci.NumPages())
				if row != rg.NumRows() {
					t.Fatalf("%s rg %d col %d: %d rows in pages, %d in group", build, g, c, row, rg.NumRows())
				}
			}
		}
		if maxPages < 2 {
			t.Fatalf("%s: no column chunk of more than one page: the test covers no page cut", build)
		}
	}
}
