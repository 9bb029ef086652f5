// Package layout holds the destination layout in code. This file owns
// partition templates: how a stream's configured template is compiled
// and checked, and how it places a record (see docs/design.md "Streams" and
// "Destination layout").
package layout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/internal/jsontop"
)

// DefaultPartition is the partition template of a stream that configures
// none: the UTC ingest date and hour, e.g. dt=2026-11-29/hour=09.
const DefaultPartition = "dt={ingest:%Y-%m-%d}/hour={ingest:%H}"

// Limits of partition templates and of the paths they give.
const (
	MaxTemplateLen   = 512 // bytes of template text
	MaxPlaceholders  = 16  // placeholders in one template
	MaxFieldNameLen  = 128 // bytes of a field name
	MaxValueLen      = 200 // bytes of one value after encoding
	MaxSegmentLen    = 255 // bytes of one path segment (file systems' name limit)
	minYear, maxYear = 1, 9999
)

// Errors of partition templates. Test with errors.Is; the concrete types
// (*TemplateError, *PartitionError) carry the details.
var (
	// ErrInvalidTemplate means a template does not compile.
	ErrInvalidTemplate = errors.New("invalid partition template")
	// ErrInvalidPartition means a record can't be placed by a template:
	// the API answers 400 invalid_partition with the record's line.
	ErrInvalidPartition = errors.New("invalid partition")
)

// TemplateError says why a template does not compile and where.
type TemplateError struct {
	Template string
	Offset   int // byte offset in Template where the problem is
	Msg      string
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("partition template %q: at byte %d: %s", e.Template, e.Offset, e.Msg)
}

// Unwrap returns ErrInvalidTemplate.
func (e *TemplateError) Unwrap() error { return ErrInvalidTemplate }

