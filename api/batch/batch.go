package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Errors returned by [Parse] and [KindOf]. They are classes: test with
// [errors.Is]; errors about one line are a [*LineError] wrapping one of them.
var (
	// ErrInvalidJSON: a record of a JSON body is not valid JSON, or an
	// application/json body is not a JSON array (HTTP 400 invalid_json).
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrTooLarge: the body or one record is over its limit (HTTP 413 too_large).
	ErrTooLarge = errors.New("too large")
	// ErrUnsupportedMediaType: the Content-Type is not one this package
	// accepts (HTTP 415 unsupported_media_type).
	ErrUnsupportedMediaType = errors.New("unsupported media type")
)

// LineError is an error about one line of a body.
type LineError struct {
	Line int    // 1-based, counting every physical line of the body
	Err  error  // the class: ErrInvalidJSON or ErrTooLarge
	Msg  string // what is wrong, for people
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: %v: %s", e.Line, e.Err, e.Msg)
}

// Unwrap returns the class, so that errors.Is(err, ErrInvalidJSON) holds.
func (e *LineError) Unwrap() error { return e.Err }

// Kind is the content kind of a batch, which decides the file extension.
type Kind int

const (
	NDJSON Kind = iota // JSON records, from an NDJSON or a JSON array body
	Text               // raw lines, from a text/plain body
)

// Ext returns the file extension of the kind, without the dot: "ndjson" or
// "txt"; "" for an unknown kind.
func (k Kind) Ext() string {
	switch k {
	case NDJSON:
		return "ndjson"
	case Text:
		return "txt"
	}
	return ""
}

// Default limits.
const (
	DefaultMaxBody   = 64 << 20
	DefaultMaxRecord = 1 << 20
)

// Limits bounds what Parse accepts. A field that is zero or negative takes
// its default (DefaultMaxBody, DefaultMaxRecord).
type Limits struct {
	MaxBody   int64 // bytes of the body as sent
	MaxRecord int   // bytes of one record as stored, without its '\n'
}

func (l Limits) withDefaults() Limits {
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	if l.MaxRecord <= 0 {
		l.MaxRecord = DefaultMaxRecord
	}
	return l
}

// Batch is a parsed body: Data holds every record as one line terminated by
// '\n', in order.
//
// Data may alias the body given to Parse (it does when the body needs no
// change: '\n'-terminated, no '\r' dropped, no line skipped), so the caller
// must not modify or reuse the body while Data is in use.
type Batch struct {
	Kind    Kind
	Data    []byte
	Records int
}

// format is how a body is parsed; two formats share the NDJSON kind.
type format int

const (
	formatNDJSON format = iota
	formatArray
	formatText
)

// mediaFormat maps a Content-Type value to a format.
func mediaFormat(contentType string) (format, error) {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, "application/x-ndjson"), strings.EqualFold(mt, "application/ndjson"):
		return formatNDJSON, nil
	case strings.EqualFold(mt, "application/json"):
		return formatArray, nil
	case strings.EqualFold(mt, "text/plain"):
		return formatText, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnsupportedMediaType, contentType)
}

// KindOf maps a Content-Type header value to the Kind of the batch it
// announces. Parameters are ignored and the media type is compared
// case-insensitively: application/x-ndjson, application/ndjson and
// application/json give NDJSON, text/plain gives Text, anything else
// (an empty value included) is ErrUnsupportedMediaType.
func KindOf(contentType string) (Kind, error) {
	f, err := mediaFormat(contentType)
	if err != nil {
		return 0, err
	}
	if f == formatText {
		return Text, nil
	}
	return NDJSON, nil
}

