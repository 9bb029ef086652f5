package streamconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// designExample returns docs/design.md's example body of PUT
// /v1/streams/orders, read from the document: the tests decode what the
// design shows, not a copy of it that could drift.
func designExample(t testing.TB) []byte {
	t.Helper()
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := bytes.Cut(doc, []byte("Example body of `PUT /v1/streams/orders`:\n\n```json\n"))
	body, _, closed := bytes.Cut(rest, []byte("```"))
	if !found || !closed {
		t.Fatal("docs/design.md: no example body of PUT /v1/streams/orders")
	}
	return body
}

func TestDecodeDesignExample(t *testing.T) {
	example := designExample(t)
	c, err := Decode(example)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Format: "parquet", Partition: "dt={time:ts:%Y-%m-%d}/region={field:region}", Schema: &Schema{Fields: []Field{
		{"id", TypeInt64, true}, {"region", TypeString, true}, {"amount", TypeDouble, false}, {"ts", TypeTimestamp, true}}}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Decode = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// The encoding round-trips, and decodes as encoding/json reads it.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var std Config
	if err := json.Unmarshal(example, &std); err != nil || !reflect.DeepEqual(std, want) {
		t.Fatalf("encoding/json reads %+v, %v", std, err)
	}
	again, err := Decode(b)
	if err != nil || !reflect.DeepEqual(again, c) {
		t.Fatalf("round trip %s: %+v, %v", b, again, err)
	}
	d := c.Defaults()
	if d.Compression != CompressionZstd || d.Dedup != DedupNone || d.Partition != c.Partition {
		t.Fatalf("Defaults = %+v", d)
	}
}

func TestDefaults(t *testing.T) {
	got := Config{}.Defaults()
	want := Config{Compression: "none", Partition: "dt={ingest:%Y-%m-%d}/hour={ingest:%H}", Dedup: "none", MaxPartitions: DefaultMaxPartitions}
	if got != want {
		t.Fatalf("Defaults = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ body, field, msg string }{
		{`[]`, "body", "must be a JSON object"},
		{`{"format":"ndjson"`, "body", "not valid JSON"},
		{`{} {}`, "body", "data after the object"},
		{`{"fromat":"ndjson"}`, "fromat", "unknown field"},
		{`{"":1}`, `""`, "unknown field"},
		{`{"schema":{"a.b":1}}`, `schema."a.b"`, "unknown field"},
		{`{"":`, `""`, "not valid JSON"},
		{`{"format":1}`, "format", "must be a string"},
		{`{"roll_size":"1MB"}`, "roll_size", "must be an integer"},
		{`{"roll_size":1.5}`, "roll_size", "must be an integer"},
		{`{"max_partitions":"many"}`, "max_partitions", "must be an integer"},
		{`{"dedup":"body","dedup":"none"}`, "dedup", "appears twice"},
		{`{"schema":[]}`, "schema", "must be a JSON object"},
		{`{"schema":{"field":[]}}`, "schema.field", "unknown field"},
		{`{"schema":{"fields":{}}}`, "schema.fields", "must be an array"},
		{`{"schema":{"fields":[{"name":"a","type":"string"},{"name":"b","typ":"int64"}]}}`, "schema.fields[1].typ", "unknown field"},
		{`{"schema":{"fields":[{"name":"a","type":"string"},"x"]}}`, "schema.fields[1]", "must be a JSON object"},
		{`{"schema":{"fields":[{"name":"a","required":"yes"}]}}`, "schema.fields[0].required", "must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			_, err := Decode([]byte(tt.body))
			wantErrorAt(t, err, ErrInvalid, tt.field, tt.msg, func(fe *FieldError) (string, string) { return fe.Field, fe.Message })
		})
	}
}

// wantErrorAt fails t unless err is an E wrapping sentinel, of field
// field (of gives an E's field and text), its text holding msg.
func wantErrorAt[E error](t *testing.T, err, sentinel error, field, msg string, of func(E) (field, text string)) {
	t.Helper()
	var e E
	if !errors.As(err, &e) || !errors.Is(err, sentinel) {
		t.Fatalf("err = %v, want a %T", err, e)
	}
	if f, text := of(e); f != field || !strings.Contains(text, msg) {
		t.Fatalf("err = %v, want field %q, %q", err, field, msg)
	}
}