// PartitionError says which field of a record could not be placed and why.
type PartitionError struct {
	Field  string // the record field named by the template
	Reason string // e.g. "missing", "is a bool, want a string or an integer"
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("partition field %q: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidPartition.
func (e *PartitionError) Unwrap() error { return ErrInvalidPartition }

type pieceKind uint8

const (
	pieceLiteral pieceKind = iota
	pieceIngest            // {ingest:FMT}
	pieceTime              // {time:FIELD:FMT}
	pieceField             // {field:FIELD}
)

// piece is literal text or one placeholder. A segment starts at a piece
// with segStart set (the first piece, and the piece after each '/').
type piece struct {
	kind     pieceKind
	lit      string // literal text, without '/'
	field    int    // index into Template.fields (time, field)
	format   []verb // ingest, time
	segStart bool
}

// fixedLen is the length of the piece's output, 0 for a {field:...}.
func (p piece) fixedLen() int {
	n := len(p.lit)
	for _, v := range p.format {
		switch {
		case !v.isVerb:
			n++
		case v.c == 'Y':
			n += 4
		default:
			n += 2
		}
	}
	return n
}

// verb is a literal byte (c != 0 with isVerb false) or a strftime verb.
type verb struct {
	c      byte
	isVerb bool
}

// Template is a compiled partition template: a relative path of literal
// text and placeholders. Safe for concurrent use.
//
// Grammar: literal text of A-Z a-z 0-9 _ . = -, '/' between path segments,
// and placeholders:
//
//	{ingest:FMT}      the UTC ingest time
//	{time:FIELD:FMT}  a record field: an RFC 3339 string or an integer of
//	                  milliseconds since the Unix epoch, taken to UTC
//	{field:FIELD}     a record field: a string or an integer, made path-safe
//
// FMT is strftime with only the verbs %Y (4-digit year) %m %d %H %M
// (2 digits each) and literal text of A-Z a-z 0-9 _ . = -; it has at least
// one verb. FIELD names a top-level member of the record's JSON object:
// 1 to 128 of A-Z a-z 0-9 _ @ . - (a dot is part of the name, not a path).
// No segment is empty, and no segment starts with literal '.' or '_'
// (Hive-style readers skip such names; '_' is eosink's own).
//
// Values of {field:...} are made path-safe thus: bytes A-Z a-z 0-9 _ . -
// are kept, every other byte (of its UTF-8) is written %XX (upper-case hex);
// a segment that would start with '.' or '_' has that byte written %2E or
// %5F, so no segment is ".", ".." or hidden. An empty value, or one longer
// than MaxValueLen bytes after encoding, is refused, and so is a segment
// that ReservedElem takes for one of eosink's own names (a part file's or
// a temp file's), which no commit could make a directory of.
type Template struct {
	src    string
	pieces []piece
	fields []string
	// table: the template places files of a table stream, whose first
	// segment may not be the table's metadata directory (see table.go).
	table bool
}

// CompileTemplate parses and checks a partition template. The error is a
// *TemplateError naming the offending byte.
func CompileTemplate(src string) (*Template, error) {
	fail := func(off int, format string, a ...any) (*Template, error) {
		return nil, &TemplateError{Template: src, Offset: off, Msg: fmt.Sprintf(format, a...)}
	}
	if src == "" {
		return fail(0, "empty template")
	}
	if len(src) > MaxTemplateLen {
		return fail(MaxTemplateLen, "longer than %d bytes", MaxTemplateLen)
	}
	t := &Template{src: src}
	segStart := true
	placeholders := 0
	var lit strings.Builder
	flushLit := func() {
		if lit.Len() > 0 {
			t.pieces = append(t.pieces, piece{kind: pieceLiteral, lit: lit.String(), segStart: segStart})
			segStart = false
			lit.Reset()
		}
	}
	endSegment := func(off int) error {
		if segStart { // nothing since the last '/'
			return &TemplateError{Template: src, Offset: off, Msg: "empty path segment"}
		}
		n := 0 // fixed length of the segment: literals and times
		for i := len(t.pieces) - 1; i >= 0; i-- {
			n += t.pieces[i].fixedLen()
			if t.pieces[i].segStart {
				break
			}
		}
		if n > MaxSegmentLen {
			return &TemplateError{Template: src, Offset: off, Msg: fmt.Sprintf("path segment of %d bytes, at most %d", n, MaxSegmentLen)}
		}
		return nil
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/':
			flushLit()
			if err := endSegment(i); err != nil {
				return nil, err
			}
			segStart = true
			i++
		case c == '{':
			flushLit()
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return fail(i, "unterminated placeholder: no '}'")
			}
			if placeholders++; placeholders > MaxPlaceholders {
				return fail(i, "more than %d placeholders", MaxPlaceholders)
			}
			p, err := t.compilePlaceholder(src, i+1, i+end)
			if err != nil {
				return nil, err
			}
			p.segStart = segStart
			segStart = false
			t.pieces = append(t.pieces, p)
			i += end + 1
		case c == '}':
			return fail(i, "'}' without '{'")
		case litByte(c):
			if segStart && lit.Len() == 0 && (c == '.' || c == '_') {
				return fail(i, "a path segment may not start with %q (readers skip such names)", c)
			}
			lit.WriteByte(c)
			i++
		default:
			return fail(i, "character %q not allowed: literal text is A-Z a-z 0-9 _ . = - and '/' between segments", c)
		}
	}
	flushLit()
	if err := endSegment(len(src)); err != nil {
		return nil, err
	}
	return t, nil
}

