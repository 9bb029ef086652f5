package jsontop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

type member struct{ key, val string }

func scanAll(t testing.TB, rec []byte) ([]member, error) {
	t.Helper()
	s, err := NewScanner(rec)
	if err != nil {
		return nil, err
	}
	var out []member
	for {
		k, v, ok := s.Next()
		if !ok {
			break
		}
		key, err := Key(k)
		if err != nil {
			return out, err
		}
		out = append(out, member{key, string(v)})
	}
	return out, s.Err()
}

// stdMembers lists the members of a valid object as encoding/json reads them.
func stdMembers(t testing.TB, rec []byte) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(rec))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("token: %v", err)
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("key: %v", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("value: %v", err)
		}
		out = append(out, member{tok.(string), string(raw)})
	}
	return out
}

func TestScanner(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []member
		err  error
	}{
		{"empty", `{}`, nil, nil},
		{"spaces", " \t{ \"a\" : 1 , \"b\":\"x\"\n}", []member{{"a", "1"}, {"b", `"x"`}}, nil},
		{"nested", `{"a":{"b":[1,{"c":"}"}]},"d":null}`, []member{{"a", `{"b":[1,{"c":"}"}]}`}, {"d", "null"}}, nil},
		{"escaped key", `{"a\"b":true,"\u0041":false}`, []member{{`a"b`, "true"}, {"A", "false"}}, nil},
		{"string with brackets", `{"s":"[{\\\"","n":-1.5e3}`, []member{{"s", `"[{\\\""`}, {"n", "-1.5e3"}}, nil},
		{"duplicates", `{"a":1,"a":2}`, []member{{"a", "1"}, {"a", "2"}}, nil},
		{"array", `[1]`, nil, ErrNotObject},
		{"string", `"x"`, nil, ErrNotObject},
		{"truncated", `{"a":`, nil, ErrSyntax},
		{"missing colon", `{"a" 1}`, nil, ErrSyntax},
		{"missing comma", `{"a":1 "b":2}`, []member{{"a", "1"}}, ErrSyntax},
		{"bad literal", `{"a":tru}`, nil, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scanAll(t, []byte(tt.in))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("members = %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("member %d = %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestKeyIsAndStr(t *testing.T) {
	tests := []struct {
		raw, name string
		want      bool
	}{
		{"ts", "ts", true},
		{"ts", "t", false},
		{`t\u0073`, "ts", true},
		{`t\"`, `t"`, true},
	}
	for _, tt := range tests {
		if got := KeyIs([]byte(tt.raw), tt.name); got != tt.want {
			t.Errorf("KeyIs(%q, %q) = %v", tt.raw, tt.name, got)
		}
	}
	for in, want := range map[string]string{`"abc"`: "abc", `"a\nb"`: "a\nb", `"\u00e9"`: "é", `""`: "", `"é"`: "é"} {
		got, err := Str([]byte(in))
		if err != nil || got != want {
			t.Errorf("Str(%s) = %q, %v; want %q", in, got, err, want)
		}
		gotb, err := StrBytes([]byte(in))
		if err != nil || string(gotb) != want {
			t.Errorf("StrBytes(%s) = %q, %v; want %q", in, gotb, err, want)
		}
	}
	for _, in := range []string{`abc`, `"`, `"a` + "\x01" + `"`} {
		if _, err := Str([]byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("Str(%q) err = %v, want ErrSyntax", in, err)
		}
	}
}

func TestKindOf(t *testing.T) {
	for in, want := range map[string]Kind{"null": Null, "true": Bool, "false": Bool, "-1": Number, "0.5": Number,
		`"s"`: String, "[]": Array, "{}": Object, "": Invalid, "x": Invalid} {
		if got := KindOf([]byte(in)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzObject holds the scanner to encoding/json on valid objects and to
// "no panic" on anything else.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":{"b":[1,2,{"c":"d"}]},"e":"f\"g"}`, `{"\u0041":null}`, `[1]`, `{"a":`, `{"a":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := scanAll(t, b)
		var probe any
		if json.Unmarshal(b, &probe) != nil {
			return // invalid input: only "no panic" is promised
		}
		if _, isObj := probe.(map[string]any); !isObj {
			if !errors.Is(err, ErrNotObject) {
				t.Fatalf("non-object %q: err = %v", b, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid object %q: %v", b, err)
		}
		want := stdMembers(t, b)
		if len(got) != len(want) {
			t.Fatalf("%q: members %q, want %q", b, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: member %d = %q, want %q", b, i, got[i], want[i])
			}
		}
	})
}

// skipStringBytes is skipString's rule byte by byte, as it was written
// first: the reference FuzzSkipString holds the fast one to.
func skipStringBytes(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, true
		case '\\':
			j++
		}
	}
	return 0, false
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"`, `""`, `"a"`, `"\"`, `"\""`, `"\\"`, `"\\\"x"`, `"a\`, `"\\\\\\"`,
		`"` + strings.Repeat(`ab\"`, 40) + `"tail`, `"` + strings.Repeat("x", 1000) + `\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		gotEnd, gotEsc, gotOK := skipString(b, 0)
		wantEnd, wantOK := skipStringBytes(b, 0)
		if gotEnd != wantEnd || gotOK != wantOK {
			t.Fatalf("skipString(%q) = %d, %v; byte by byte: %d, %v", b, gotEnd, gotOK, wantEnd, wantOK)
		}
		if wantEsc := bytes.IndexByte(b[1:max(gotEnd-1, 1)], '\\') >= 0; gotOK && gotEsc != wantEsc {
			t.Fatalf("skipString(%q): escape %v, want %v", b, gotEsc, wantEsc)
		}
	})
}

// BenchmarkSkipString: a record's 830-byte string field (the load
// harness's pad) and a short one (a key).
func BenchmarkSkipString(b *testing.B) {
	for _, s := range []string{`"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789 ", 22) + `"`, `"latency_ms"`} {
		for _, bc := range []struct {
			name string
			f    func([]byte, int) (int, bool)
		}{{"fast", func(b []byte, i int) (int, bool) { end, _, ok := skipString(b, i); return end, ok }}, {"bytes", skipStringBytes}} {
			b.Run(fmt.Sprintf("%s-%d", bc.name, len(s)), func(b *testing.B) {
				in := []byte(s)
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					if _, ok := bc.f(in, 0); !ok {
						b.Fatal("not a string")
					}
				}
			})
		}
	}
}

// TestScannerEscaped: Escaped is true exactly for a string value with a
// '\' in it, short or past skipString's byte-by-byte prefix, and false for
// other kinds even when their nested strings hold escapes.
func TestScannerEscaped(t *testing.T) {
	long := strings.Repeat("x", 40)
	rec := `{"a":"plain","b":"a\"b","c":"` + long + `","d":"` + long + `\\n","e":["\n"],"f":{"g":"\u0041"},"h":1,` +
		`"i":"` + long + `\"` + long + `","j":""}`
	want := map[string]bool{"a": false, "b": true, "c": false, "d": true, "e": false, "f": false, "h": false, "i": true, "j": false}
	sc, err := NewScanner([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		k, _, ok := sc.Next()
		if !ok {
			break
		}
		n++
		if got := sc.Escaped(); got != want[string(k)] {
			t.Errorf("member %q: Escaped() = %v, want %v", k, got, want[string(k)])
		}
	}
	if sc.Err() != nil || n != len(want) {
		t.Fatalf("scanned %d members, err %v; want %d", n, sc.Err(), len(want))
	}
}
