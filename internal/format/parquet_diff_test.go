package format

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/testenv"
	"github.com/parquet-go/parquet-go"
)

// The ParquetWriter parses each record once (the schema check's values)
// and hands rows to the column writers in batches. These tests hold it to
// a reference that shares neither: encoding/json finds each field's raw
// value, the value is parsed again from it, and rows go to parquet-go's
// WriteRows one at a time (the encoder before batching). Both files must
// read back the same rows, value for value, and carry the same column
// statistics; every record the write path accepts must encode.

// diffSchema has every type, optional and required; wideDiffSchema is
// past smallSchema, where the checker looks keys up in a map.
var diffSchema = &streamconf.Schema{Fields: []streamconf.Field{
	{Name: "s", Type: streamconf.TypeString}, {Name: "rs", Type: streamconf.TypeString, Required: true},
	{Name: "i", Type: streamconf.TypeInt64}, {Name: "d", Type: streamconf.TypeDouble},
	{Name: "b", Type: streamconf.TypeBool}, {Name: "t", Type: streamconf.TypeTimestamp},
	{Name: "j", Type: streamconf.TypeJSON}, {Name: "ri", Type: streamconf.TypeInt64, Required: true},
}}

var wideDiffSchema = func() *streamconf.Schema {
	s := &streamconf.Schema{}
	for k := range 5 {
		for _, f := range diffSchema.Fields {
			f.Name = fmt.Sprintf("%s%d", f.Name, k)
			f.Required = f.Required && k == 0
			s.Fields = append(s.Fields, f)
		}
	}
	return s
}()

// Raw values by type, each one the check accepts or refuses for a reason
// worth covering: escapes, \u0000, surrogate pairs and lone surrogates,
// escapes at skipString's 16-byte edge, int64 and double edges, -0,
// exponents, times at the year range's ends and finer than µs.
var diffValues = map[streamconf.Type][]string{
	streamconf.TypeString: {`""`, `"a"`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u0000"`, `"a\u0000b"`, `"\u00e9"`, `"é"`,
		`"\ud83d\ude00"`, `"😀"`, `"\ud800"`, `"\udc00x"`, `"\u002F"`, `"0123456789abcde\""`, `"0123456789abcdef\""`,
		`"0123456789abcde\\"`, `"0123456789abcdef\\"`, `"0123456789abcdefg\\\"x"`, `"` + strings.Repeat(`\\`, 9) + `"`},
	streamconf.TypeInt64: {"0", "-0", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
		"-9223372036854775809", "1e3", "1.0", "1E0", "-1", "1.5", "10e-1", "-0.0", "1e18", "9.223372036854775807e18"},
	streamconf.TypeDouble: {"0", "-0", "-0.0", "1e308", "1.7976931348623157e308", "1.8e308", "4.9e-324", "1e-400",
		"123456789012345678901234567890", "0.1", "1E+2", "-1e-0", "9007199254740993", "-9223372036854775808"},
	streamconf.TypeBool: {"true", "false", "0", `"true"`},
	streamconf.TypeTimestamp: {`"2024-01-01T00:00:00Z"`, `"2024-01-01T00:00:00.123456789Z"`, `"2024-01-01T01:00:00+01:00"`,
		`"2024-01-01t00:00:00z"`, `"0001-01-01T00:00:00Z"`, `"0001-01-01T00:00:00+01:00"`, `"9999-12-31T23:59:59.999999999Z"`,
		`"9999-12-31T23:59:59-01:00"`, `"2024\u002d01-01T00:00:00Z"`, `"1969-12-31T23:59:59.9999995Z"`, "0", "-1",
		"-62135596800000", "253402300799999", "253402300800000", "1e3", "1.5", `"2024-02-30T00:00:00Z"`,
		`"1960-01-01T00:00:00.0000015Z"`},
	streamconf.TypeJSON: {`{}`, `[]`, `{"a":[1,2,{"b":null}]}`, `[ 1 , "x" ]`, `"s\"t"`, `1e400`, `-0`, `true`, `{"a":"\u0000"}`, `"\ud800"`},
}

