package layout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// serverPartition is server.Partition as of commit f74e915, the rule the
// default template must reproduce exactly.
func serverPartition(t time.Time) string { return t.UTC().Format("dt=2006-01-02/hour=15") }

func TestDefaultMatchesServerPartition(t *testing.T) {
	tmpl, err := CompileTemplate(DefaultPartition)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.NeedsRecord() {
		t.Fatal("default template needs a record")
	}
	east := time.FixedZone("east", 14*3600)
	times := []time.Time{
		time.Date(2026, 11, 29, 9, 59, 59, 999999999, time.UTC),
		time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(2027, 1, 1, 3, 0, 0, 0, east), // previous UTC day
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC),
		time.Unix(0, 0),
	}
	for _, tm := range times {
		checkServerPartition(t, tmpl, tm)
	}
}

// checkServerPartition: the template puts tm where serverPartition does.
func checkServerPartition(t *testing.T, tmpl *Template, tm time.Time) {
	t.Helper()
	got, err := tmpl.Eval(tm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := serverPartition(tm); got != want {
		t.Errorf("Eval(%v) = %q, want %q", tm, got, want)
	}
}

func FuzzDefaultMatchesServerPartition(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(1796000000))
	tmpl, err := CompileTemplate(DefaultPartition)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sec int64) {
		tm := time.Unix(sec%253402300800, 0) // years 0001..9999 in either direction of 1970
		if y := tm.UTC().Year(); y < 1 || y > 9999 {
			return
		}
		checkServerPartition(t, tmpl, tm)
	})
}

func TestCompileTemplateErrors(t *testing.T) {
	tests := []struct {
		tmpl   string
		offset int
		msg    string // part of the message
	}{
		{"", 0, "empty template"},
		{strings.Repeat("a", MaxTemplateLen+1), MaxTemplateLen, "longer than"},
		{"/a", 0, "empty path segment"},
		{"a/", 2, "empty path segment"},
		{"a//b", 2, "empty path segment"},
		{"a b", 1, "' ' not allowed"},
		{"a/../b", 2, "may not start with '.'"},
		{"_x", 0, "may not start with '_'"},
		{"x/.hidden", 2, "may not start with '.'"},
		{"{ingest:%Y", 0, "unterminated placeholder"},
		{"a}", 1, "'}' without '{'"},
		{"{ingest}", 1, "want {ingest:FMT}"},
		{"{nope:x}", 1, "unknown placeholder kind \"nope\""},
		{"{ingest:%S}", 8, "%S not allowed"},
		{"{ingest:%}", 8, "'%' at the end"},
		{"{ingest:abc}", 8, "has no %-verb"},
		{"{ingest:%Y/%m}", 10, "'/' not allowed in a time format"},
		{"{time:ts}", 6, "needs a field and a format"},
		{"{time::%H}", 6, "field name must be"},
		{"{time:t s:%H}", 7, "' ' not allowed in a field name"},
		{"{field:}", 7, "field name must be"},
		{"{field:a/b}", 8, "'/' not allowed in a field name"},
		{"{field:" + strings.Repeat("f", MaxFieldNameLen+1) + "}", 7, "field name must be"},
		{strings.Repeat("{ingest:%H}", MaxPlaceholders+1), 11 * MaxPlaceholders, "more than 16 placeholders"},
		{strings.Repeat("a", 250) + "{ingest:%Y%m}", 263, "path segment of 256 bytes"},
		{"x/" + strings.Repeat("a", 256) + "/y", 258, "path segment of 256 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			_, err := CompileTemplate(tt.tmpl)
			var te *TemplateError
			if !errors.As(err, &te) || !errors.Is(err, ErrInvalidTemplate) {
				t.Fatalf("err = %v, want a *TemplateError", err)
			}
			if te.Offset != tt.offset || !strings.Contains(te.Msg, tt.msg) {
				t.Fatalf("err = %v (offset %d), want offset %d and %q", err, te.Offset, tt.offset, tt.msg)
			}
		})
	}
}