// compilePlaceholder compiles src[from:to], the inside of {...}.
func (t *Template) compilePlaceholder(src string, from, to int) (piece, error) {
	fail := func(off int, format string, a ...any) (piece, error) {
		return piece{}, &TemplateError{Template: src, Offset: off, Msg: fmt.Sprintf(format, a...)}
	}
	body := src[from:to]
	kind, rest, ok := strings.Cut(body, ":")
	if !ok {
		return fail(from, "placeholder %q: want {ingest:FMT}, {time:FIELD:FMT} or {field:FIELD}", body)
	}
	restOff := from + len(kind) + 1
	switch kind {
	case "ingest":
		f, err := compileFormat(src, restOff, rest)
		if err != nil {
			return piece{}, err
		}
		return piece{kind: pieceIngest, format: f}, nil
	case "time":
		name, format, ok := strings.Cut(rest, ":")
		if !ok {
			return fail(restOff, "{time:FIELD:FMT} needs a field and a format")
		}
		if err := checkFieldName(src, restOff, name); err != nil {
			return piece{}, err
		}
		f, err := compileFormat(src, restOff+len(name)+1, format)
		if err != nil {
			return piece{}, err
		}
		return piece{kind: pieceTime, field: t.addField(name), format: f}, nil
	case "field":
		if err := checkFieldName(src, restOff, rest); err != nil {
			return piece{}, err
		}
		return piece{kind: pieceField, field: t.addField(rest)}, nil
	}
	return fail(from, "unknown placeholder kind %q: want ingest, time or field", kind)
}

func (t *Template) addField(name string) int {
	for i, f := range t.fields {
		if f == name {
			return i
		}
	}
	t.fields = append(t.fields, name)
	return len(t.fields) - 1
}

func checkFieldName(src string, off int, name string) error {
	if name == "" || len(name) > MaxFieldNameLen {
		return &TemplateError{Template: src, Offset: off, Msg: fmt.Sprintf("field name must be 1 to %d bytes", MaxFieldNameLen)}
	}
	for i := 0; i < len(name); i++ {
		if !FieldNameByte(name[i]) {
			return &TemplateError{Template: src, Offset: off + i, Msg: fmt.Sprintf("character %q not allowed in a field name: A-Z a-z 0-9 _ @ . -", name[i])}
		}
	}
	return nil
}

// FieldNameByte reports whether c may appear in a partition field name.
func FieldNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '@' || c == '.' || c == '-'
}

func compileFormat(src string, off int, f string) ([]verb, error) {
	fail := func(at int, format string, a ...any) ([]verb, error) {
		return nil, &TemplateError{Template: src, Offset: at, Msg: fmt.Sprintf(format, a...)}
	}
	var out []verb
	verbs := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '%':
			if i+1 >= len(f) {
				return fail(off+i, "'%%' at the end of the format")
			}
			switch v := f[i+1]; v {
			case 'Y', 'm', 'd', 'H', 'M':
				out = append(out, verb{c: v, isVerb: true})
				verbs++
				i++
			default:
				return fail(off+i, "strftime verb %%%c not allowed: only %%Y %%m %%d %%H %%M", v)
			}
		case litByte(c):
			out = append(out, verb{c: c})
		default:
			return fail(off+i, "character %q not allowed in a time format: A-Z a-z 0-9 _ . = - and %%-verbs", c)
		}
	}
	if verbs == 0 {
		return fail(off, "time format %q has no %%-verb", f)
	}
	return out, nil
}

func litByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '=' || c == '-'
}

// String returns the template's source text.
func (t *Template) String() string { return t.src }

// Fields returns the record fields the template reads, in first-use order.
func (t *Template) Fields() []string { return append([]string(nil), t.fields...) }

// NeedsRecord reports whether the path depends on the record, not only on
// the ingest time: if not, one Eval per batch is enough.
func (t *Template) NeedsRecord() bool { return len(t.fields) > 0 }