func TestValidate(t *testing.T) {
	schema := &Schema{Fields: []Field{{"id", TypeInt64, true}, {"ts", TypeTimestamp, false}}}
	tests := []struct {
		name  string
		c     Config
		field string // "" for valid
		msg   string
	}{
		{"empty", Config{}, "", ""},
		{"text gzip", Config{Format: "text", Compression: "gzip"}, "", ""},
		{"auto zstd", Config{Compression: "zstd", Dedup: "body", RollSize: MinRollSize}, "", ""},
		{"parquet snappy", Config{Format: "parquet", Compression: "snappy", Schema: schema}, "", ""},
		{"ndjson schema time partition", Config{Format: "ndjson", Schema: schema, Partition: "{time:ts:%Y}/{field:other}"}, "", ""},
		{"format", Config{Format: "csv"}, "format", `"csv" is not one of`},
		{"compression", Config{Compression: "lz4"}, "compression", `"lz4" is not one of`},
		{"snappy ndjson", Config{Format: "ndjson", Compression: "snappy"}, "compression", "snappy is a Parquet page codec"},
		{"snappy auto", Config{Compression: "snappy"}, "compression", "for ndjson and text"},
		{"partition syntax", Config{Partition: "dt={ingest:%S}"}, "partition", "at byte 11: strftime verb %S"},
		{"partition text", Config{Format: "text", Partition: "{field:a}"}, "partition", "set format to ndjson or parquet"},
		{"partition auto", Config{Partition: "{time:a:%H}"}, "partition", "set format to ndjson or parquet"},
		{"partition field not in parquet schema", Config{Format: "parquet", Schema: schema, Partition: "{field:region}"}, "partition", `"region" is not in the schema`},
		{"parquet without schema", Config{Format: "parquet"}, "schema", "needs a schema"},
		{"schema on text", Config{Format: "text", Schema: schema}, "schema", "checks JSON records"},
		{"no fields", Config{Format: "ndjson", Schema: &Schema{}}, "schema.fields", "at least one"},
		{"bad name", Config{Format: "ndjson", Schema: &Schema{Fields: []Field{{"ok", TypeBool, false}, {"1x", TypeBool, false}}}}, "schema.fields[1].name", "not a field name"},
		{"dup name", Config{Format: "ndjson", Schema: &Schema{Fields: []Field{{"Id", TypeBool, false}, {"x", TypeBool, false}, {"id", TypeInt64, false}}}}, "schema.fields[2].name", "repeats schema.fields[0]"},
		{"bad type", Config{Format: "ndjson", Schema: &Schema{Fields: []Field{{"a", TypeBool, false}, {"b", TypeBool, false}, {"c", "float", false}}}}, "schema.fields[2].type", `"float" is not one of`},
		{"roll small", Config{RollSize: MinRollSize - 1}, "roll_size", "outside"},
		{"roll negative", Config{RollSize: -1}, "roll_size", "outside"},
		{"dedup", Config{Dedup: "key"}, "dedup", `"key" is not one of`},
		{"max partitions", Config{MaxPartitions: 7}, "", ""},
		{"max partitions negative", Config{MaxPartitions: -1}, "max_partitions", "outside 1..100000"},
		{"max partitions too many", Config{MaxPartitions: MaxPartitions + 1}, "max_partitions", "outside 1..100000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Message, tt.msg) {
				t.Fatalf("err = %v, want field %q, %q", err, tt.field, tt.msg)
			}
		})
	}
}

func TestExt(t *testing.T) {
	schema := &Schema{Fields: []Field{{"a", TypeString, false}}}
	tests := []struct {
		c        Config
		content  string
		want     string
		mismatch bool
	}{
		{Config{}, "ndjson", "ndjson", false},
		{Config{}, "txt", "txt", false},
		{Config{Compression: "gzip"}, "ndjson", "ndjson.gz", false},
		{Config{Compression: "zstd"}, "txt", "txt.zst", false},
		{Config{Format: "ndjson", Compression: "none"}, "ndjson", "ndjson", false},
		{Config{Format: "ndjson"}, "txt", "", true},
		{Config{Format: "text", Compression: "zstd"}, "ndjson", "txt.zst", false},
		{Config{Format: "parquet", Schema: schema, Compression: "zstd"}, "ndjson", "parquet", false},
		{Config{Format: "parquet", Schema: schema}, "txt", "", true},
		{Config{}, "csv", "", true},
	}
	for _, tt := range tests {
		got, err := tt.c.Ext(tt.content)
		if tt.mismatch {
			if !errors.Is(err, ErrContentMismatch) {
				t.Errorf("%+v Ext(%q) err = %v, want ErrContentMismatch", tt.c, tt.content, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%+v Ext(%q) = %q, %v; want %q", tt.c, tt.content, got, err, tt.want)
			continue
		}
		// ParseExt reads back what Ext wrote.
		format, comp, ext, ok := ParseExt("part-n-00000000000000000001-0000." + got)
		wantFormat := map[string]string{"ndjson": FormatNDJSON, "txt": FormatText, "parquet": FormatParquet}[strings.Split(got, ".")[0]]
		wantComp := tt.c.Defaults().Compression
		if wantFormat == FormatParquet {
			wantComp = CompressionNone // the page codec is inside the file
		}
		if !ok || ext != got || format != wantFormat || comp != wantComp {
			t.Errorf("ParseExt(%q) = %q %q %q %v", got, format, comp, ext, ok)
		}
	}
	for _, name := range []string{"x", "x.gz", "x.json", "x.parquet.gz", "x.txt.bz2", "ndjson"} {
		if _, _, _, ok := ParseExt(name); ok {
			t.Errorf("ParseExt(%q) ok", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(designExample(f))
	f.Add([]byte(`{"format":"text","compression":"gzip","roll_size":4096,"dedup":"body","max_partitions":10,"version":3}`))
	f.Add([]byte(`{"schema":{"fields":[{"name":"a","type":"json","required":false}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := Decode(body)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("Decode error %v is not a *FieldError with a field", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("Validate error %v is not a *FieldError with a field", err)
			}
			return
		}
		// A valid configuration survives its own encoding.
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(b)
		if err != nil || !reflect.DeepEqual(again, Config{Format: c.Format, Compression: c.Compression, Partition: c.Partition, Schema: c.Schema, RollSize: c.RollSize, Dedup: c.Dedup, MaxPartitions: c.MaxPartitions}) {
			t.Fatalf("round trip of %s: %+v, %v", b, again, err)
		}
		if _, err := c.Template(); err != nil {
			t.Fatalf("valid configuration's template: %v", err)
		}
	})
}