func TestEval(t *testing.T) {
	ingest := time.Date(2026, 11, 29, 9, 5, 0, 0, time.UTC)
	tests := []struct {
		name, tmpl, rec string
		want            string
	}{
		{"ingest minute", "{ingest:%Y%m%d}/m={ingest:%M}", ``, "20261129/m=05"},
		{"literal only", "all", ``, "all"},
		{"design example", "dt={time:ts:%Y-%m-%d}/region={field:region}", `{"ts":"2026-01-02T23:30:00-02:00","region":"eu-west"}`, "dt=2026-01-03/region=eu-west"},
		{"epoch millis", "h={time:ts:%Y-%m-%dT%H}", `{"ts":1796000000123}`, "h=2026-11-30T00"},
		{"negative epoch", "{time:ts:%Y}", `{"ts":-86400000}`, "1969"},
		{"rfc3339 fraction", "{time:ts:%H%M}", `{"ts":"2026-11-29T09:07:59.999999999Z"}`, "0907"},
		{"integer field", "u={field:user}", `{"user":-42}`, "u=-42"},
		{"encoded", "r={field:r}", `{"r":"a b/c=é%"}`, "r=a%20b%2Fc%3D%C3%A9%25"},
		{"dot value mid segment", "r={field:r}", `{"r":".."}`, "r=.."},
		{"dot value segment", "{field:r}", `{"r":".."}`, "%2E."},
		{"dot value single", "{field:r}", `{"r":"."}`, "%2E"},
		{"underscore start", "{field:r}/x", `{"r":"_manifests"}`, "%5Fmanifests/x"},
		{"escaped key and value", "{field:r}", `{"\u0072":"\u0041\n"}`, "A%0A"},
		{"nested ignored", "{field:r}", `{"x":{"r":"no"},"r":"yes"}`, "yes"},
		{"same field twice", "{field:r}/{field:r}", `{"r":"v"}`, "v/v"},
		{"field names with dots", "{field:k8s.pod}", `{"k8s.pod":"p-1"}`, "p-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := CompileTemplate(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Eval(ingest, []byte(tt.rec))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Eval = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEvalErrors(t *testing.T) {
	ingest := time.Date(2026, 11, 29, 9, 5, 0, 0, time.UTC)
	long := strings.Repeat("é", MaxValueLen/6+1) // 6 bytes each once encoded
	tests := []struct {
		name, tmpl, rec string
		field, reason   string
	}{
		{"missing", "{field:r}", `{"x":1}`, "r", "missing"},
		{"null", "{field:r}", `{"r":null}`, "r", "is null"},
		{"bool", "{field:r}", `{"r":true}`, "r", "is a bool, want a string or an integer"},
		{"object", "{field:r}", `{"r":{}}`, "r", "is an object, want a string or an integer"},
		{"array time", "{time:ts:%H}", `{"ts":[]}`, "ts", "is an array, want an RFC 3339"},
		{"float", "{field:r}", `{"r":1.5}`, "r", "not an integer"},
		{"too big int", "{field:r}", `{"r":99999999999999999999}`, "r", "not an integer in int64 range"},
		{"empty", "{field:r}", `{"r":""}`, "r", "empty value"},
		{"too long", "{field:r}", `{"r":"` + long + `"}`, "r", "longer than 200 bytes"},
		{"twice", "{field:r}", `{"r":"a","r":"b"}`, "r", "appears twice"},
		{"not object", "{field:r}", `[1]`, "r", "not a JSON object"},
		{"bad time", "{time:ts:%H}", `{"ts":"yesterday"}`, "ts", "not an RFC 3339 time"},
		{"time no zone", "{time:ts:%H}", `{"ts":"2026-11-29T09:00:00"}`, "ts", "not an RFC 3339 time"},
		{"time float", "{time:ts:%H}", `{"ts":1.5}`, "ts", "not an integer of epoch milliseconds"},
		{"time bool", "{time:ts:%H}", `{"ts":false}`, "ts", "want an RFC 3339 string or epoch milliseconds"},
		{"time range", "{time:ts:%Y}", `{"ts":9223372036854775807}`, "ts", "outside years"},
		{"time missing", "a/{time:ts:%Y}", `{}`, "ts", "missing"},
		{"part file name", "a/{field:r}", `{"r":"part-n1-00000000000000000007-0000.ndjson"}`, "r", "eosink's own names"},
		{"part file name, other case", "{field:r}", `{"r":"PART-n1-00000000000000000007-0000.NDJSON.GZ"}`, "r", "eosink's own names"},
		{"part file name made of a literal and a value", "part-{field:r}", `{"r":"n1-00000000000000000007-12345.parquet"}`, "r", "eosink's own names"},
		{"temp file name", "{field:r}", `{"r":"a.inprogress"}`, "r", "eosink's own names"},
		{"segment too long", "{field:a}{field:b}", `{"a":"` + strings.Repeat("a", 150) + `","b":"` + strings.Repeat("b", 150) + `"}`, "b", "path segment 300 bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := CompileTemplate(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.Eval(ingest, []byte(tt.rec))
			var pe *PartitionError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPartition) {
				t.Fatalf("err = %v, want a *PartitionError", err)
			}
			if pe.Field != tt.field || !strings.Contains(pe.Reason, tt.reason) {
				t.Fatalf("err = %v, want field %q and %q", err, tt.field, tt.reason)
			}
		})
	}
}