// Eval returns the relative partition path for a record ingested at ingest.
// rec is the record's JSON object; it is not read when NeedsRecord is false
// (it may then be nil, e.g. for text records). The record is expected to be
// valid JSON (the write path checks first). A record that can't be placed
// gives a *PartitionError naming the field: missing, null, of the wrong
// kind, appearing twice, an unparsable or out-of-range time, or a value that
// can't be made path-safe.
func (t *Template) Eval(ingest time.Time, rec []byte) (string, error) {
	var vals []jsonValue
	if len(t.fields) > 0 {
		var buf [4]jsonValue
		var err error
		if vals, err = t.lookup(rec, buf[:0]); err != nil {
			return "", err
		}
	}
	out := make([]byte, 0, 64)
	ingest = ingest.UTC()
	segStart := 0
	for i, p := range t.pieces {
		if p.segStart {
			if i > 0 {
				if err := t.checkSegment(out[segStart:], i); err != nil {
					return "", err
				}
				out = append(out, '/')
			}
			segStart = len(out)
		}
		switch p.kind {
		case pieceLiteral:
			out = append(out, p.lit...)
		case pieceIngest:
			out = appendTime(out, ingest, p.format)
		case pieceTime:
			tm, err := vals[p.field].time()
			if err != nil {
				return "", &PartitionError{Field: t.fields[p.field], Reason: err.Error()}
			}
			out = appendTime(out, tm, p.format)
		case pieceField:
			s, err := vals[p.field].str()
			if err != nil {
				return "", &PartitionError{Field: t.fields[p.field], Reason: err.Error()}
			}
			var ok bool
			at := len(out)
			if out, ok = appendSafe(out, s, len(out) == segStart); !ok {
				return "", &PartitionError{Field: t.fields[p.field], Reason: valueReason(s)}
			}
			if t.table && strings.IndexByte(string(out[at:]), '%') >= 0 {
				// Table readers take data file paths as URIs and
				// would decode %XX: a table's value must need none.
				reason := "a table's partition value may hold only A-Z a-z 0-9 _ . -"
				if p.segStart {
					reason += " and, as it starts a path segment, not start with . or _"
				}
				return "", &PartitionError{Field: t.fields[p.field], Reason: reason}
			}
		}
	}
	if err := t.checkSegment(out[segStart:], len(t.pieces)); err != nil {
		return "", err
	}
	if t.table {
		if err := t.checkTableFirst(out); err != nil {
			return "", err
		}
	}
	return string(out), nil
}

// checkSegment refuses a segment longer than a file name may be; the piece
// index is used to name a field of that segment.
// It also refuses a segment that ReservedElem would take for one of
// eosink's own names.
func (t *Template) checkSegment(seg []byte, next int) error {
	var reason string
	switch {
	case len(seg) > MaxSegmentLen:
		// Only {field:...} values vary in length: CompileTemplate refused
		// segments whose fixed parts alone are too long.
		reason = fmt.Sprintf("path segment %d bytes long, at most %d", len(seg), MaxSegmentLen)
	case maybeReserved(seg) && ReservedElem(string(seg)):
		reason = fmt.Sprintf("path segment %q would look like one of eosink's own names (a part file's or a temp file's)", seg)
	default:
		return nil
	}
	for i := next - 1; i >= 0; i-- {
		if p := t.pieces[i]; p.kind == pieceField {
			return &PartitionError{Field: t.fields[p.field], Reason: reason}
		} else if p.segStart {
			break
		}
	}
	return fmt.Errorf("partition segment %q: %s: %w", seg, reason, ErrInvalidPartition)
}

// maybeReserved is ReservedElem's cheap first look, without a string: a
// reserved name starts with "part-" or ends with ".inprogress".
func maybeReserved(seg []byte) bool {
	n := len(seg)
	return n >= 5 && (seg[0]|0x20 == 'p' || seg[n-1]|0x20 == 's')
}

func valueReason(s string) string {
	if s == "" {
		return "empty value"
	}
	return fmt.Sprintf("value longer than %d bytes once path-safe", MaxValueLen)
}

// jsonValue is one looked-up record field: raw is nil when missing.
type jsonValue struct{ raw []byte }

