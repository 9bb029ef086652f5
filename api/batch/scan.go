package batch

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// scanDepth is how deep validRecord tracks nesting itself; deeper lines
// are left to validJSON, which follows encoding/json to its 10,000 levels.
const scanDepth = 256

// validRecord is the check of one NDJSON record in a single pass: b is one
// JSON value (encoding/json's verdict) in valid UTF-8 (utf8.Valid's), the
// two checks parseLines needs, without the three passes of validJSON and
// utf8.Valid (a control-character scan, fastjson, the UTF-8 scan). With
// records of a few hundred bytes those passes were most of the CPU an
// NDJSON write costs. It allocates nothing. sure is false when b nests
// deeper than scanDepth: the caller decides with validJSON then. A record
// without escapes and control characters goes through validFast
// (fastscan.go), the others through scanRecord.
// FuzzValidRecord holds both to encoding/json and utf8.Valid.
func validRecord(b []byte) (ok, sure bool) {
	if ok, sure, done := validFast(b); done {
		return ok, sure
	}
	return scanRecord(b)
}

// scanRecord is validRecord for any record: strings are crossed eight
// bytes at a time up to the first byte that needs a look.
func scanRecord(b []byte) (ok, sure bool) {
	var stack [scanDepth / 64]uint64 // bit set: an object, clear: an array
	depth, i, n := 0, 0, len(b)
	var inObject bool
value:
	i = skipSpace(b, i)
	if i >= n {
		return false, true
	}
	switch c := b[i]; {
	case c == '{':
		if depth == scanDepth {
			return false, false
		}
		stack[depth>>6] |= 1 << (depth & 63)
		depth++
		if i = skipSpace(b, i+1); i < n && b[i] == '}' {
			depth--
			i++
			goto end
		}
		goto key
	case c == '[':
		if depth == scanDepth {
			return false, false
		}
		stack[depth>>6] &^= 1 << (depth & 63)
		depth++
		if i = skipSpace(b, i+1); i < n && b[i] == ']' {
			depth--
			i++
			goto end
		}
		goto value
	case c == '"':
		i = scanString(b, i+1)
	case c == '-' || c >= '0' && c <= '9':
		i = scanNumber(b, i)
	case c == 't':
		i = literal(b, i, "true")
	case c == 'f':
		i = literal(b, i, "false")
	case c == 'n':
		i = literal(b, i, "null")
	default:
		return false, true
	}
	if i < 0 {
		return false, true
	}
end:
	// A value ended just before i: what may follow depends on its container.
	i = skipSpace(b, i)
	if depth == 0 {
		return i == n, true
	}
	if i >= n {
		return false, true
	}
	inObject = stack[(depth-1)>>6]>>((depth-1)&63)&1 == 1
	switch b[i] {
	case ',':
		i = skipSpace(b, i+1)
		if inObject {
			goto key
		}
		goto value
	case '}':
		if !inObject {
			return false, true
		}
	case ']':
		if inObject {
			return false, true
		}
	default:
		return false, true
	}
	depth--
	i++
	goto end
key:
	// An object member: a string, a colon, then its value.
	if i >= n || b[i] != '"' {
		return false, true
	}
	if i = scanString(b, i+1); i < 0 {
		return false, true
	}
	if i = skipSpace(b, i); i >= n || b[i] != ':' {
		return false, true
	}
	i++
	goto value
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// literal returns the index after lit at b[i:], -1 when it is not there.
func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanNumber returns the index after the JSON number starting at b[i],
// -1 when there is none: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	n := len(b)
	if b[i] == '-' {
		if i++; i >= n {
			return -1
		}
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < n && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// scanString returns the index after the closing quote of the string
// whose content starts at b[i], -1 when it is not a valid JSON string in
// valid UTF-8. Plain bytes (printable ASCII, neither '"' nor '\') are
// passed eight at a time, up to the first byte that needs a look.
func scanString(b []byte, i int) int {
	n := len(b)
	for {
		for i+8 <= n {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= n {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= n {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if n-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return -1
			}
			i += size
		}
	}
}

// special returns, for the eight bytes of x (the first in the lowest
// bits), 0x80 in each byte that is a '"', a '\', below 0x20 or not ASCII,
// and 0 in the others. Each byte is computed on its own seven low bits,
// so no carry crosses into the next: the mask is exact.
func special(x uint64) uint64 {
	const ones = 0x0101010101010101
	ctl := ^((x&low7 + ones*0x60) | x) & high // below 0x20, high bit clear
	return zeroBytes(x^(ones*'"')) | zeroBytes(x^(ones*'\\')) | ctl | x&high
}

const low7, high = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080

// zeroBytes returns 0x80 in each byte of v that is 0, and 0 in the others.
func zeroBytes(v uint64) uint64 { return ^((v&low7 + low7) | v | low7) }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