// checkSafePath fails unless p is a relative path of non-empty segments,
// none ".", ".." or starting with '.' or '_', of path-safe bytes only.
func checkSafePath(t *testing.T, p string) {
	t.Helper()
	if p == "" {
		t.Fatal("empty path")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg[0] == '.' || seg[0] == '_' || len(seg) > MaxSegmentLen {
			t.Fatalf("path %q: bad segment %q", p, seg)
		}
		for i := 0; i < len(seg); i++ {
			if c := seg[i]; !litByte(c) && c != '%' {
				t.Fatalf("path %q: byte %q", p, c)
			}
		}
	}
}

func FuzzTemplate(f *testing.F) {
	f.Add(DefaultPartition, `{"a":"x"}`)
	f.Add("dt={time:ts:%Y-%m-%d}/region={field:region}", `{"ts":"2026-01-02T03:04:05Z","region":"eu"}`)
	f.Add("{field:a}/{field:b}", `{"a":"..","b":"_x y"}`)
	f.Add("{time:a:%Y}", `{"a":1700000000000}`)
	f.Fuzz(func(t *testing.T, src, rec string) {
		tmpl, err := CompileTemplate(src)
		if err != nil {
			if !errors.Is(err, ErrInvalidTemplate) {
				t.Fatalf("compile error %v is not ErrInvalidTemplate", err)
			}
			return
		}
		p, err := tmpl.Eval(time.Unix(1796000000, 0), []byte(rec))
		if err != nil {
			if !errors.Is(err, ErrInvalidPartition) {
				t.Fatalf("eval error %v is not ErrInvalidPartition", err)
			}
			return
		}
		checkSafePath(t, p)
	})
}

func FuzzFieldValue(f *testing.F) {
	for _, s := range []string{"eu", "..", ".", "_", "a/b", "é", "%2F", " ", "\x00"} {
		f.Add(s)
	}
	tmpl, err := CompileTemplate("{field:v}/x={field:v}")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		rec, err := jsonString(v)
		if err != nil {
			return
		}
		p, err := tmpl.Eval(time.Time{}, []byte(`{"v":`+rec+`}`))
		if err != nil {
			if !errors.Is(err, ErrInvalidPartition) {
				t.Fatal(err)
			}
			return
		}
		checkSafePath(t, p)
		// Distinct values never share a path: the encoding is injective.
		first, _, _ := strings.Cut(p, "/")
		var want string // v as the record holds it: invalid UTF-8 replaced
		if err := json.Unmarshal([]byte(rec), &want); err != nil {
			t.Fatal(err)
		}
		if dec := percentDecode(t, first); dec != want {
			t.Fatalf("value %q encoded as %q decodes to %q", v, first, dec)
		}
	})
}