func (t *Template) lookup(rec []byte, vals []jsonValue) ([]jsonValue, error) {
	vals = append(vals, make([]jsonValue, len(t.fields))...)
	s, err := jsontop.NewScanner(rec)
	if err != nil {
		return nil, &PartitionError{Field: t.fields[0], Reason: "record is not a JSON object"}
	}
	for {
		k, v, ok := s.Next()
		if !ok {
			break
		}
		for i, f := range t.fields {
			if jsontop.KeyIs(k, f) {
				if vals[i].raw != nil {
					return nil, &PartitionError{Field: f, Reason: "appears twice in the record"}
				}
				vals[i].raw = v
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, &PartitionError{Field: t.fields[0], Reason: "record is not valid JSON"}
	}
	return vals, nil
}

var (
	errMissing = errors.New("missing")
	errNull    = errors.New("is null")
)

// str is a {field:...} value: a string, or an integer in int64 range.
func (v jsonValue) str() (string, error) {
	switch k := jsontop.KindOf(v.raw); k {
	case jsontop.Invalid:
		return "", errMissing
	case jsontop.Null:
		return "", errNull
	case jsontop.String:
		s, err := jsontop.Str(v.raw)
		if err != nil {
			return "", errors.New("is not a valid JSON string")
		}
		return s, nil
	case jsontop.Number:
		if _, err := strconv.ParseInt(string(v.raw), 10, 64); err != nil {
			return "", fmt.Errorf("number %s is not an integer in int64 range", v.raw)
		}
		return string(v.raw), nil
	default:
		return "", fmt.Errorf("is %s, want a string or an integer", jsontop.Described(k))
	}
}

// time is a {time:...} value, in UTC.
func (v jsonValue) time() (time.Time, error) {
	var t time.Time
	switch k := jsontop.KindOf(v.raw); k {
	case jsontop.Invalid:
		return t, errMissing
	case jsontop.Null:
		return t, errNull
	case jsontop.String:
		s, err := jsontop.Str(v.raw)
		if err != nil {
			return t, errors.New("is not a valid JSON string")
		}
		if t, err = ParseTime(s); err != nil {
			return t, err
		}
	case jsontop.Number:
		ms, err := strconv.ParseInt(string(v.raw), 10, 64)
		if err != nil {
			return t, fmt.Errorf("number %s is not an integer of epoch milliseconds", v.raw)
		}
		t = time.UnixMilli(ms).UTC()
	default:
		return t, fmt.Errorf("is %s, want an RFC 3339 string or epoch milliseconds", jsontop.Described(k))
	}
	if y := t.Year(); y < minYear || y > maxYear {
		return t, fmt.Errorf("time %s is outside years %04d-%04d", v.raw, minYear, maxYear)
	}
	return t, nil
}

// ParseTime parses an RFC 3339 time (fraction optional) and returns it in
// UTC. The schema's timestamp type shares this rule.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%q is not an RFC 3339 time", s)
	}
	return t.UTC(), nil
}

func appendTime(out []byte, t time.Time, f []verb) []byte {
	for _, v := range f {
		if !v.isVerb {
			out = append(out, v.c)
			continue
		}
		switch v.c {
		case 'Y':
			y := t.Year()
			out = append(out, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10))
		case 'm':
			out = append2(out, int(t.Month()))
		case 'd':
			out = append2(out, t.Day())
		case 'H':
			out = append2(out, t.Hour())
		case 'M':
			out = append2(out, t.Minute())
		}
	}
	return out
}

func append2(out []byte, n int) []byte { return append(out, byte('0'+n/10), byte('0'+n%10)) }

// appendSafe appends s made path-safe (see Template). atSegStart says the
// value begins a path segment. ok is false for an empty or too long value.
func appendSafe(out []byte, s string, atSegStart bool) ([]byte, bool) {
	if s == "" {
		return out, false
	}
	const hex = "0123456789ABCDEF"
	start := len(out)
	for i := 0; i < len(s); i++ {
		c := s[i]
		keep := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if i == 0 && atSegStart && (c == '.' || c == '_') {
			keep = false
		}
		if keep {
			out = append(out, c)
		} else {
			out = append(out, '%', hex[c>>4], hex[c&15])
		}
		if len(out)-start > MaxValueLen {
			return out[:start], false
		}
	}
	return out, true
}