// Parse checks one POST body sent with the given Content-Type against the
// rules in the package documentation and returns the bytes to append.
//
// On error the Batch is empty and nothing of the body may be written: a
// batch is accepted whole or not at all. Errors are ErrUnsupportedMediaType,
// ErrTooLarge for the body, or a *LineError (ErrInvalidJSON or ErrTooLarge)
// for the first bad line.
//
// Parse makes at most one allocation of about len(body) bytes on success,
// none when Data aliases body; it is safe for concurrent use.
func Parse(contentType string, body []byte, lim Limits) (Batch, error) {
	f, err := mediaFormat(contentType)
	if err != nil {
		return Batch{}, err
	}
	lim = lim.withDefaults()
	if int64(len(body)) > lim.MaxBody {
		return Batch{}, fmt.Errorf("%w: body is %d bytes, limit %d", ErrTooLarge, len(body), lim.MaxBody)
	}
	var b Batch
	switch f {
	case formatNDJSON:
		b.Kind = NDJSON
		b.Data, b.Records, err = parseLines(body, lim.MaxRecord, true)
	case formatText:
		b.Kind = Text
		b.Data, b.Records, err = parseLines(body, lim.MaxRecord, false)
	case formatArray:
		b.Kind = NDJSON
		b.Data, b.Records, err = parseArray(body, lim.MaxRecord)
	}
	if err != nil {
		return Batch{}, err
	}
	return b, nil
}

// parseLines handles NDJSON (checkJSON) and text bodies in one pass.
//
// While every line so far is kept byte for byte, the output is body[:start]
// itself and nothing is copied; the first line that changes (a '\r' dropped,
// a line skipped, a missing final '\n') switches to copying into one buffer
// sized for the whole body.
func parseLines(body []byte, maxRecord int, checkJSON bool) (data []byte, records int, err error) {
	var out []byte
	copying := false
	start := 0
	for lineNo := 1; start < len(body); lineNo++ {
		end, next := len(body), len(body)
		if i := bytes.IndexByte(body[start:], '\n'); i >= 0 {
			end = start + i
			next = end + 1
		}
		line := body[start:end]
		changed := next == end // no '\n' to keep
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
			changed = true
		}
		skip := checkJSON && isBlank(line)
		if !skip {
			if len(line) > maxRecord {
				return nil, 0, &LineError{Line: lineNo, Err: ErrTooLarge,
					Msg: fmt.Sprintf("record is %d bytes, limit %d", len(line), maxRecord)}
			}
			if checkJSON {
				if err := checkRecord(line, lineNo); err != nil {
					return nil, 0, err
				}
			}
			records++
		}
		if (changed || skip) && !copying {
			copying = true
			out = make([]byte, 0, len(body)+1)
			out = append(out, body[:start]...)
		}
		if copying && !skip {
			out = append(out, line...)
			out = append(out, '\n')
		}
		start = next
	}
	if !copying {
		return body, records, nil
	}
	return out, records, nil
}

// checkRecord checks one NDJSON record: valid JSON in valid UTF-8. The
// error, on the slow path only, says which of the two it is not.
func checkRecord(line []byte, lineNo int) error {
	ok, sure := validRecord(line)
	if ok {
		return nil
	}
	if !sure && validJSON(line) && utf8.Valid(line) {
		return nil
	}
	if !validJSON(line) {
		msg, _ := syntaxMsg(line)
		return &LineError{Line: lineNo, Err: ErrInvalidJSON, Msg: msg}
	}
	msg, _ := utf8Msg(line)
	return &LineError{Line: lineNo, Err: ErrInvalidJSON, Msg: msg}
}

// isBlank reports whether line holds only JSON whitespace other than '\n'.
func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// utf8Msg describes where b, valid JSON otherwise, stops being UTF-8: JSON
// text is UTF-8 (RFC 8259 section 8.1), and neither encoding/json nor
// fastjson checks the bytes inside strings. Only called on the error path.
func utf8Msg(b []byte) (msg string, line int) {
	line, col := position(b, int64(invalidUTF8(b))+1)
	return fmt.Sprintf("invalid UTF-8 at column %d", col), line
}