// diffRecords makes n records of schema s, most of them accepted: fields
// in and out of order, absent, null, of the wrong kind, keys escaped or
// in the wrong case, twice, unknown keys, long strings with escapes.
func diffRecords(s *streamconf.Schema, n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	long := func() string {
		var b strings.Builder
		b.WriteByte('"')
		size := r.IntN(70)
		if r.IntN(300) == 0 {
			size = r.IntN(70000)
		}
		for b.Len() <= size {
			b.WriteString([]string{`\"`, `\\`, `\u00e9`, "é", `\n`, "a", "b", "c", "d", "e", "f", "g"}[r.IntN(12)])
		}
		b.WriteByte('"')
		return b.String()
	}
	// A record holds about two of the tables' values, the rest valid.
	nasty := max(len(s.Fields)/2, 2)
	val := func(t streamconf.Type) string {
		if r.IntN(12) == 0 {
			return "null"
		}
		if r.IntN(nasty) == 0 {
			if r.IntN(20) == 0 { // another type's value
				t = s.Fields[r.IntN(len(s.Fields))].Type
			}
			vs := diffValues[t]
			return vs[r.IntN(len(vs))]
		}
		switch t {
		case streamconf.TypeString:
			return long()
		case streamconf.TypeJSON:
			return `{"x":` + long() + `}`
		case streamconf.TypeInt64:
			return fmt.Sprint(r.Int64() - r.Int64())
		case streamconf.TypeDouble:
			return fmt.Sprint(r.NormFloat64() * 1e10)
		case streamconf.TypeBool:
			return fmt.Sprint(r.IntN(2) == 0)
		case streamconf.TypeTimestamp:
			return fmt.Sprint(r.Int64N(4e12) - 1e12)
		}
		return "null"
	}
	key := func(name string) string {
		switch r.IntN(20 * len(s.Fields)) {
		case 0:
			return fmt.Sprintf(`"\u%04x%s"`, name[0], name[1:])
		case 1:
			return `"` + strings.ToUpper(name) + `"`
		}
		return `"` + name + `"`
	}
	var recs [][]byte
	for range n {
		order := r.Perm(len(s.Fields))
		if r.IntN(2) == 0 {
			for i := range order {
				order[i] = i
			}
		}
		var parts []string
		for _, i := range order {
			f := s.Fields[i]
			if !f.Required && r.IntN(6) == 0 || f.Required && r.IntN(100) == 0 {
				continue
			}
			ws := ""
			if r.IntN(10) == 0 {
				ws = " \t"
			}
			parts = append(parts, key(f.Name)+ws+":"+ws+val(f.Type))
			if r.IntN(50*len(s.Fields)) == 0 {
				parts = append(parts, key(f.Name)+":"+val(f.Type))
			}
		}
		if r.IntN(200) == 0 {
			parts = append(parts, `"zz":1`)
		}
		recs = append(recs, []byte("{"+strings.Join(parts, ",")+"}"))
	}
	return recs
}

