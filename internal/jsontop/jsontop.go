// Package jsontop reads the top level of one JSON object without decoding
// the rest: each member's key and the raw bytes of its value. Partition
// templates and stream schemas look at a few top-level fields of every
// record on the write path, so this must be fast, allocation-free in the
// common case, and free of the nesting limits of full decoders (fastjson
// stops at 300 levels, which valid records may exceed).
//
// Contract: the input is one valid JSON value (the write path validates each
// record with encoding/json's verdict before it gets here). On valid input
// the members are exactly those encoding/json sees, in order, duplicates
// included. On invalid input the scanner returns an error or a prefix of
// plausible members; it never panics and never reads out of bounds
// (FuzzObject holds both).
package jsontop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Errors returned by this package.
var (
	// ErrNotObject means the value is not a JSON object.
	ErrNotObject = errors.New("not a JSON object")
	// ErrSyntax means the input is not valid JSON.
	ErrSyntax = errors.New("invalid JSON")
)

// Kind is the kind of a raw JSON value, told by its first byte.
type Kind uint8

// Kinds of JSON values.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

var kindNames = [...]string{"invalid", "null", "bool", "number", "string", "array", "object"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Described is k with its article, for messages: "an object", "a bool".
func Described(k Kind) string {
	switch n := k.String(); n {
	case "array", "object", "invalid":
		return "an " + n
	default:
		return "a " + n
	}
}

// KindOf returns the kind of the raw JSON value v (no leading space).
func KindOf(v []byte) Kind {
	if len(v) == 0 {
		return Invalid
	}
	switch c := v[0]; {
	case c == 'n':
		return Null
	case c == 't' || c == 'f':
		return Bool
	case c == '"':
		return String
	case c == '[':
		return Array
	case c == '{':
		return Object
	case c == '-' || c >= '0' && c <= '9':
		return Number
	}
	return Invalid
}

// Scanner walks the members of one JSON object. Its zero value is an
// exhausted scanner. It holds slices of the input: the input must not change
// while they are used.
type Scanner struct {
	b     []byte
	i     int
	err   error
	first bool
	esc   bool // the last value is a string with an escape (Escaped)
}

// NewScanner starts reading the object rec. It fails with ErrNotObject when
// rec is another kind of value.
func NewScanner(rec []byte) (Scanner, error) {
	i := skipSpace(rec, 0)
	if i >= len(rec) || rec[i] != '{' {
		return Scanner{}, ErrNotObject
	}
	return Scanner{b: rec, i: i + 1, first: true}, nil
}

// Next returns the next member: its key as it stands between the quotes
// (escapes not processed, see Key) and its raw value. ok is false at the end
// of the object or on an error (see Err).
func (s *Scanner) Next() (key, val []byte, ok bool) {
	if s.b == nil || s.err != nil {
		return nil, nil, false
	}
	b := s.b
	i := skipSpace(b, s.i)
	if i >= len(b) {
		return s.fail(i, "unexpected end")
	}
	if b[i] == '}' {
		s.i, s.b = i+1, nil
		return nil, nil, false
	}
	if !s.first {
		if b[i] != ',' {
			return s.fail(i, "want ',' or '}'")
		}
		i = skipSpace(b, i+1)
	}
	s.first = false
	if i >= len(b) || b[i] != '"' {
		return s.fail(i, "want a key")
	}
	end, _, ok := skipString(b, i)
	if !ok {
		return s.fail(i, "unterminated key")
	}
	key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return s.fail(i, "want ':'")
	}
	i = skipSpace(b, i+1)
	var vend int
	if s.esc = false; i < len(b) && b[i] == '"' {
		vend, s.esc, ok = skipString(b, i)
	} else {
		vend, ok = skipValue(b, i)
	}
	if !ok {
		return s.fail(i, "invalid value")
	}
	s.i = vend
	return key, b[i:vend], true
}

// Escaped reports whether the value Next returned last is a string with a
// '\\' in it, an escape: false for a string whose text is its bytes
// between the quotes (on valid input), and for other kinds of value.
func (s *Scanner) Escaped() bool { return s.esc }

// Err returns the syntax error that stopped the scanner, if any.
func (s *Scanner) Err() error { return s.err }

func (s *Scanner) fail(at int, msg string) ([]byte, []byte, bool) {
	s.err = fmt.Errorf("%w: at byte %d: %s", ErrSyntax, at, msg)
	return nil, nil, false
}

// KeyIs reports whether the raw key (as Next returns it) is name. Keys
// without escapes are compared in place, without allocating.
func KeyIs(raw []byte, name string) bool {
	if plain(raw) {
		return string(raw) == name
	}
	k, err := Key(raw)
	return err == nil && k == name
}

// Key returns the raw key (as Next returns it) with its escapes processed.
func Key(raw []byte) (string, error) {
	if plain(raw) {
		return string(raw), nil
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return Str(q)
}

// Str decodes the raw JSON string value v.
func Str(v []byte) (string, error) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", fmt.Errorf("%w: not a string", ErrSyntax)
	}
	if in := v[1 : len(v)-1]; plain(in) {
		return string(in), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	return s, nil
}

// plain reports whether the string body b means itself: no escapes, no
// control bytes, valid UTF-8 (encoding/json replaces invalid bytes by
// U+FFFD, so those go through it).
// StrBytes is Str without copying: for a string without escapes it returns
// the bytes between the quotes, a slice of v.
func StrBytes(v []byte) ([]byte, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plain(v[1:len(v)-1]) {
		return v[1 : len(v)-1], nil
	}
	s, err := Str(v)
	return []byte(s), err
}

func plain(b []byte) bool {
	ascii := true
	for _, c := range b {
		if c == '\\' || c < 0x20 {
			return false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	return ascii || utf8.Valid(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"',
// and whether the string holds a '\\' (an escape).
//
// Past its first bytes it finds the closing quote and the escapes with
// bytes.IndexByte, which runs many bytes at a time: a record's strings
// are most of its bytes, and a loop over each one was an eighth of a
// Parquet stream's CPU. It gives
// skipStringBytes's answer (the rule, byte by byte) on every input
// (FuzzSkipString). Each byte is searched at most twice (once for '"',
// once for '\\'), so the cost stays linear in the string's length
// whatever its escapes.
func skipString(b []byte, i int) (end int, esc, ok bool) {
	// Most strings (keys, short values) end within a few bytes, where a
	// loop costs less than two calls.
	j := i + 1
	for stop := min(len(b), j+shortString); j < stop; j++ {
		switch b[j] {
		case '"':
			return j + 1, esc, true
		case '\\':
			esc = true
			j++
		}
	}
	// j is the next byte not yet known to be inside the string (past the
	// end of b when its last byte was escaped).
	for j < len(b) {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, esc, false
		}
		q += j // the first quote from j: the end, unless escaped
		for {
			e := bytes.IndexByte(b[j:q], '\\')
			if e < 0 {
				return q + 1, esc, true
			}
			esc = true
			j += e + 2 // the escape and the byte it escapes
			if j > q {
				break // the quote at q was escaped: find the next one
			}
		}
	}
	return 0, esc, false
}

// shortString is how many bytes of a string skipString looks at one by
// one before it searches.
const shortString = 16

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := skipString(b, i)
		return end, ok
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return j, true
	}
	return 0, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return 0, false
}