// invalidUTF8 returns the index of the first byte of b that does not start
// a valid UTF-8 sequence, len(b) if there is none.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// syntaxMsg describes why b is not valid JSON, with the 1-based line and
// byte column of the byte at which that was found. It is only called on the
// error path, so it may allocate. (json.Compact's SyntaxError carries no
// offset, json.Unmarshal's does.)
func syntaxMsg(b []byte) (msg string, line int) {
	var v json.RawMessage
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return "not a single JSON value", 1
	}
	line, col := position(b, se.Offset)
	return fmt.Sprintf("%s at column %d", se.Error(), col), line
}

// position returns the 1-based line and byte column of the byte at which a
// syntax error with the given Offset (bytes read, the bad one included) was
// detected. At the end of the input that is the last byte.
func position(b []byte, offset int64) (line, col int) {
	pos := int(min(max(offset-1, 0), int64(len(b))))
	line = 1 + bytes.Count(b[:pos], []byte{'\n'})
	col = pos - bytes.LastIndexByte(b[:pos], '\n')
	return line, col
}

// parseArray handles an application/json body: json.Compact validates it
// and writes it compacted into one buffer (a single scanner pass), then the
// top-level commas and the closing bracket are turned into '\n' in place,
// so "[a, b]" becomes "a\nb\n" with no copy per element.
func parseArray(body []byte, maxRecord int) (data []byte, records int, err error) {
	var buf bytes.Buffer
	buf.Grow(len(body))
	if err := json.Compact(&buf, body); err != nil {
		msg, line := syntaxMsg(body)
		return nil, 0, &LineError{Line: line, Err: ErrInvalidJSON, Msg: msg}
	}
	if !utf8.Valid(body) {
		msg, line := utf8Msg(body)
		return nil, 0, &LineError{Line: line, Err: ErrInvalidJSON, Msg: msg}
	}
	c := buf.Bytes()
	if c[0] != '[' { // Compact succeeded, so c holds one value
		i := len(body) - len(bytes.TrimLeft(body, " \t\r\n"))
		line, col := position(body, int64(i)+1)
		return nil, 0, &LineError{Line: line, Err: ErrInvalidJSON,
			Msg: fmt.Sprintf("body is not a JSON array (column %d)", col)}
	}
	data = c[1:] // the elements, then ']'
	if len(data) == 1 {
		return data[:0], 0, nil
	}
	depth, elem := 0, 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = stringEnd(data, i)
		case '[', '{':
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
				continue
			}
			fallthrough // the array's own ']', the last byte
		case ',':
			if depth > 0 {
				continue
			}
			if n := i - elem; n > maxRecord {
				return nil, 0, &LineError{Line: elementLine(body, records), Err: ErrTooLarge,
					Msg: fmt.Sprintf("element %d is %d bytes compacted, limit %d", records+1, n, maxRecord)}
			}
			data[i] = '\n'
			records++
			elem = i + 1
		}
	}
	return data, records, nil
}

// stringEnd returns the index of the quote closing the JSON string that
// opens at b[open]; b must be valid JSON.
func stringEnd(b []byte, open int) int {
	j := open + 1
	for {
		j += bytes.IndexByte(b[j:], '"')
		// The quote is escaped if an odd number of backslashes precede it.
		// The opening quote bounds the walk back.
		n := 0
		for b[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return j
		}
		j++
	}
}

// elementLine returns the 1-based line of body on which top-level element k
// (0-based) of the valid JSON array in body starts. It is only called on the
// error path.
func elementLine(body []byte, k int) int {
	line, depth, n := 1, 0, 0
	expect := false // at depth 1, after '[' or ','
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch c {
		case '\n':
			line++
			continue
		case ' ', '\t', '\r':
			continue
		}
		if expect && c != ']' {
			if n == k {
				return line
			}
			n++
			expect = false
		}
		switch c {
		case '"':
			i = stringEnd(body, i) // valid strings hold no raw '\n'
		case '[', '{':
			depth++
			expect = depth == 1
		case ']', '}':
			depth--
		case ',':
			expect = depth == 1
		}
	}
	return line
}
