package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// The adversarial review of the two-pass check (fastscan.go): every verdict
// of validRecord, scanRecord and validFast is held to encoding/json and
// utf8.Valid on records built to hit 64-byte block edges, the padded last
// block, the 2 KiB limit of the fast path and every byte class.

// advWant is the contract: one JSON value (RFC 8259, encoding/json's
// verdict) in valid UTF-8.
func advWant(b []byte) bool { return json.Valid(b) && utf8.Valid(b) }

// advCheck fails when any of the three checks gives a sure verdict that
// differs from advWant, or validRecord is unsure of a shallow record.
func advCheck(t *testing.T, b []byte) {
	t.Helper()
	want := advWant(b)
	got, sure := validRecord(b)
	if sure && got != want || !sure && got {
		t.Fatalf("validRecord(%q) = %v (sure %v), want %v", b, got, sure, want)
	}
	if got, sure := scanRecord(b); sure && got != want || !sure && got {
		t.Fatalf("scanRecord(%q) = %v (sure %v), want %v", b, got, sure, want)
	}
	if got, sure, done := validFast(b); done && (sure && got != want || !sure && got) {
		t.Fatalf("validFast(%q) = %v (sure %v), want %v", b, got, sure, want)
	}
	// The verdict parseLines acts on: checkRecord, which is validRecord's
	// when it is sure and the slow paths' when not.
	if sure && !advFull {
		return
	}
	if err := checkRecord(b, 1); (err == nil) != want {
		t.Fatalf("checkRecord(%q) = %v, want valid %v", b, err, want)
	}
}

// advFragments are values, valid and not, put at every offset below.
var advFragments = []string{
	`""`, `"a"`, `"`, `"""`, `"a"b"`, `{"a":"b"}`, `{"a":"b"`, `{"a":"b}`, `{"a"}`, `{"a":}`, `{:1}`, `{"a":1,}`, `{"a":1,"b"}`,
	`[]`, `[ ]`, `[`, `]`, `[1,]`, `[,1]`, `[1 2]`, `[1,,2]`, `[[]]`, `[[]`, `[]]`, `{}`, `{ }`, `{}}`, `{"a":[}`, `{"a":{]}`,
	`0`, `-0`, `-`, `--1`, `01`, `00`, `-01`, `1.`, `1.e5`, `.5`, `1e`, `1e+`, `1E-`, `1e5`, `1E+05`, `-0.0e-0`,
	`1e999999999999999999999`, `123456789012345678901234567890`, `1.5e308`, `+1`, `0x1`, `1_0`, `Infinity`, `NaN`,
	`true`, `tru`, `truee`, `false`, `fals`, `null`, `nulll`, `nul`, `True`, `NULL`,
	`"\u00e9"`, `"\u00"`, `"\uD800"`, `"\x"`, `"\/"`, `"\\"`, `"\"`, `"\\\"`, `"a\"b"`,
	"\"\x7f\"", "\x7f", "\"\u00a0\"", "\u00a0", "\"é\"", "é", "\"\xc3\"", "\"\xc3\xa9\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"",
	"\"\xe0\x80\xaf\"", "\"\xf4\x90\x80\x80\"", "\"\xf0\x9f\x98\x80\"", "\"\xf0\x9f\x98\"", "\"\xff\"", "\"\xfe\"", "\"\x80\"",
	"\"\x00\"", "\"\x1f\"", "\"\t\"", "\"\n\"", "\x00", "1\x00", "[1,\t2]", "[1,\f2]", "[1,\v2]", "{\"a\"\r:\n1}",
	"[1,\u00a02]", "\ufeff1", "1 ", " 1", "1\t", "1\r",
}

// advEmbed returns the records that put frag at every offset in 0..n from
// a 64-byte block's start: after leading blanks, inside an object after a
// padding string, and (for records built to be valid) as an array element.
func advEmbed(frag string, pad int) [][]byte {
	p := strings.Repeat("x", pad)
	return [][]byte{
		[]byte(strings.Repeat(" ", pad) + frag),
		[]byte(`{"p":"` + p + `","v":` + frag + `}`),
		[]byte(`["` + p + `",` + frag + `]`),
		[]byte(`"` + p + `"` + frag),
		[]byte(`{"` + p + `":` + frag + `}`),
		[]byte(`["` + p + frag + `"]`), // inside a string
	}
}

