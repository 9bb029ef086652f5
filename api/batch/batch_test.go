package batch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/eosink/eosink/api/batch"
)

const (
	ctNDJSON = "application/x-ndjson"
	ctJSON   = "application/json"
	ctText   = "text/plain"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		ct   string
		want batch.Kind
		err  error
	}{
		{"application/x-ndjson", batch.NDJSON, nil},
		{"application/ndjson", batch.NDJSON, nil},
		{"application/json", batch.NDJSON, nil},
		{"text/plain", batch.Text, nil},
		{"application/x-ndjson; charset=utf-8", batch.NDJSON, nil},
		{"application/json;charset=UTF-8", batch.NDJSON, nil},
		{"text/plain; charset=utf-8; format=flowed", batch.Text, nil},
		{"  text/plain  ; charset=utf-8", batch.Text, nil},
		{"Application/X-NDJSON", batch.NDJSON, nil},
		{"APPLICATION/JSON", batch.NDJSON, nil},
		{"TEXT/PLAIN;CHARSET=UTF-8", batch.Text, nil},
		{"", 0, batch.ErrUnsupportedMediaType},
		{"   ", 0, batch.ErrUnsupportedMediaType},
		{"; charset=utf-8", 0, batch.ErrUnsupportedMediaType},
		{"application/xml", 0, batch.ErrUnsupportedMediaType},
		{"text/html", 0, batch.ErrUnsupportedMediaType},
		{"text/csv", 0, batch.ErrUnsupportedMediaType},
		{"application/octet-stream", 0, batch.ErrUnsupportedMediaType},
		{"application/jsonx", 0, batch.ErrUnsupportedMediaType},
		{"application/json-seq", 0, batch.ErrUnsupportedMediaType},
		{"application/x-ndjsonl", 0, batch.ErrUnsupportedMediaType},
		{"application/jsonl", 0, batch.ErrUnsupportedMediaType},
		{"text", 0, batch.ErrUnsupportedMediaType},
		{"*/*", 0, batch.ErrUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.ct, func(t *testing.T) {
			got, err := batch.KindOf(tt.ct)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("KindOf(%q) error = %v, want %v", tt.ct, err, tt.err)
			}
			if err == nil && got != tt.want {
				t.Fatalf("KindOf(%q) = %v, want %v", tt.ct, got, tt.want)
			}
			// Parse must agree with KindOf.
			b, err := batch.Parse(tt.ct, []byte("[]"), batch.Limits{})
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Parse(%q, \"[]\") error = %v, want %v", tt.ct, err, tt.err)
			}
			if err == nil && b.Kind != tt.want {
				t.Fatalf("Parse(%q, \"[]\").Kind = %v, want %v", tt.ct, b.Kind, tt.want)
			}
		})
	}
}

func TestExt(t *testing.T) {
	if got := batch.NDJSON.Ext(); got != "ndjson" {
		t.Errorf("NDJSON.Ext() = %q", got)
	}
	if got := batch.Text.Ext(); got != "txt" {
		t.Errorf("Text.Ext() = %q", got)
	}
	if got := batch.Kind(99).Ext(); got != "" {
		t.Errorf("Kind(99).Ext() = %q", got)
	}
}

func TestDefaultLimits(t *testing.T) {
	l := batch.DefaultLimits()
	if l.MaxBody != 64<<20 || l.MaxRecord != 1<<20 {
		t.Fatalf("DefaultLimits() = %+v", l)
	}
}

// parseCase is one body and what Parse must make of it.
type parseCase struct {
	name    string
	ct      string
	body    string
	lim     batch.Limits
	want    string // Data
	records int
	err     error // class; nil for success
	line    int   // for *LineError; 0 for an error without a line
}

