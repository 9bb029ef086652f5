package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"

	"github.com/valyala/fastjson"
)

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// validJSON reports whether b is one valid JSON value, with exactly
// encoding/json's verdict. fastjson validates three to five times faster
// and without allocating, but it lets control characters through inside
// strings and nests deeper than encoding/json's 10,000 levels: lines with
// either go to encoding/json, as does every line fastjson refuses, so the
// verdict is always encoding/json's (FuzzValidJSON holds the two to that).
func validJSON(b []byte) bool {
	if hasControl(b) || len(b) > 2*maxDepth && bytes.Count(b, []byte{'['})+bytes.Count(b, []byte{'{'}) > maxDepth {
		return json.Valid(b)
	}
	if fastjson.ValidateBytes(b) == nil {
		return true
	}
	return json.Valid(b)
}

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time: a word has one exactly when (x - 0x20…) & ^x & 0x80… is not zero.
func hasControl(b []byte) bool {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if (x-lo)&^x&hi != 0 {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return true
		}
	}
	return false
}
