package streamconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

var testSchema = &Schema{Fields: []Field{
	{"id", TypeInt64, true},
	{"name", TypeString, false},
	{"amount", TypeDouble, false},
	{"ok", TypeBool, false},
	{"ts", TypeTimestamp, false},
	{"meta", TypeJSON, false},
}}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		rec    string
		strict bool
		field  string // "" with reason "" means ok
		reason string
	}{
		{"minimal", `{"id":1}`, true, "", ""},
		{"all", `{"id":-9223372036854775808,"name":"x","amount":-1.5e300,"ok":false,"ts":"2026-11-29T09:00:00.123456789+01:00","meta":{"a":[1]}}`, true, "", ""},
		{"nulls", `{"id":0,"name":null,"amount":null,"ok":null,"ts":null,"meta":null}`, true, "", ""},
		{"epoch ts", `{"id":1,"ts":1796000000000}`, true, "", ""},
		{"unknown lenient", `{"id":1,"extra":2}`, false, "", ""},
		{"unknown strict", `{"id":1,"extra":2}`, true, "extra", "not in the schema"},
		{"missing required", `{"name":"x"}`, true, "id", "required, missing"},
		{"null required", `{"id":null}`, true, "id", "required, is null"},
		{"not object", `[{"id":1}]`, true, "", "not a JSON object"},
		{"int as string", `{"id":"1"}`, true, "id", "is a string, want an int64"},
		{"int fraction", `{"id":1.0}`, true, "id", "not an integer"},
		{"int exponent", `{"id":1e3}`, true, "id", "not an integer"},
		{"int overflow", `{"id":9223372036854775808}`, true, "id", "not an integer in int64 range"},
		{"double string", `{"id":1,"amount":"1.5"}`, true, "amount", "want a double"},
		{"double range", `{"id":1,"amount":1e400}`, true, "amount", "outside the double range"},
		{"string number", `{"id":1,"name":5}`, true, "name", "is a number, want a string"},
		{"bool", `{"id":1,"ok":"true"}`, true, "ok", "want true or false"},
		{"ts text", `{"id":1,"ts":"yesterday"}`, true, "ts", "not an RFC 3339 time"},
		{"ts bool", `{"id":1,"ts":true}`, true, "ts", "want an RFC 3339 string"},
		{"ts float", `{"id":1,"ts":1.5}`, true, "ts", "not an integer of epoch milliseconds"},
		{"ts range", `{"id":1,"ts":253402300800000}`, true, "ts", "outside years"},
		{"duplicate", `{"id":1,"id":2}`, true, "id", "appears twice"},
		{"duplicate null", `{"id":1,"name":null,"name":"x"}`, true, "name", "appears twice"},
		{"escaped key", `{"\u0069d":1}`, true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := testSchema.NewChecker(tt.strict).Check([]byte(tt.rec))
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErrorAt(t, err, ErrSchemaMismatch, tt.field, tt.reason, func(me *MismatchError) (string, string) { return me.Field, me.Reason })
		})
	}
}