func runParseCases(t *testing.T, tests []parseCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := batch.Parse(tt.ct, []byte(tt.body), tt.lim)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("Parse(%q) error = %v", tt.body, err)
				}
				if string(got.Data) != tt.want || got.Records != tt.records {
					t.Fatalf("Parse(%q) = %q, %d records; want %q, %d", tt.body, got.Data, got.Records, tt.want, tt.records)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("Parse(%q) error = %v, want %v", tt.body, err, tt.err)
			}
			if got.Data != nil || got.Records != 0 {
				t.Fatalf("Parse(%q) failed but returned %q, %d records", tt.body, got.Data, got.Records)
			}
			var le *batch.LineError
			if errors.As(err, &le) != (tt.line != 0) {
				t.Fatalf("Parse(%q) error = %#v, want a *LineError: %v", tt.body, err, tt.line != 0)
			}
			if le != nil && le.Line != tt.line {
				t.Fatalf("Parse(%q) error line = %d, want %d (%v)", tt.body, le.Line, tt.line, err)
			}
		})
	}
}

func TestParseNDJSON(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "empty body", ct: ctNDJSON, body: "", want: "", records: 0},
		{name: "one", ct: ctNDJSON, body: "{\"a\":1}\n", want: "{\"a\":1}\n", records: 1},
		{name: "no final newline", ct: ctNDJSON, body: "1\n2", want: "1\n2\n", records: 2},
		{name: "scalars", ct: ctNDJSON, body: "1\n\"s\"\ntrue\nnull\n-1.5e3\n[]\n{}\n", want: "1\n\"s\"\ntrue\nnull\n-1.5e3\n[]\n{}\n", records: 7},
		{name: "crlf", ct: ctNDJSON, body: "{\"a\":1}\r\n{\"b\":2}\r\n", want: "{\"a\":1}\n{\"b\":2}\n", records: 2},
		{name: "crlf no final newline", ct: ctNDJSON, body: "1\r\n2\r", want: "1\n2\n", records: 2},
		{name: "mixed endings", ct: ctNDJSON, body: "1\n2\r\n3\n", want: "1\n2\n3\n", records: 3},
		{name: "empty lines skipped", ct: ctNDJSON, body: "\n\n1\n\n2\n\n", want: "1\n2\n", records: 2},
		{name: "blank lines skipped", ct: ctNDJSON, body: "1\n  \n\t\n\r\n \t\r\n\r\r\n2\n", want: "1\n2\n", records: 2},
		{name: "only blank", ct: ctNDJSON, body: "\n \r\n\t", want: "", records: 0},
		{name: "kept as sent", ct: ctNDJSON, body: "  { \"a\" : [ 1 , 2 ] }  \n", want: "  { \"a\" : [ 1 , 2 ] }  \n", records: 1},
		{name: "only one cr dropped", ct: ctNDJSON, body: "1 \r\r\n", want: "1 \r\n", records: 1},
		{name: "unicode", ct: ctNDJSON, body: "{\"k\":\"héllo 世界 🎉\"}\n\"\\u00e9\\ud83c\\udf89\"\n", want: "{\"k\":\"héllo 世界 🎉\"}\n\"\\u00e9\\ud83c\\udf89\"\n", records: 2},
		{name: "no html escaping", ct: ctNDJSON, body: "\"<a>&</a>\"\n", want: "\"<a>&</a>\"\n", records: 1},
		{name: "nested", ct: ctNDJSON, body: "{\"a\":[{\"b\":[[[]]]},{\"c\":{\"d\":null}}]}\n", want: "{\"a\":[{\"b\":[[[]]]},{\"c\":{\"d\":null}}]}\n", records: 1},
		{name: "ndjson synonym", ct: "application/ndjson", body: "1\n", want: "1\n", records: 1},
		{name: "content type params", ct: "Application/X-NDJSON; charset=utf-8", body: "1\n", want: "1\n", records: 1},

		{name: "invalid first line", ct: ctNDJSON, body: "x\n1\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "invalid third line", ct: ctNDJSON, body: "1\n2\n{\n", err: batch.ErrInvalidJSON, line: 3},
		{name: "first bad of several", ct: ctNDJSON, body: "1\nx\ny\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "line counts empty lines", ct: ctNDJSON, body: "\n\n1\n\n{]\n", err: batch.ErrInvalidJSON, line: 5},
		{name: "line counts crlf", ct: ctNDJSON, body: "1\r\n\r\n2\r\nnope\r\n", err: batch.ErrInvalidJSON, line: 4},
		{name: "line counts blank", ct: ctNDJSON, body: " \n\t\n\r\n[1,]\n", err: batch.ErrInvalidJSON, line: 4},
		{name: "valid last no newline", ct: ctNDJSON, body: "1\n2\n3", want: "1\n2\n3\n", records: 3},
		{name: "two values on a line", ct: ctNDJSON, body: "1\n1 2\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "two objects on a line", ct: ctNDJSON, body: "{}{}\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "value split over lines", ct: ctNDJSON, body: "{\"a\":\n1}\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "pretty printed", ct: ctNDJSON, body: "[\n  1\n]\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "other whitespace is not blank", ct: ctNDJSON, body: "1\n\f\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "vertical tab", ct: ctNDJSON, body: "\v1\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "nbsp", ct: ctNDJSON, body: "1\n\u00a0\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "bom", ct: ctNDJSON, body: "\ufeff1\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "raw control in string", ct: ctNDJSON, body: "\"a\tb\"\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "lone cr splits nothing", ct: ctNDJSON, body: "1\r2\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "nul", ct: ctNDJSON, body: "1\n\x00\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "trailing garbage", ct: ctNDJSON, body: "{\"a\":1}x\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "single quotes", ct: ctNDJSON, body: "{'a':1}\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "NaN", ct: ctNDJSON, body: "NaN\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "leading zero", ct: ctNDJSON, body: "01\n", err: batch.ErrInvalidJSON, line: 1},
		{name: "truncated last line", ct: ctNDJSON, body: "1\n{\"a\":", err: batch.ErrInvalidJSON, line: 2},

		{name: "record at limit", ct: ctNDJSON, body: "\"abcd\"\n", lim: batch.Limits{MaxRecord: 6}, want: "\"abcd\"\n", records: 1},
		{name: "record over limit", ct: ctNDJSON, body: "1\n\"abcde\"\n", lim: batch.Limits{MaxRecord: 6}, err: batch.ErrTooLarge, line: 2},
		{name: "cr not counted", ct: ctNDJSON, body: "\"abcd\"\r\n", lim: batch.Limits{MaxRecord: 6}, want: "\"abcd\"\n", records: 1},
		{name: "whitespace counted", ct: ctNDJSON, body: " \"abcd\"\n", lim: batch.Limits{MaxRecord: 6}, err: batch.ErrTooLarge, line: 1},
		{name: "blank line not a record", ct: ctNDJSON, body: "1\n          \n", lim: batch.Limits{MaxRecord: 6}, want: "1\n", records: 1},
		{name: "first bad line wins: invalid", ct: ctNDJSON, body: "x\n\"abcdefgh\"\n", lim: batch.Limits{MaxRecord: 6}, err: batch.ErrInvalidJSON, line: 1},
		{name: "first bad line wins: large", ct: ctNDJSON, body: "\"abcdefgh\"\nx\n", lim: batch.Limits{MaxRecord: 6}, err: batch.ErrTooLarge, line: 1},
		{name: "body at limit", ct: ctNDJSON, body: "1\n2\n", lim: batch.Limits{MaxBody: 4}, want: "1\n2\n", records: 2},
		{name: "body over limit", ct: ctNDJSON, body: "1\n2\n3\n", lim: batch.Limits{MaxBody: 4}, err: batch.ErrTooLarge},
		{name: "body over limit before json", ct: ctNDJSON, body: "xxxxx", lim: batch.Limits{MaxBody: 4}, err: batch.ErrTooLarge},
	})
}

func TestParseArray(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "empty array", ct: ctJSON, body: "[]", want: "", records: 0},
		{name: "empty array spaced", ct: ctJSON, body: " \r\n[ \n ]\n", want: "", records: 0},
		{name: "one", ct: ctJSON, body: "[{\"a\":1}]", want: "{\"a\":1}\n", records: 1},
		{name: "scalars", ct: ctJSON, body: "[1, \"s\", true, false, null, -0.5e-3]", want: "1\n\"s\"\ntrue\nfalse\nnull\n-0.5e-3\n", records: 6},
		{name: "compacted", ct: ctJSON, body: "[ { \"a\" : [ 1 , 2 ] ,\n \"b\" : { } } ,\r\n\t[ ] ]\n", want: "{\"a\":[1,2],\"b\":{}}\n[]\n", records: 2},
		{name: "nested arrays", ct: ctJSON, body: "[[1,[2,[3]]],[[]],[{}]]", want: "[1,[2,[3]]]\n[[]]\n[{}]\n", records: 3},
		{name: "strings with structure", ct: ctJSON, body: `["a,b", "]", "[{", "\"", "\\", "\\\"],", {"k,]":"v\\"}]`, want: "\"a,b\"\n\"]\"\n\"[{\"\n\"\\\"\"\n\"\\\\\"\n\"\\\\\\\"],\"\n{\"k,]\":\"v\\\\\"}\n", records: 7},
		{name: "spaces inside strings kept", ct: ctJSON, body: `[ "a b  c" ]`, want: "\"a b  c\"\n", records: 1},
		{name: "unicode", ct: ctJSON, body: "[\"héllo 世界 🎉\", \"\\u00e9\"]", want: "\"héllo 世界 🎉\"\n\"\\u00e9\"\n", records: 2},
		{name: "no html escaping", ct: ctJSON, body: `["<a>&</a>"]`, want: "\"<a>&</a>\"\n", records: 1},
		{name: "content type params", ct: "APPLICATION/JSON; charset=UTF-8", body: "[1]", want: "1\n", records: 1},

		{name: "empty body", ct: ctJSON, body: "", err: batch.ErrInvalidJSON, line: 1},
		{name: "blank body", ct: ctJSON, body: "\n\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "object", ct: ctJSON, body: "{\"a\":1}", err: batch.ErrInvalidJSON, line: 1},
		{name: "object on line 3", ct: ctJSON, body: "\n\r\n  {\"a\":1}\n", err: batch.ErrInvalidJSON, line: 3},
		{name: "scalar", ct: ctJSON, body: "1", err: batch.ErrInvalidJSON, line: 1},
		{name: "null", ct: ctJSON, body: "null", err: batch.ErrInvalidJSON, line: 1},
		{name: "ndjson sent as json", ct: ctJSON, body: "{}\n{}\n", err: batch.ErrInvalidJSON, line: 2},
		{name: "two arrays", ct: ctJSON, body: "[1]\n[2]", err: batch.ErrInvalidJSON, line: 2},
		{name: "trailing comma", ct: ctJSON, body: "[\n1,\n2,\n]", err: batch.ErrInvalidJSON, line: 4},
		{name: "bad element line 3", ct: ctJSON, body: "[\n1,\nx,\n2]", err: batch.ErrInvalidJSON, line: 3},
		{name: "unterminated", ct: ctJSON, body: "[1,\n2", err: batch.ErrInvalidJSON, line: 2},
		{name: "unterminated string", ct: ctJSON, body: "[\"abc", err: batch.ErrInvalidJSON, line: 1},
		{name: "raw newline in string", ct: ctJSON, body: "[\"a\nb\"]", err: batch.ErrInvalidJSON, line: 1},

		{name: "element at limit", ct: ctJSON, body: "[ 1 , [ 1 , 2 ] ]", lim: batch.Limits{MaxRecord: 5}, want: "1\n[1,2]\n", records: 2},
		{name: "element over limit", ct: ctJSON, body: "[\n1,\n\n  [1,2,3]\n]", lim: batch.Limits{MaxRecord: 5}, err: batch.ErrTooLarge, line: 4},
		{name: "element over limit same line", ct: ctJSON, body: "[1, \"abcdef\"]", lim: batch.Limits{MaxRecord: 5}, err: batch.ErrTooLarge, line: 1},
		{name: "element over limit after strings", ct: ctJSON, body: "[\"\\\"\", \"[,\",\n{\"a\":[1,\n2]},\n\"abcdef\"]", lim: batch.Limits{MaxRecord: 5}, err: batch.ErrTooLarge, line: 2},
		{name: "element over limit last", ct: ctJSON, body: "[\"\\\"\", \"[,\",\n[],\n\"abcdef\"]", lim: batch.Limits{MaxRecord: 5}, err: batch.ErrTooLarge, line: 3},
		{name: "compacted size counts", ct: ctJSON, body: "[ [ 1 , 2 ] ]", lim: batch.Limits{MaxRecord: 5}, want: "[1,2]\n", records: 1},
		{name: "body over limit", ct: ctJSON, body: "[1,2]", lim: batch.Limits{MaxBody: 4}, err: batch.ErrTooLarge},
	})
}