func TestAdvFragmentsAtEveryOffset(t *testing.T) {
	for _, frag := range advFragments {
		for pad := 0; pad < 140; pad++ {
			if !advFull && pad > 72 && pad < 120 {
				continue
			}
			for _, b := range advEmbed(frag, pad) {
				advCheck(t, b)
			}
		}
		// Around the fast path's 2 KiB limit (every offset with ADV_FULL).
		for pad := fastMax - 80; pad < fastMax+8; pad++ {
			if !advFull && pad%16 > 2 && pad%16 < 13 {
				continue
			}
			for _, b := range advEmbed(frag, pad) {
				advCheck(t, b)
			}
		}
	}
}

// TestAdvByteAtEveryPosition replaces each byte of valid records, of every
// length 1..300 and around 2 KiB, by each byte that means something to
// either pass, inside and outside strings.
func TestAdvByteAtEveryPosition(t *testing.T) {
	subs := []byte{0, 1, '\t', '\n', '\f', '\v', '\r', 0x1f, ' ', '"', '\\', '/', ',', ':', '[', ']', '{', '}', '0', '-', 'e', '.', 't', 0x7f, 0x80, 0xbf, 0xc0, 0xc3, 0xe0, 0xed, 0xf0, 0xf4, 0xf5, 0xff}
	lengths := []int{}
	for n := 1; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	for n := fastMax - 3; n <= fastMax+3; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		base := advValidOfLen(n)
		if len(base) != n || !advWant(base) {
			t.Fatalf("advValidOfLen(%d) = %q", n, base)
		}
		advCheck(t, base)
		positions := []int{}
		for p := range n {
			// All positions of short records; near block edges and the
			// end of long ones.
			if n <= 160 && (advFull || n%7 == 0 || n%64 < 2 || n%64 == 63) || p%64 < 2 || p%64 > 61 || p >= n-3 {
				positions = append(positions, p)
			}
		}
		b := bytes.Clone(base)
		for _, p := range positions {
			for _, c := range subs {
				b[p] = c
				advCheck(t, b)
			}
			b[p] = base[p]
		}
		// A record cut anywhere.
		for k := range n {
			if advFull || n <= 160 && n%7 == 0 || k%64 < 2 || k%64 > 61 || k >= n-3 {
				advCheck(t, base[:k])
			}
		}
	}
}

// advValidOfLen returns a valid record of exactly n bytes, of the
// harness's shape: keys, short strings, numbers, literals, nesting.
func advValidOfLen(n int) []byte {
	switch {
	case n < 3:
		return []byte("123"[:n])
	case n < 12:
		return []byte(`"` + strings.Repeat("a", n-2) + `"`)
	}
	var b []byte
	b = append(b, `{"id":12,"s":"é","a":[1,-2.5e3,true,null,{"k":"v"}],"t":"`...)
	for len(b) < n-2 {
		b = append(b, "abcdefg hij"[len(b)%11])
	}
	b = append(b, `"}`...)
	if len(b) > n {
		// Shorter than the prefix: a string of n bytes instead.
		return []byte(`"` + strings.Repeat("q", n-2) + `"`)
	}
	return b
}

// TestAdvInvalidUTF8AtBlockEdges puts every invalid (and valid) multi-byte
// sequence so that it starts, straddles or ends at a 64-byte and a 16-byte
// edge, and at the record's end.
func TestAdvInvalidUTF8AtBlockEdges(t *testing.T) {
	seqs := []string{"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\xed\xa0\x80", "\xed\xbf\xbf",
		"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
		"\x80", "\xbf", "\xfe", "\xff", "\xc3\xa9\xa9", "\xef\xbb\xbf", "\xee\x80\x80", "\xf4\x8f\xbf\xbf"}
	for _, s := range seqs {
		for pad := 0; pad < 140; pad++ {
			advCheck(t, []byte(`"`+strings.Repeat("a", pad)+s+`"`))
			advCheck(t, []byte(`"`+strings.Repeat("a", pad)+s))
			advCheck(t, []byte(`{"`+strings.Repeat("a", pad)+s+`":1}`))
			advCheck(t, []byte(strings.Repeat(" ", pad)+s))
			advCheck(t, []byte(`[`+strings.Repeat("1,", pad/2)+s+`]`))
		}
		for pad := fastMax - 70; pad < fastMax+4; pad++ {
			advCheck(t, []byte(`"`+strings.Repeat("a", pad)+s+`"`))
		}
	}
}

