package batch

import (
	"encoding/json"
	"strings"
	"testing"
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
}
