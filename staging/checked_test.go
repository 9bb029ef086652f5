package staging

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/spf13/afero"
)

// FuzzParquetEncodesChecked: every record the write path accepts for a
// Parquet stream (valid UTF-8 JSON that passes the strict schema check)
// encodes. A record the check passes but the encoder refuses would be
// accepted and then abort its checkpoint, every stream's batches with it
// (DESIGN.md "Streams": record content is untrusted).
func FuzzParquetEncodesChecked(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"region":"eu","ts":"2026-11-29T09:10:00Z"}`,
		`{"id":-9223372036854775808,"region":"\u00e9\ud800","amount":1e308,"paid":false,"ts":253402300799999,"meta":[{"a":null}]}`,
		`{"id":0,"region":"","ts":"0001-01-01T00:00:00.999999999+23:59","amount":-0,"meta":"\"x\""}`,
		`{"id":1,"region":"a\u0000b","ts":-62135596800000,"amount":null,"paid":null,"meta":null}`,
	} {
		f.Add([]byte(s))
	}
	check := orders.Schema.NewChecker(true)
	f.Fuzz(func(t *testing.T, rec []byte) {
		if !json.Valid(rec) || !utf8.Valid(rec) || check.Check(rec) != nil {
			return // refused at write time
		}
		for _, c := range rec {
			if c == '\n' {
				return // not one NDJSON line: compacted by the write path
			}
		}
		fs := afero.NewMemMapFs()
		tx, err := Create(fs, TempName("/s", "f.parquet"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Append(append(rec, '\n'), 1, "", 0); err != nil {
			t.Fatal(err)
		}
		src, err := tx.PreCommit()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Encode(fs, src, EncodedName(src.Temp), Encoding{Format: "parquet", Schema: orders.Schema}); err != nil {
			t.Fatalf("a record the write path accepts does not encode: %s: %v", rec, err)
		}
	})
}
