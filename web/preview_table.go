package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/eosink/eosink/internal/format"
)

// Previews of encoded files (DESIGN.md "Streams"): zstd NDJSON is
// decompressed like gzip (previewCompressed bytes at most, a bounded
// window), and a Parquet file shows its first rows as a table, decoded by
// internal/format's reader.

const (
	// previewZstdWindow bounds the window a zstd file may ask the preview
	// decoder for (eosink writes 1 MiB windows).
	previewZstdWindow = 8 << 20
	// previewRows and previewCell bound a Parquet preview.
	previewRows = 20
	previewCell = 200
)

// previewTable is the first rows of a Parquet file: the columns in the
// order first seen, and each row's values as JSON text ("" when null).
type previewTable struct {
	Columns []string
	Rows    [][]string
}

// readParquetPreview reads the first rows of a Parquet file. It needs
// random access: the file as opened (a local file, an S3 object) must be
// an io.ReaderAt and an io.Seeker (for its size).
func readParquetPreview(ctx context.Context, r io.Reader, name string) (preview, error) {
	ra, ok1 := r.(io.ReaderAt)
	sk, ok2 := r.(io.Seeker)
	if !ok1 || !ok2 {
		return preview{Note: "This Parquet file can't be read in place here; download it to read it."}, nil
	}
	size, err := sk.Seek(0, io.SeekEnd)
	if err != nil {
		return preview{}, err
	}
	recs, err := format.Preview(ra, size, name, previewRows+1, previewBytes)
	if errors.Is(err, format.ErrCorrupt) {
		return preview{Note: "This Parquet file does not decode."}, nil
	}
	if errors.Is(err, format.ErrTooLargeToPreview) {
		return preview{Note: "This Parquet file's pages are too large to preview; download it to read it."}, nil
	}
	if err != nil {
		return preview{}, err
	}
	if err := ctx.Err(); err != nil {
		return preview{}, err
	}
	p := preview{Table: &previewTable{}}
	if len(recs) > previewRows {
		recs, p.More = recs[:previewRows], true
	}
	col := map[string]int{}
	for _, rec := range recs {
		keys, vals, ok := objectMembers(rec)
		if !ok {
			return preview{Note: "This Parquet file holds rows that can't be shown."}, nil
		}
		row := make([]string, len(p.Table.Columns), len(p.Table.Columns)+len(keys))
		for i, k := range keys {
			j, seen := col[k]
			if !seen {
				j = len(p.Table.Columns)
				col[k] = j
				p.Table.Columns = append(p.Table.Columns, k)
				row = append(row, "")
			}
			row[j] = cell(vals[i])
		}
		p.Table.Rows = append(p.Table.Rows, row)
	}
	for i := range p.Table.Rows { // rows read before a column appeared
		for len(p.Table.Rows[i]) < len(p.Table.Columns) {
			p.Table.Rows[i] = append(p.Table.Rows[i], "")
		}
	}
	return p, nil
}

// objectMembers splits a compact JSON object into its keys and raw values, in order.
func objectMembers(rec []byte) (keys []string, vals []json.RawMessage, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(rec))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, true
}

// cell shows a value: strings without their quotes, others as JSON; cut
// to previewCell bytes.
func cell(v json.RawMessage) string {
	s := string(v)
	var str string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &str) == nil {
		s = str
	}
	if len(s) > previewCell {
		s = strings.ToValidUTF8(s[:previewCell], "") + "…"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