// TestAdvNesting holds the depth limits: scanDepth (unsure), encoding/json's
// 10,000 through checkRecord, mixed and unbalanced containers.
func TestAdvNesting(t *testing.T) {
	for _, d := range []int{1, 2, 63, 64, 65, 127, 128, 255, 256, 257, 300, 1000} {
		advCheck(t, []byte(strings.Repeat("[", d)+strings.Repeat("]", d)))
		advCheck(t, []byte(strings.Repeat("[", d)+strings.Repeat("]", d-1)))
		advCheck(t, []byte(strings.Repeat("[", d)+strings.Repeat("]", d+1)))
		advCheck(t, []byte(strings.Repeat(`{"a":`, d)+"1"+strings.Repeat("}", d)))
		advCheck(t, []byte(strings.Repeat(`{"a":[`, d)+"1"+strings.Repeat("]}", d)))
		advCheck(t, []byte(strings.Repeat(`{"a":[`, d)+"1"+strings.Repeat("}]", d)))
		advCheck(t, []byte(strings.Repeat(`[{"a":`, d)+"1"+strings.Repeat("}]", d-1)+"]}"))
		advCheck(t, []byte(strings.Repeat(`[{"a":"b"},`, d)+"1"+strings.Repeat("]", d)))
		// Deep and not UTF-8, or with an escape: the unsure verdict goes
		// to the slow paths, which must still refuse.
		advCheck(t, []byte(strings.Repeat("[", d)+"\"\xed\xa0\x80\""+strings.Repeat("]", d)))
		advCheck(t, []byte(strings.Repeat("[", d)+"\"\xc3\""+strings.Repeat("]", d)))
		advCheck(t, []byte(strings.Repeat("[", d)+`"\u00e9\x"`+strings.Repeat("]", d)))
		advCheck(t, []byte(strings.Repeat("[", d)+"\"\x01\""+strings.Repeat("]", d)))
	}
	for _, d := range []int{9999, 10000, 10001} {
		b := []byte(strings.Repeat("[", d) + strings.Repeat("]", d))
		if err := checkRecord(b, 1); (err == nil) != json.Valid(b) {
			t.Fatalf("checkRecord of depth %d = %v, json.Valid %v", d, err, json.Valid(b))
		}
		b = []byte(strings.Repeat("[", d-1) + "\"\xff\"" + strings.Repeat("]", d-1))
		if err := checkRecord(b, 1); err == nil {
			t.Fatalf("checkRecord accepts invalid UTF-8 at depth %d", d)
		}
	}
}

