package batch

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// The fast check of a record (validFast) works in two passes, as simdjson
// does: the first finds every '"' of the record, sixteen bytes at a time
// on amd64 (quoteBlocks), and whether it holds a byte below 0x20, a '\' or
// a byte of 0x80 or above; the second walks the grammar from token to
// token and crosses each string in one step, from its opening quote to the
// next. That is right only in a record with neither escapes nor control
// characters, whose every '"' opens or closes a string and whose strings
// hold nothing to check but their UTF-8: the others go to scanRecord.
// Records of the harness's shape (issue 26: 200 bytes, most of them keys,
// short strings and numbers) spent most of the check's time in per-string
// work, which this makes a few instructions.

// fastMax is the longest record validFast takes; its quote masks live on
// the stack. Longer records are mostly long strings, which scanRecord
// crosses eight bytes at a time anyway.
const fastMax = 2048

// Flags of quoteBlocks.
const (
	blockBad  = 1 << iota // a byte below 0x20 or a '\'
	blockHigh             // a byte of 0x80 or above
)

// quoteBlocksGo sets q[k] to the mask of the '"' bytes in the k-th 64-byte
// block of b (bit j for byte 64k+j), then, if tail is not nil, the next
// word to tail's, and returns the blockBad and blockHigh flags of all of
// them. len(b) must be a multiple of 64, q must have a word for each block.
func quoteBlocksGo(b []byte, tail *[64]byte, q []uint64) (flags uint64) {
	const ones = 0x0101010101010101
	var ctl, hi uint64
	block := func(blk []byte) uint64 {
		var m uint64
		for j := 0; j < 64; j += 8 {
			x := binary.LittleEndian.Uint64(blk[j:])
			// Below 0x20 or '\': exact per byte (no carry crosses bytes).
			ctl |= ^((x&low7+ones*0x60)|x)&high | zeroBytes(x^(ones*'\\'))
			hi |= x
			m |= (zeroBytes(x^(ones*'"')) >> 7 * 0x0102040810204080 >> 56) << j
		}
		return m
	}
	k := 0
	for ; k+64 <= len(b); k += 64 {
		q[k>>6] = block(b[k : k+64])
	}
	if tail != nil {
		q[k>>6] = block(tail[:])
	}
	if ctl != 0 {
		flags |= blockBad
	}
	if hi&high != 0 {
		flags |= blockHigh
	}
	return flags
}

// blanks pads the last block of a record: spaces are neither quotes nor
// flagged.
const blanks = "                                                                "

// validFast is validRecord for a record of at most fastMax bytes with no
// escape and no control character; done is false for any other record,
// whose verdict is then scanRecord's.
func validFast(b []byte) (ok, sure, done bool) {
	n := len(b)
	if n > fastMax {
		return false, false, false
	}
	var q [fastMax / 64]uint64
	whole := n &^ 63
	var tail *[64]byte
	if whole < n {
		var t [64]byte
		copy(t[copy(t[:], b[whole:]):], blanks)
		tail = &t
	}
	flags := quoteBlocks(b[:whole], tail, q[:])
	if flags&blockBad != 0 {
		return false, false, false
	}
	if flags&blockHigh != 0 && !utf8.Valid(b) {
		return false, true, true
	}
	// The grammar, as scanRecord walks it; the only white space left is ' '.
	var stack [scanDepth / 64]uint64 // bit set: an object, clear: an array
	depth, i := 0, 0
	inObject, key := false, false
value:
	for i < n && b[i] == ' ' {
		i++
	}
	if i >= n {
		return false, true, true
	}
	switch c := b[i]; {
	case c == '"':
		key = false
		goto str
	case c >= '1' && c <= '9':
		// A number without sign or exponent, the commonest, here; the
		// others in scanNumber.
		j := digitsFast(b, i+1)
		if j < n && b[j] == '.' {
			k := digitsFast(b, j+1)
			if k == j+1 {
				return false, true, true
			}
			j = k
		}
		if j >= n || b[j] != 'e' && b[j] != 'E' {
			i = j
			goto end
		}
		i = scanNumber(b, i)
	case c == '-' || c == '0':
		i = scanNumber(b, i)
	case c == '{':
		if depth == scanDepth {
			return false, false, true
		}
		stack[depth>>6] |= 1 << (depth & 63)
		depth++
		inObject = true
		for i++; i < n && b[i] == ' '; {
			i++
		}
		if i < n && b[i] == '}' {
			i++
			goto closed
		}
		goto key
	case c == '[':
		if depth == scanDepth {
			return false, false, true
		}
		stack[depth>>6] &^= 1 << (depth & 63)
		depth++
		inObject = false
		for i++; i < n && b[i] == ' '; {
			i++
		}
		if i < n && b[i] == ']' {
			i++
			goto closed
		}
		goto value
	case c == 't':
		i = literal(b, i, "true")
	case c == 'f':
		i = literal(b, i, "false")
	case c == 'n':
		i = literal(b, i, "null")
	default:
		return false, true, true
	}
	if i < 0 {
		return false, true, true
	}
end:
	// A value ended just before i: what may follow depends on its container.
	for i < n && b[i] == ' ' {
		i++
	}
	if depth == 0 {
		return i == n, true, true
	}
	if i >= n {
		return false, true, true
	}
	switch b[i] {
	case ',':
		i++
		if inObject {
			goto key
		}
		goto value
	case '}':
		if !inObject {
			return false, true, true
		}
	case ']':
		if inObject {
			return false, true, true
		}
	default:
		return false, true, true
	}
	i++
closed:
	// A container ended just before i.
	depth--
	if depth > 0 {
		inObject = stack[(depth-1)>>6]>>((depth-1)&63)&1 == 1
	}
	goto end
key:
	// An object member: a string, a colon, then its value.
	for i < n && b[i] == ' ' {
		i++
	}
	if i >= n || b[i] != '"' {
		return false, true, true
	}
	key = true
str:
	// b[i] opens a string, which the next quote closes.
	if i++; i >= n {
		return false, true, true
	}
	if w := q[i>>6] >> (i & 63); w != 0 {
		i += bits.TrailingZeros64(w)
	} else {
		for {
			if i = (i | 63) + 1; i >= n {
				return false, true, true
			}
			if w = q[i>>6]; w != 0 {
				i += bits.TrailingZeros64(w)
				break
			}
		}
	}
	i++
	if !key {
		goto end
	}
	for i < n && b[i] == ' ' {
		i++
	}
	if i >= n || b[i] != ':' {
		return false, true, true
	}
	i++
	goto value
}

// digitsFast is digits, eight bytes at a time.
func digitsFast(b []byte, i int) int {
	const ones = 0x0101010101010101
	for i+8 <= len(b) {
		// 0x80 in each byte that is not a digit: below '0' (the
		// subtraction), above '9' (the addition) or 0x80 and above. A
		// borrow or a carry only leaves such a byte, so the lowest byte
		// flagged is exact.
		x := binary.LittleEndian.Uint64(b[i:])
		if m := ((x - ones*'0') | (x + ones*0x46) | x) & high; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	return digits(b, i)
}
