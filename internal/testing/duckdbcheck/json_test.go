//go:build cgo

package duckdbcheck

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
)

// TestDuckDBReadsEveryAcceptedJSONValue: a json field's value is written
// as Parquet's JSON type, which DuckDB parses when it reads the column. A
// value with a \u escape of half a UTF-16 surrogate pair is valid JSON
// grammar, but DuckDB refuses it — and with it every query of the file
// (SELECT * over a partition's glob). Every value the Parquet check
// accepts must read back; the others must be refused at write time.
func TestDuckDBReadsEveryAcceptedJSONValue(t *testing.T) {
	schema := &streamconf.Schema{Fields: []streamconf.Field{
		{Name: "id", Type: streamconf.TypeInt64, Required: true},
		{Name: "j", Type: streamconf.TypeJSON},
	}}
	check := schema.NewChecker(true)
	db := Open(t)
	d := newDest(t)
	accepted := 0
	for i, v := range []string{`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"x\ud800"`, `{"\ud800":1}`, `["\uDBFF\\uDC00"]`,
		`"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\\ud800"`, `"\u00e9\u0000"`, `1e400`, `-0`, `{"k":1,"k":2}`} {
		rec := fmt.Sprintf(`{"id":%d,"j":%s}`, i, v)
		if err := check.Check([]byte(rec)); err != nil {
			t.Logf("refused %s: %v", rec, err)
			continue
		}
		accepted++
		final := filepath.Join(d.files, fmt.Sprintf("f%d.parquet", i))
		if err := durable.MkdirAll(d.fs, d.files); err != nil {
			t.Fatal(err)
		}
		d.writeFile(t, final, [][]byte{[]byte(rec)}, format.Encoding{Format: "parquet", Schema: schema})
		var got string
		if err := db.QueryRowContext(t.Context(), fmt.Sprintf("SELECT CAST(j AS VARCHAR) FROM '%s'", final)).Scan(&got); err != nil {
			t.Errorf("accepted %s, and DuckDB can't read its file: %v", rec, err)
			continue
		}
		if got != v {
			t.Errorf("accepted %s, DuckDB reads j %s", rec, got)
		}
	}
	if accepted < 7 {
		t.Fatalf("only %d values accepted", accepted)
	}
}