func TestParseText(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "empty body", ct: ctText, body: "", want: "", records: 0},
		{name: "terminated", ct: ctText, body: "a\nb\n", want: "a\nb\n", records: 2},
		{name: "unterminated", ct: ctText, body: "a\nb", want: "a\nb\n", records: 2},
		{name: "empty lines kept", ct: ctText, body: "a\n\nb\n\n", want: "a\n\nb\n\n", records: 4},
		{name: "only newline", ct: ctText, body: "\n", want: "\n", records: 1},
		{name: "crlf", ct: ctText, body: "a\r\n\r\nb\r\n", want: "a\n\nb\n", records: 3},
		{name: "final cr", ct: ctText, body: "a\r", want: "a\n", records: 1},
		{name: "cr after final newline", ct: ctText, body: "a\n\r", want: "a\n\n", records: 2},
		{name: "inner cr kept", ct: ctText, body: "a\rb\n", want: "a\rb\n", records: 1},
		{name: "only one cr dropped", ct: ctText, body: "a\r\r\n", want: "a\r\n", records: 1},
		{name: "unchecked", ct: ctText, body: "not json {\n\x00\xff\xfe\n  \t \n", want: "not json {\n\x00\xff\xfe\n  \t \n", records: 3},
		{name: "unicode", ct: ctText, body: "héllo 世界 🎉\n", want: "héllo 世界 🎉\n", records: 1},
		{name: "content type params", ct: "Text/Plain; charset=utf-8", body: "a", want: "a\n", records: 1},

		{name: "record at limit", ct: ctText, body: "abc\r\nabc", lim: batch.Limits{MaxRecord: 3}, want: "abc\nabc\n", records: 2},
		{name: "record over limit", ct: ctText, body: "abc\n\nabcd\n", lim: batch.Limits{MaxRecord: 3}, err: batch.ErrTooLarge, line: 3},
		{name: "body over limit", ct: ctText, body: "abcde", lim: batch.Limits{MaxBody: 4}, err: batch.ErrTooLarge},
	})
}