// refParquet encodes recs (all accepted) one row at a time, without the
// checker's values.
func refParquet(t testing.TB, s *streamconf.Schema, recs [][]byte, group int64) []byte {
	schema, err := ParquetSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	pw := parquet.NewWriter(&file, schema, parquet.Compression(&parquet.Zstd), parquet.DataPageStatistics(pageStatistics))
	var inGroup int64
	for n, rec := range recs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(rec, &m); err != nil {
			t.Fatalf("record %d: %v", n, err)
		}
		row := make(parquet.Row, len(s.Fields))
		for i, f := range s.Fields {
			raw := m[f.Name]
			v := parquet.NullValue()
			if raw != nil && string(raw) != "null" {
				switch f.Type {
				case streamconf.TypeString:
					var str string
					if err := json.Unmarshal(raw, &str); err != nil {
						t.Fatal(err)
					}
					v = parquet.ByteArrayValue([]byte(str))
				case streamconf.TypeInt64:
					x, ok := streamconf.ParseInt64(raw)
					if !ok {
						t.Fatalf("record %d: %s: %s", n, f.Name, raw)
					}
					v = parquet.Int64Value(x)
				case streamconf.TypeDouble:
					x, ok := streamconf.ParseDouble(raw)
					if !ok {
						t.Fatalf("record %d: %s: %s", n, f.Name, raw)
					}
					v = parquet.DoubleValue(x)
				case streamconf.TypeBool:
					v = parquet.BooleanValue(string(raw) == "true")
				case streamconf.TypeTimestamp:
					tm, err := streamconf.ParseTimestamp(raw)
					if err != nil {
						t.Fatalf("record %d: %s: %v", n, f.Name, err)
					}
					v = parquet.Int64Value(tm.UnixMicro())
				case streamconf.TypeJSON:
					v = parquet.ByteArrayValue(raw)
				}
			}
			def := 0
			if !f.Required && !v.IsNull() {
				def = 1
			}
			row[i] = v.Level(0, def, i)
		}
		if _, err := pw.WriteRows([]parquet.Row{row}); err != nil {
			t.Fatal(err)
		}
		if inGroup += int64(len(rec)) + 1; inGroup >= group {
			if err := pw.Flush(); err != nil {
				t.Fatal(err)
			}
			inGroup = 0
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

// parquetDump lists a file's rows (each value's column, level, kind and
// bits) and each row group's count and column statistics.
func parquetDump(t testing.TB, file []byte) []string {
	f, err := parquet.OpenFile(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rg := range f.Metadata().RowGroups {
		out = append(out, fmt.Sprintf("row group of %d rows", rg.NumRows))
		for _, c := range rg.Columns {
			st := c.MetaData.Statistics
			out = append(out, fmt.Sprintf("column %v: %d values, %d nulls, min %q, max %q", c.MetaData.PathInSchema, c.MetaData.NumValues, st.NullCount, st.MinValue, st.MaxValue))
		}
	}
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]parquet.Row, 1)
		for {
			n, err := rows.ReadRows(buf)
			if n == 1 {
				var b strings.Builder
				for _, v := range buf[0] {
					fmt.Fprintf(&b, "%d/%d/%v:", v.Column(), v.DefinitionLevel(), v.Kind())
					switch {
					case v.IsNull():
					case v.Kind() == parquet.Double:
						fmt.Fprintf(&b, "%x ", math.Float64bits(v.Double()))
					default:
						fmt.Fprintf(&b, "%q ", v.Bytes())
					}
				}
				out = append(out, b.String())
			}
			if err != nil {
				break
			}
		}
		_ = rows.Close()
	}
	return out
}

// diffEncode checks that every record the write path accepts encodes and
// reads back as the reference's.
func diffEncode(t testing.TB, s *streamconf.Schema, recs [][]byte, group int64) int {
	check := s.NewChecker(true)
	var file bytes.Buffer
	pw, err := NewParquetWriter(&file, Encoding{Format: "parquet", Schema: s, RowGroupBytes: group}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same records given the write path's checked values (as a
	// Parquet stream's encoder is, issue 26) make the same bytes.
	var checkedFile bytes.Buffer
	cw, err := NewParquetWriter(&checkedFile, Encoding{Format: "parquet", Schema: s, RowGroupBytes: group}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]streamconf.Value, len(s.Fields))
	var accepted [][]byte
	var line []byte
	for _, rec := range recs {
		if !json.Valid(rec) || !utf8.Valid(rec) || bytes.IndexByte(rec, '\n') >= 0 || check.Check(rec) != nil {
			continue // refused at write time
		}
		accepted = append(accepted, rec)
		line = append(line[:0], rec...)
		if err := pw.WriteRecord(line); err != nil {
			t.Fatalf("a record the write path accepts does not encode: %s: %v", rec, err)
		}
		kept := streamconf.NewChecked(s, 1)
		if v, err := check.Fields(rec); err != nil {
			t.Fatal(err)
		} else if kept.Add(rec, v) && kept.Value(0, line, vals) { // line: a copy, as read back
			err = cw.WriteChecked(line, vals)
		} else {
			err = cw.WriteRecord(line) // too long to keep: parsed
		}
		if err != nil {
			t.Fatalf("a record the write path accepts does not encode from its checked values: %s: %v", rec, err)
		}
		for i := range line {
			line[i] = '#' // the writers must have copied what they keep
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(checkedFile.Bytes(), file.Bytes()) {
		t.Fatalf("from checked values: %d bytes, parsing: %d bytes, not the same", checkedFile.Len(), file.Len())
	}
	if got := pw.Records(); got != int64(len(accepted)) {
		t.Fatalf("Records() = %d, wrote %d", got, len(accepted))
	}
	got, want := parquetDump(t, file.Bytes()), parquetDump(t, refParquet(t, s, accepted, group))
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("line %d of the dumps differs:\n got %.400s\nwant %.400s", i, g, w)
		}
	}
	return len(accepted)
}