func TestFieldsReused(t *testing.T) {
	c := testSchema.NewChecker(false)
	v, err := c.Fields([]byte(`{"name":"a","id":7,"meta":null,"amount":2.5,"ts":"1970-01-01T00:00:01.0000019Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(v[0].Raw) != "7" || v[0].Int != 7 || string(v[1].Raw) != `"a"` || v[2].Float != 2.5 ||
		v[4].Int != 1000001 || v[3].Raw != nil || v[5].Raw != nil {
		t.Fatalf("values = %+v", v)
	}
	v, err = c.Fields([]byte(`{"id":8}`))
	if err != nil || string(v[0].Raw) != "8" || v[1].Raw != nil || v[2].Float != 0 || v[4].Int != 0 {
		t.Fatalf("second values = %+v, %v", v, err)
	}
}

// TestFieldsOrder: keys are found whatever their order, the schema's
// (which find tries first) or another, with escapes or without.
func TestFieldsOrder(t *testing.T) {
	c := testSchema.NewChecker(true)
	for _, rec := range []string{
		`{"id":1,"name":"n","amount":1.5,"ok":true,"ts":5,"meta":[]}`,
		`{"meta":[],"ts":5,"ok":true,"amount":1.5,"name":"n","id":1}`,
		`{"name":"n","id":1,"ok":true,"amount":1.5,"meta":[],"ts":5}`,
		`{"\u0069d":1,"n\u0061me":"n","amount":1.5,"ok":true,"ts":5,"meta":[]}`,
	} {
		v, err := c.Fields([]byte(rec))
		if err != nil {
			t.Fatalf("%s: %v", rec, err)
		}
		if v[0].Int != 1 || string(v[1].Raw) != `"n"` || v[2].Float != 1.5 || string(v[3].Raw) != "true" || v[4].Int != 5000 || string(v[5].Raw) != "[]" {
			t.Fatalf("%s: values = %+v", rec, v)
		}
	}
	var me *MismatchError
	if _, err := c.Fields([]byte(`{"id":1,"id":2}`)); !errors.As(err, &me) || me.Field != "id" {
		t.Fatalf("duplicate in schema order: %v", err)
	}
}

func TestParseTimestamp(t *testing.T) {
	want := time.Date(2026, 11, 29, 8, 0, 0, 5000000, time.UTC)
	for _, in := range []string{`"2026-11-29T09:00:00.005+01:00"`, `1795939200005`, `"2026-11-29T08:00:00.005Z"`} {
		got, err := ParseTimestamp([]byte(in))
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTimestamp(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestParseInt64(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-0": 0, "42": 42, "9223372036854775807": math.MaxInt64, "-9223372036854775808": math.MinInt64} {
		if got, ok := ParseInt64([]byte(in)); !ok || got != want {
			t.Errorf("ParseInt64(%s) = %d, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-", "1.0", "1e2", "9223372036854775808", "-9223372036854775809", "99999999999999999999", "+1", "0x1"} {
		if got, ok := ParseInt64([]byte(in)); ok {
			t.Errorf("ParseInt64(%q) = %d, ok", in, got)
		}
	}
}

// refCheck is the schema rule written plainly with encoding/json, for
// records without duplicate keys.
// refUnpaired reports whether a string in the raw JSON value v holds a
// UTF-16 surrogate without its other half, by unicode/utf16's rule.
func refUnpaired(v []byte) bool {
	var units []uint16 // the string's UTF-16 code units
	in := false
	for i := 0; i < len(v); {
		c := v[i]
		switch {
		case !in:
			in = c == '"'
			units = units[:0]
			i++
		case c == '"':
			for k := 0; k < len(units); k++ {
				if utf16.IsSurrogate(rune(units[k])) {
					if k+1 == len(units) || utf16.DecodeRune(rune(units[k]), rune(units[k+1])) == utf8.RuneError {
						return true
					}
					k++
				}
			}
			in = false
			i++
		case c == '\\' && v[i+1] == 'u':
			n, _ := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
			units = append(units, uint16(n))
			i += 6
		case c == '\\':
			units = append(units, uint16(v[i+1]))
			i += 2
		default:
			r, size := utf8.DecodeRune(v[i:])
			units = utf16.AppendRune(units, r)
			i += size
		}
	}
	return false
}

func refCheck(s *Schema, strict bool, rec []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(rec))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return false
	}
	known := map[string]bool{}
	for _, f := range s.Fields {
		known[f.Name] = true
		v, present := m[f.Name]
		if !present || v == nil {
			if f.Required {
				return false
			}
			continue
		}
		switch f.Type {
		case TypeString:
			if _, ok := v.(string); !ok {
				return false
			}
		case TypeInt64:
			n, ok := v.(json.Number)
			if !ok || strings.ContainsAny(string(n), ".eE") {
				return false
			}
			if _, err := n.Int64(); err != nil {
				return false
			}
		case TypeDouble:
			n, ok := v.(json.Number)
			if !ok {
				return false
			}
			if _, err := n.Float64(); err != nil {
				return false
			}
		case TypeBool:
			if _, ok := v.(bool); !ok {
				return false
			}
		case TypeTimestamp:
			var tm time.Time
			switch x := v.(type) {
			case string:
				var err error
				if tm, err = time.Parse(time.RFC3339Nano, x); err != nil {
					return false
				}
			case json.Number:
				if strings.ContainsAny(string(x), ".eE") {
					return false
				}
				ms, err := x.Int64()
				if err != nil {
					return false
				}
				tm = time.UnixMilli(ms)
			default:
				return false
			}
			if y := tm.UTC().Year(); y < 1 || y > 9999 {
				return false
			}
		case TypeJSON:
			var raw map[string]json.RawMessage
			if strict && (json.Unmarshal(rec, &raw) != nil || refUnpaired(raw[f.Name])) {
				return false
			}
		}
	}
	if strict {
		for k := range m {
			if !known[k] {
				return false
			}
		}
	}
	return true
}

func hasDuplicateKeys(rec []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(rec))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if seen[tok.(string)] {
			return true
		}
		seen[tok.(string)] = true
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return false
		}
	}
	return false
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"id":1,"name":"x","amount":2.5,"ok":true,"ts":"2026-11-29T09:00:00Z","meta":[1,{"a":null}]}`), true)
	f.Add([]byte(`{"id":"1"}`), false)
	f.Add([]byte(`{"id":1,"ts":-62135596800001}`), false)
	f.Add([]byte(`{"id":1,"x":{}}`), true)
	f.Add([]byte(`{"id":1,"meta":["\ud83d\ude00","\\ud800",{"\udc00":1}]}`), true)
	f.Fuzz(func(t *testing.T, rec []byte, strict bool) {
		err := testSchema.NewChecker(strict).Check(rec)
		if err != nil && !errors.Is(err, ErrSchemaMismatch) {
			t.Fatalf("error %v is not a mismatch", err)
		}
		if !json.Valid(rec) || hasDuplicateKeys(rec) {
			return // the write path never passes invalid JSON; duplicates are always refused
		}
		if want := refCheck(testSchema, strict, rec); (err == nil) != want {
			t.Fatalf("Check(%s, strict=%v) = %v, reference says ok=%v", rec, strict, err, want)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	benchCheck(b, testSchema, []byte(`{"id":123456789,"name":"some name here","amount":42.125,"ok":true,"ts":1796000000000,"meta":{"k":"v","n":[1,2,3]}}`))
}

// benchCheck measures a strict checker of s checking rec.
func benchCheck(b *testing.B, s *Schema, rec []byte) {
	b.Helper()
	c := s.NewChecker(true)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Check(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// wideSchema has MaxFields int64 fields; wideRecord sets each, in reverse
// order (the worst order for a checker that scans the schema per key).
func wideSchema() (*Schema, []byte) {
	s := &Schema{}
	var rec []byte
	for i := range MaxFields {
		s.Fields = append(s.Fields, Field{Name: fmt.Sprintf("field_%04d", i), Type: TypeInt64})
	}
	rec = append(rec, '{')
	for i := MaxFields - 1; i >= 0; i-- {
		rec = fmt.Appendf(rec, `"field_%04d":%d`, i, i)
		if i > 0 {
			rec = append(rec, ',')
		}
	}
	return s, append(rec, '}')
}

// TestCheckCostLinear: checking a record costs about the same per byte
// whatever the schema's size. A checker that looked each key up by
// scanning the schema checked a record of the largest schema (1,024
// fields) ~25x slower per byte than a small one; a client could make the
// write path that much slower by configuring such a schema.
func TestCheckCostLinear(t *testing.T) {
	if err := (Config{Format: FormatNDJSON, Schema: must(wideSchema())}).Validate(); err != nil {
		t.Fatal(err)
	}
	wide, wrec := wideSchema()
	small := &Schema{Fields: wide.Fields[:8]}
	srec := []byte(`{"field_0007":7,"field_0006":6,"field_0005":5,"field_0004":4,"field_0003":3,"field_0002":2,"field_0001":1,"field_0000":0}`)
	perByte := func(s *Schema, rec []byte) float64 {
		c := s.NewChecker(true)
		best := time.Duration(1 << 62)
		for range 5 {
			n := max(1, (1<<20)/len(rec))
			start := time.Now()
			for range n {
				if err := c.Check(rec); err != nil {
					t.Fatal(err)
				}
			}
			best = min(best, time.Since(start)/time.Duration(n))
		}
		return float64(best) / float64(len(rec))
	}
	ratio := perByte(wide, wrec) / perByte(small, srec)
	t.Logf("per byte, %d fields vs 8: %.1fx", MaxFields, ratio)
	if ratio > 5 {
		t.Fatalf("a record of a %d-field schema costs %.1fx per byte what one of 8 fields does; want about the same", MaxFields, ratio)
	}
}

func must(s *Schema, _ []byte) *Schema { return s }

func BenchmarkCheckWide(b *testing.B) {
	s, rec := wideSchema()
	benchCheck(b, s, rec)
}

// TestCheckWideEscapes: a large schema's index finds keys written with
// escapes, as a scan does.
func TestCheckWideEscapes(t *testing.T) {
	s, _ := wideSchema()
	c := s.NewChecker(true)
	var me *MismatchError
	if err := c.Check([]byte(`{"field_\u0030007":"x"}`)); !errors.As(err, &me) || me.Field != "field_0007" {
		t.Fatalf("escaped key: %v, want a mismatch of field_0007", err)
	}
	if err := c.Check([]byte(`{"field_0007":7,"nope":1}`)); !errors.As(err, &me) || me.Field != "nope" {
		t.Fatalf("unknown key: %v, want it named", err)
	}
	if err := c.Check([]byte(`{"field_0007":7}`)); err != nil {
		t.Fatal(err)
	}
}

// TestCheckJSONSurrogates: a Parquet checker refuses a json field with
// a \u escape of half a surrogate pair (DuckDB refuses a file holding one:
// duckdbcheck's TestDuckDBReadsEveryAcceptedJSONValue), wherever it is in
// the value, and nothing else; an ndjson checker keeps accepting it.
func TestCheckJSONSurrogates(t *testing.T) {
	for _, tt := range []struct {
		meta string
		esc  string // the escape refused; "" for ok
	}{
		{`"\ud800"`, `\ud800`}, {`"\udc00"`, `\udc00`}, {`"\uDBFF"`, `\uDBFF`}, {`"\udfff x"`, `\udfff`},
		{`"\ud800\u0041"`, `\ud800`}, {`"\ud800\ud800"`, `\ud800`}, {`"\ud800\\udc00"`, `\ud800`},
		{`{"\ud800":1}`, `\ud800`}, {`[1,{"a":["ok","x\udc00"]}]`, `\udc00`}, {`"\ud83d\ude00\udc00"`, `\udc00`},
		{`"\ud83d\ude00"`, ""}, {`"\uD83D\uDE00"`, ""}, {`"\\ud800"`, ""}, {`"\\\\ud800"`, ""}, {`"\\\ud83d\ude00"`, ""},
		{`"\u00e9\u0000\ue000\ud7ff"`, ""}, {`"\n\t\""`, ""}, {`{"a":1}`, ""}, {`"\ud83d\ude00\ud83d\ude00"`, ""},
	} {
		rec := []byte(`{"id":1,"meta":` + tt.meta + `}`)
		if !json.Valid(rec) {
			t.Fatalf("%s is not valid JSON", rec)
		}
		err := testSchema.NewChecker(true).Check(rec)
		var me *MismatchError
		switch {
		case tt.esc == "" && err != nil:
			t.Errorf("%s: %v", rec, err)
		case tt.esc != "" && (!errors.As(err, &me) || me.Field != "meta" || !strings.Contains(me.Reason, tt.esc+",")):
			t.Errorf("%s: err %v, want %s refused", rec, err, tt.esc)
		}
		if err := testSchema.NewChecker(false).Check(rec); err != nil {
			t.Errorf("ndjson %s: %v", rec, err)
		}
	}
}

// Checked keeps what Fields returned, record by record, and gives it back
// for the same bytes anywhere (a copy, as the encoder reads them back),
// Take keeps a piece's records in order, and a record of another length is
// refused rather than misread.
func TestChecked(t *testing.T) {
	recs := []string{
		`{"id":1,"name":"n","amount":1.5,"ok":true,"ts":5,"meta":[]}`,
		`{"meta":{"a":"\u00e9"},"ts":"2026-11-29T09:00:00.1234567+01:00","ok":null,"amount":-2e-300,"name":"x\"y","id":-9223372036854775808}`,
		`{"id":3}`,
		`  {"id":4,"amount":0.1,"name":""}  `,
	}
	c := testSchema.NewChecker(true)
	k := NewChecked(testSchema, 1) // grows past its room
	var want [][]Value
	for _, r := range recs {
		rec := []byte(r)
		v, err := c.Fields(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !k.Add(rec, v) {
			t.Fatalf("%s not kept", r)
		}
		want = append(want, append([]Value(nil), v...))
	}
	// A string without an escape is Plain (its text is its bytes between
	// the quotes), one with an escape is not, nor is any other value.
	for i, plain := range []bool{true, false, false, true} {
		for j, v := range want[i] {
			if wantPlain := plain && testSchema.Fields[j].Name == "name"; v.Plain != wantPlain {
				t.Fatalf("record %d field %q: Plain %v, want %v", i, testSchema.Fields[j].Name, v.Plain, wantPlain)
			}
		}
	}
	if k.Len() != len(recs) {
		t.Fatalf("Len %d", k.Len())
	}
	check := func(k *Checked, i int, rec string, want []Value) {
		t.Helper()
		out := make([]Value, len(testSchema.Fields))
		cp := []byte(rec) // other bytes, the same text
		if !k.Value(i, cp, out) {
			t.Fatalf("record %d not found", i)
		}
		for j := range want {
			if !bytes.Equal(out[j].Raw, want[j].Raw) || (out[j].Raw == nil) != (want[j].Raw == nil) ||
				out[j].Int != want[j].Int || math.Float64bits(out[j].Float) != math.Float64bits(want[j].Float) ||
				out[j].Plain != want[j].Plain {
				t.Fatalf("record %d field %d: %+v, want %+v", i, j, out[j], want[j])
			}
		}
		for j := range cp {
			cp[j] = 'X'
		}
		for j := range out {
			if out[j].Raw != nil && string(out[j].Raw) != strings.Repeat("X", len(out[j].Raw)) {
				t.Fatalf("record %d field %d: not a slice of the bytes given", i, j)
			}
		}
	}
	for i, r := range recs {
		check(k, i, r, want[i])
		if k.RecordLen(i) != len(r) {
			t.Fatalf("RecordLen(%d) = %d", i, k.RecordLen(i))
		}
	}
	p := k.Take([]int{3, 1}, nil)
	if p.Len() != 2 || p.Schema != testSchema {
		t.Fatalf("Take: %d records", p.Len())
	}
	check(p, 0, recs[3], want[3])
	check(p, 1, recs[1], want[1])

	out := make([]Value, len(testSchema.Fields))
	if k.Value(0, []byte(recs[0]+" "), out) || k.Value(4, []byte(recs[0]), out) || k.Value(-1, []byte(recs[0]), out) {
		t.Fatal("a record of another length, or out of range, was found")
	}
	if out[0].Raw != nil {
		t.Fatal("a refused Value wrote to out")
	}
	// A record too long to keep is not kept.
	long := []byte(`{"id":5,"name":"` + strings.Repeat("x", MaxCheckedRecord) + `"}`)
	if v, err := c.Fields(long); err != nil || k.Add(long, v) || k.Len() != len(recs) {
		t.Fatalf("a record of %d bytes was kept (%v)", len(long), err)
	}
	// A value that is not a slice of the record is not kept.
	v, _ := c.Fields([]byte(recs[2]))
	if k.Add([]byte(recs[0]), v) || k.Len() != len(recs) {
		t.Fatal("values of another record were kept")
	}
}