// TestAdvRandomRecords: random records from a JSON-ish alphabet, lengths
// 0..300 and around 2 KiB (ADV_N sets the count; 3000 by default).
func TestAdvRandomRecords(t *testing.T) {
	n := 3000
	if s := advEnvInt("ADV_N"); s > 0 {
		n = s
	}
	rng := rand.New(rand.NewPCG(13, 26))
	tokens := []string{`"`, `"`, `"`, `"ab"`, `"k":`, `:`, `,`, `,`, `[`, `]`, `{`, `}`, ` `, `1`, `-0`, `2.5`, `1e9`, `true`, `null`, `false`,
		`\`, `\"`, `\\`, "é", "\xc3", "\xa9", "\x00", "\x1f", "\t", "\x7f", "\xff", "\xed\xa0\x80", `"` + strings.Repeat("z", 60) + `"`}
	for range n {
		var b []byte
		target := rng.IntN(300)
		if rng.IntN(8) == 0 {
			target = fastMax - 100 + rng.IntN(200)
		}
		for len(b) < target {
			b = append(b, tokens[rng.IntN(len(tokens))]...)
		}
		advCheck(t, b)
		// And the same record made mostly valid: a valid prefix value.
		v := append([]byte(`{"r":[`), advValidOfLen(1+rng.IntN(200))...)
		v = append(v, `]}`...)
		advCheck(t, v)
	}
}

// TestAdvConcurrent runs the checks from many goroutines on shared records
// (run it under -race): the masks and stacks must be per call.
func TestAdvConcurrent(t *testing.T) {
	var recs [][]byte
	for n := 1; n < 300; n += 7 {
		recs = append(recs, advValidOfLen(n))
		bad := bytes.Clone(advValidOfLen(n))
		bad[n/2] = '"'
		recs = append(recs, bad)
	}
	recs = append(recs, advValidOfLen(fastMax), advValidOfLen(fastMax+1))
	want := make([]bool, len(recs))
	for i, r := range recs {
		want[i] = advWant(r)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 200 {
				i := (g*31 + k) % len(recs)
				if got, sure := validRecord(recs[i]); !sure || got != want[i] {
					errs <- fmt.Errorf("validRecord(%q) = %v %v, want %v", recs[i], got, sure, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestAdvParseLineNumbers holds Parse's NDJSON verdict and the line of its
// error to a model: split at '\n', drop one trailing '\r', skip lines of
// ' ', '\t' and '\r' only; the first other line that is not valid JSON in
// valid UTF-8 is the one named.
func TestAdvParseLineNumbers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	lines := []string{"", " ", "\t", "\r", " \r", "\f", "\v", "\u00a0", `{"a":1}`, `{"a":1}` + "\r", `{"a":1}` + "\r\r", "\r" + `{"a":1}`,
		`[1,2]`, `"x"`, `{"a":"b"`, `{"a":"\u00e9"}`, "\"\xc3\"", "\"\xed\xa0\x80\"", `tru`, `nulll`, `01`, `-0`, `1.e5`, `1e`,
		"{\"a\":\"b\x00\"}", "\x00", " 1 ", "1 2", `{"p":"` + strings.Repeat("w", 70) + `"}`, `{"p":"` + strings.Repeat("w", 70) + `}`,
		string(advValidOfLen(fastMax)), string(advValidOfLen(fastMax-1)) + "\r"}
	for range 3000 {
		k := 1 + rng.IntN(6)
		var body []byte
		parts := make([]string, k)
		for i := range parts {
			parts[i] = lines[rng.IntN(len(lines))]
		}
		body = []byte(strings.Join(parts, "\n"))
		if rng.IntN(2) == 0 {
			body = append(body, '\n')
		}
		wantLine := 0
		for i, l := range bytes.Split(body, []byte("\n")) {
			l = bytes.TrimSuffix(l, []byte("\r"))
			if len(bytes.Trim(l, " \t\r")) == 0 {
				continue
			}
			if !advWant(l) {
				wantLine = i + 1
				break
			}
		}
		_, err := Parse("application/x-ndjson", body, Limits{})
		var le *LineError
		switch {
		case wantLine == 0 && err != nil:
			t.Fatalf("Parse(%q) = %v, want it accepted", body, err)
		case wantLine > 0 && (!errors.As(err, &le) || le.Line != wantLine || !errors.Is(err, ErrInvalidJSON)):
			t.Fatalf("Parse(%q) = %v, want invalid JSON at line %d", body, err, wantLine)
		}
	}
}

// FuzzAdvBlockEdge puts the fuzzed bytes at a fuzzed offset inside and
// outside a string, so that a few interesting bytes land on every block edge.
func FuzzAdvBlockEdge(f *testing.F) {
	f.Add([]byte(`"a"`), uint16(60), uint8(0))
	f.Add([]byte("\xed\xa0\x80"), uint16(63), uint8(1))
	f.Add([]byte(`\"`), uint16(2040), uint8(2))
	f.Fuzz(func(t *testing.T, frag []byte, off uint16, shape uint8) {
		pad := int(off) % (fastMax + 64)
		bs := advEmbed(string(frag), pad)
		advCheck(t, bs[int(shape)%len(bs)])
	})
}

// advFull (ADV_FULL=1) runs every case the tests name; the default run
// samples the long records' offsets and takes checkRecord only when
// validRecord is unsure.
var advFull = os.Getenv("ADV_FULL") != ""

func advEnvInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// TestAdvNumbers: integers and fractions of every length up to 17 digits
// (the eight-byte digit scans cross a word), each followed by every byte
// value, alone and as an array element.
func TestAdvNumbers(t *testing.T) {
	digits := "12345678901234567890"
	for il := 1; il <= 17; il++ {
		for _, fl := range []int{-1, 0, 1, 2, 7, 8, 9, 15, 16, 17} {
			num := digits[:il]
			if fl >= 0 {
				num += "." + digits[20-max(fl, 0):]
			}
			for c := range 256 {
				if !advFull && c > 0x7f && c != 0x80 && c != 0xb9 && c != 0xff {
					continue
				}
				s := num + string([]byte{byte(c)})
				advCheck(t, []byte(s))
				advCheck(t, []byte("["+s+"]"))
				advCheck(t, []byte("["+s+"1]"))
				advCheck(t, []byte(`{"a":`+s+`5e1}`))
			}
		}
	}
}