func TestParseUnsupported(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "xml", ct: "application/xml", body: "<a/>", err: batch.ErrUnsupportedMediaType},
		{name: "empty", ct: "", body: "1\n", err: batch.ErrUnsupportedMediaType},
		{name: "form", ct: "application/x-www-form-urlencoded", body: "a=1", err: batch.ErrUnsupportedMediaType},
		{name: "unsupported before too large", ct: "application/xml", body: "<a/>", lim: batch.Limits{MaxBody: 1}, err: batch.ErrUnsupportedMediaType},
	})
}

func TestLineError(t *testing.T) {
	_, err := batch.Parse(ctNDJSON, []byte("1\n\n[1,}\n"), batch.Limits{})
	var le *batch.LineError
	if !errors.As(err, &le) {
		t.Fatalf("error %v is not a *LineError", err)
	}
	if le.Line != 3 || le.Err != batch.ErrInvalidJSON || !errors.Is(err, batch.ErrInvalidJSON) || errors.Is(err, batch.ErrTooLarge) {
		t.Fatalf("error = %#v", le)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "line 3: invalid JSON: ") || !strings.Contains(msg, "column 4") {
		t.Fatalf("Error() = %q", msg)
	}

	_, err = batch.Parse(ctJSON, []byte("[1,\n  2,\n  x]"), batch.Limits{})
	if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "column 3") {
		t.Fatalf("error = %v", err)
	}

	_, err = batch.Parse(ctText, []byte("abcd"), batch.Limits{MaxRecord: 2})
	if !errors.As(err, &le) || le.Line != 1 || !errors.Is(err, batch.ErrTooLarge) {
		t.Fatalf("error = %v", err)
	}
	if msg := err.Error(); msg != "line 1: too large: record is 4 bytes, limit 2" {
		t.Fatalf("Error() = %q", msg)
	}
}