// TestParquetWriterMatchesRowWriter: records with every edge case above,
// in small row groups (many batch and group ends) and large ones (pages
// cut mid-group), narrow and wide schemas. EOSINK_PARQUET_DIFF_ROUNDS
// runs more rounds of other records.
func TestParquetWriterMatchesRowWriter(t *testing.T) {
	rounds := testenv.Int(t, "EOSINK_PARQUET_DIFF_ROUNDS", 1)
	for round := range rounds {
		diffRound(t, uint64(round))
	}
}

func diffRound(t *testing.T, round uint64) {
	for _, tc := range []struct {
		name   string
		s      *streamconf.Schema
		n      int
		groups []int64
	}{
		{"narrow", diffSchema, 3000, []int64{8 << 10, 4 << 20}},
		{"wide", wideDiffSchema, 600, []int64{8 << 10, 4 << 20}},
	} {
		recs := diffRecords(tc.s, tc.n, round<<8|uint64(len(tc.name)))
		for _, g := range tc.groups {
			n := diffEncode(t, tc.s, recs, g)
			t.Logf("round %d: %s, row groups of %d bytes: %d of %d records accepted", round, tc.name, g, n, tc.n)
			if n < tc.n/10 {
				t.Fatalf("%s: only %d of %d records accepted: the test covers too little", tc.name, n, tc.n)
			}
		}
	}
}

// FuzzParquetWriterMatchesRowWriter: the same for records the fuzzer
// makes, one a line.
func FuzzParquetWriterMatchesRowWriter(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3} {
		f.Add(bytes.Join(diffRecords(diffSchema, 40, seed), []byte("\n")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		diffEncode(t, diffSchema, bytes.Split(data, []byte("\n")), 2<<10)
	})
}

// TestParquetWriterPagesPastTheWindow: a page is cut after the batch that
// fills parquet-go's page buffer, so one large record makes a page of its
// size, past the zstd page window (pageWindow), with matches further back
// than it: such pages still read back as written.
func TestParquetWriterPagesPastTheWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var lines []string
	for k, n := range []int{3 * pageWindow, pageWindow + 1, 10} {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcdefghij"[r.IntN(10)]
		}
		for i := pageWindow + pageWindow/2; i+1000 < n; i += 5000 { // a match past the window
			copy(b[i:i+1000], b[i-pageWindow-pageWindow/2:])
		}
		lines = append(lines, fmt.Sprintf(`{"s":"%s","rs":"%s","ri":%d}`, b[:n/2], b, k))
	}
	var file bytes.Buffer
	pw, err := NewParquetWriter(&file, Encoding{Format: "parquet", Schema: diffSchema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if err := pw.WriteRecord([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := OpenRecords(bytes.NewReader(file.Bytes()), int64(file.Len()), "f.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Close()
	for i, want := range lines {
		got, err := recs.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if string(got) != want {
			t.Fatalf("record %d: got %d bytes %.60s…, want %d bytes %.60s…", i, len(got), got, len(want), want)
		}
	}
}
