package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	cases := []string{"", " ", "1", "-0", "1.", "01", "1e5", "1E+2", "[1,]", "[]", "{}", `{"a":1,}`, `{"a" : 1}`,
		"\"a\x01b\"", `"\u12"`, "\"\xff\"", `"\ud800"`, "\ufeff1", "1\u00a0", "NaN", "Infinity", "tru", "null", "1 2",
		`"\x"`, "\x001", "\t1\n", strings.Repeat("[", 400) + strings.Repeat("]", 400), strings.Repeat("[", 20000) + strings.Repeat("]", 20000)}
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\u00e9"`, "1e-7", "[true,false]", "\"\x01\"", "{\"a\":1,}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func TestValidRecordAgrees(t *testing.T) {
	cases := []string{"", " ", "1", "-0", "-", "-a", "1.", "1.5", "01", "1e5", "1e", "1e+", "1E+2", "-1.5e-3", "[1,]", "[]", "{}", "[{}]",
		`{"a":1,}`, `{"a" : 1}`, `{"a":1 , "b" : [ true , false , null ] }`, `{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `{"a":1}}`, `[1]]`, `{]`, `[}`,
		"\"a\x01b\"", `"\u12"`, `"\u12g4"`, `"\u00e9"`, "\"\xff\"", "\"\xe2\x9c\x93\"", "\"\xed\xa0\x80\"", `"\ud800"`, "\ufeff1", "1\u00a0",
		"NaN", "Infinity", "tru", "truex", "true", "null", "nul", "false", "1 2", `"\x"`, `"\/"`, `"a\`, `"abc`, "\x001", "\t1\n", " 1\r",
		`"0123456789abcdef\"0123456789"`, `"0123456789abcdef\\"`, "\"0123456\x7f89abcdef\"", "\"012345678ü9abcdef\"", "\"0123456789abcde\x1f\"",
		strings.Repeat("[", 256) + strings.Repeat("]", 256), strings.Repeat("[", 257) + strings.Repeat("]", 257),
		strings.Repeat(`{"a":`, 255) + "1" + strings.Repeat("}", 255), strings.Repeat("[", 20000) + strings.Repeat("]", 20000)}
	for _, c := range cases {
		checkValidRecord(t, []byte(c))
	}
}

func checkValidRecord(t *testing.T, b []byte) {
	t.Helper()
	want := json.Valid(b) && utf8.Valid(b)
	got, sure := validRecord(b)
	if sure && got != want {
		t.Errorf("validRecord(%.60q) = %v, encoding/json and utf8.Valid say %v", b, got, want)
	}
	if !sure && !bytes.Contains(b, []byte(strings.Repeat("[", scanDepth/2))) && !bytes.Contains(b, []byte(strings.Repeat(`{"a":`, scanDepth/2))) {
		t.Errorf("validRecord(%.60q) is not sure of a shallow line", b)
	}
}

func FuzzValidRecord(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\u00e9"`, "1e-7", "[true,false]", "\"\x01\"", "{\"a\":1,}", "\"\xff\"", `{"pad":"abcdefghijklmnop"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkValidRecord(t, b) })
}

func BenchmarkValidJSON(b *testing.B) {
	line := []byte(`{"user":"ada","n":12345,"tags":["a","b"],"ok":true,"s":"` + strings.Repeat("lorem ipsum ", 80) + `"}`)
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for range b.N {
			_ = json.Valid(line)
		}
	})
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for range b.N {
			_ = validJSON(line)
		}
	})
	b.Run("validRecord", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for range b.N {
			_, _ = validRecord(line)
		}
	})
}

// TestSpecial holds the eight-byte mask to the byte-by-byte rule for
// every byte value in every position.
func TestSpecial(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			var w [8]byte
			for k := range w {
				w[k] = 'a'
			}
			w[pos] = byte(c)
			m := special(binary.LittleEndian.Uint64(w[:]))
			want := uint64(0)
			if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
				want = 0x80 << (8 * pos)
			}
			if m != want {
				t.Fatalf("special with %#x at %d = %#x, want %#x", c, pos, m, want)
			}
		}
	}
}