// TestAlias pins down when Data aliases the body and when it must not.
func TestAlias(t *testing.T) {
	tests := []struct {
		ct, body string
		alias    bool
	}{
		{ctNDJSON, "1\n2\n", true},
		{ctNDJSON, "1\n2", false},
		{ctNDJSON, "1\r\n2\n", false},
		{ctNDJSON, "1\n\n2\n", false},
		{ctText, "a\n\nb\n", true},
		{ctText, "a\r\n", false},
		{ctText, "a", false},
		{ctJSON, "[1]", false},
	}
	for _, tt := range tests {
		body := []byte(tt.body)
		b, err := batch.Parse(tt.ct, body, batch.Limits{})
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.body, err)
		}
		if got := len(b.Data) > 0 && &b.Data[0] == &body[0]; got != tt.alias {
			t.Errorf("Parse(%q): Data aliases body = %v, want %v", tt.body, got, tt.alias)
		}
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	ndjson := []byte(strings.Repeat("{\"a\":[1,2,3],\"b\":\"xyz\"}\n", 100))
	crlf := []byte(strings.Repeat("{\"a\":[1,2,3],\"b\":\"xyz\"}\r\n", 100))
	array := []byte("[" + strings.Repeat("{\"a\": [1, 2, 3], \"b\": \"xyz\"},\n", 99) + "{}]")
	tests := []struct {
		name, ct string
		body     []byte
		max      float64
	}{
		{"ndjson aliased", ctNDJSON, ndjson, 0},
		{"ndjson copied", ctNDJSON, crlf, 1},
		{"text aliased", ctText, ndjson, 0},
		{"text copied", ctText, crlf, 1},
		{"array", ctJSON, array, 1},
	}
	for _, tt := range tests {
		got := testing.AllocsPerRun(100, func() {
			if _, err := batch.Parse(tt.ct, tt.body, batch.Limits{}); err != nil {
				t.Fatal(err)
			}
		})
		if got > tt.max {
			t.Errorf("%s: %v allocations per Parse, want at most %v", tt.name, got, tt.max)
		}
	}
}

