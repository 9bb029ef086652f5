package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"slices"
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
	for _, f := range []struct {
		name string
		f    func([]byte) (bool, bool)
	}{{"validRecord", validRecord}, {"scanRecord", scanRecord}} {
		got, sure := f.f(b)
		if sure && got != want {
			t.Errorf("%s(%.60q) = %v, encoding/json and utf8.Valid say %v", f.name, b, got, want)
		}
		if !sure && !bytes.Contains(b, []byte(strings.Repeat("[", scanDepth/2))) && !bytes.Contains(b, []byte(strings.Repeat(`{"a":`, scanDepth/2))) {
			t.Errorf("%s(%.60q) is not sure of a shallow line", f.name, b)
		}
	}
	if _, _, done := validFast(b); !done && len(b) <= fastMax && !bytes.ContainsAny(b, "\\\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f") {
		t.Errorf("validFast(%.60q) left a record without escapes and control characters to scanRecord", b)
	}
}

// TestValidFastShapes runs the record shapes the fast check must get right
// at every offset from a 64-byte block's start: strings across blocks, a
// quote as the last byte, records of exactly 64 and 128 bytes, and the
// longest record the fast check takes and one byte more.
func TestValidFastShapes(t *testing.T) {
	base := []string{`{"a":"b"}`, `{"a":"b"`, `{"a":"b}`, `"abc`, `"`, `""`, `["x","y",{"z":[1,2.5,-3e2,true,false,null]}]`, `{"k" : "v" , "l":[ ]}`,
		`{"a":1}x`, `{"a" "b"}`, `{"a":}`, `{"é":"ü✓"}`, "{\"a\":\"\xff\"}", "\xc3\xa9", `{"a":01}`, `{"a":-}`, `[1,]`, `{"a":[}`, `{"a":"b",}`}
	for _, s := range base {
		for pad := 0; pad < 140; pad++ {
			// Leading blanks move the record over block boundaries.
			checkValidRecord(t, []byte(strings.Repeat(" ", pad)+s))
			checkValidRecord(t, []byte(`{"p":"`+strings.Repeat("x", pad)+`","v":`+s+`}`))
		}
	}
	for _, n := range []int{63, 64, 65, 127, 128, 129, fastMax - 1, fastMax, fastMax + 1} {
		for _, tail := range []string{`"}`, `"`, `"}}`, `x}`} {
			b := []byte(`{"a":"` + strings.Repeat("y", max(n-6-len(tail)+1, 0)) + tail)
			checkValidRecord(t, b)
		}
	}
}

// TestQuoteBlocks holds quoteBlocks (assembly on amd64) to quoteBlocksGo.
func TestQuoteBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	t.Logf("seed 26")
	alphabet := []byte{0, 1, 0x1f, 0x20, 0x21, '"', 0x23, '\\', 0x5b, 0x5d, 'a', 0x7e, 0x7f, 0x80, 0x9f, 0xa0, 0xc3, 0xff}
	for range 2000 {
		b := make([]byte, 64*(1+rng.IntN(4)))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(rng.IntN(26))
			}
		}
		checkQuoteBlocks(t, b)
	}
	for c := range 256 {
		for pos := range 64 {
			b := make([]byte, 128)
			for i := range b {
				b[i] = 'a'
			}
			b[pos+64] = byte(c)
			checkQuoteBlocks(t, b)
		}
	}
}

func checkQuoteBlocks(t *testing.T, b []byte) {
	t.Helper()
	// The last block goes in as the tail.
	q1, q2 := make([]uint64, len(b)/64), make([]uint64, len(b)/64)
	tail := (*[64]byte)(b[len(b)-64:])
	f1, f2 := quoteBlocks(b[:len(b)-64], tail, q1), quoteBlocksGo(b[:len(b)-64], tail, q2)
	var want uint64
	for i, c := range b {
		if c == '"' && q1[i/64]>>(i%64)&1 == 0 {
			t.Fatalf("quoteBlocks misses the quote at %d of %q", i, b)
		}
		if c < 0x20 || c == '\\' {
			want |= blockBad
		}
		if c >= 0x80 {
			want |= blockHigh
		}
	}
	if f1 != want || f2 != want || !slices.Equal(q1, q2) {
		t.Fatalf("quoteBlocks(%q) = %#x %x, quoteBlocksGo %#x %x, want flags %#x", b, f1, q1, f2, q2, want)
	}
	q3 := make([]uint64, len(b)/64)
	if f3 := quoteBlocks(b, nil, q3); f3 != want || !slices.Equal(q3, q1) {
		t.Fatalf("quoteBlocks(%q) without a tail = %#x %x, with one %#x %x", b, f3, q3, f1, q1)
	}
	for i, m := range q1 {
		if bits.OnesCount64(m) != bytes.Count(b[64*i:64*i+64], []byte{'"'}) {
			t.Fatalf("quoteBlocks(%q) block %d: %d quotes in the mask", b, i, bits.OnesCount64(m))
		}
	}
}

func FuzzQuoteBlocks(f *testing.F) {
	f.Add([]byte(`{"a":"\\"b\u00e9","c":[1,2]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = append(b, bytes.Repeat([]byte{'"'}, 64-len(b)%64)...)
		checkQuoteBlocks(t, b)
	})
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

// TestDigitsFast holds digitsFast to digits with every byte value at every
// position of a run of digits, behind others that could lend or carry.
func TestDigitsFast(t *testing.T) {
	for _, fill := range []byte{'0', '9', '5'} {
		for pos := range 12 {
			for c := range 256 {
				for _, before := range []byte{'1', 0x00, 0x2f, 0xff} {
					b := bytes.Repeat([]byte{fill}, 12)
					b[pos] = byte(c)
					if pos > 0 {
						b[pos-1] = before
					}
					for start := range 3 {
						if got, want := digitsFast(b, start), digits(b, start); got != want {
							t.Fatalf("digitsFast(%q, %d) = %d, digits %d", b, start, got, want)
						}
					}
				}
			}
		}
	}
}