// TestParseInvalidUTF8 holds JSON bodies to RFC 8259: JSON text is UTF-8,
// so a string holding bytes that are not UTF-8 is refused with its line.
// encoding/json and fastjson both let such strings through.
func TestParseInvalidUTF8(t *testing.T) {
	tests := []struct {
		name, ct, body string
		line           int // 0: accepted
	}{
		{"ndjson byte ff", ctNDJSON, "{\"a\":1}\n{\"s\":\"x\xffy\"}\n", 2},
		{"ndjson cut sequence", ctNDJSON, "{\"s\":\"\xc3\"}\n", 1},
		{"ndjson overlong slash", ctNDJSON, "{}\n\n{\"s\":\"\xc0\xaf\"}\n", 3},
		{"ndjson utf-16 surrogate as utf-8", ctNDJSON, "{\"s\":\"\xed\xa0\x80\"}\n", 1},
		{"ndjson in a key", ctNDJSON, "{\"k\xfe\":1}\r\n", 1},
		{"ndjson valid multibyte", ctNDJSON, "{\"s\":\"ünïcode ✓ 𝄞\"}\n", 0},
		{"ndjson escaped surrogate stays valid", ctNDJSON, "{\"s\":\"\\ud800\"}\n", 0},
		{"array byte ff", ctJSON, "[{\"a\":1},\n {\"a\":2},\n {\"s\":\"\xff\"}]", 3},
		{"array valid multibyte", ctJSON, "[\"é\", \"✓\"]", 0},
		{"text is unchecked", ctText, "x\xffy\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := batch.Parse(tt.ct, []byte(tt.body), batch.Limits{})
			if tt.line == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var le *batch.LineError
			if !errors.Is(err, batch.ErrInvalidJSON) || !errors.As(err, &le) {
				t.Fatalf("Parse = %d records, error %v; want a line error wrapping ErrInvalidJSON", b.Records, err)
			}
			if le.Line != tt.line || !strings.Contains(le.Msg, "UTF-8") {
				t.Fatalf("error %v: want line %d and a message naming UTF-8", err, tt.line)
			}
		})
	}
}
