package streamconf

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/eosink/eosink/internal/jsontop"
	"github.com/eosink/eosink/internal/layout"
)

// Type is a schema field's type.
type Type string

// Field types and what a record's JSON value must be for each. A JSON null
// counts as absent.
const (
	TypeString    Type = "string"    // a JSON string
	TypeInt64     Type = "int64"     // a JSON number written as an integer, in int64 range
	TypeDouble    Type = "double"    // any JSON number within float64 range
	TypeBool      Type = "bool"      // true or false
	TypeTimestamp Type = "timestamp" // an RFC 3339 string or an integer of epoch milliseconds, years 0001-9999
	TypeJSON      Type = "json"      // any JSON value, kept as its JSON text
)

// Schema is the shape records of a stream must have.
type Schema struct {
	Fields []Field `json:"fields"`
}

// Field is one top-level member of a record.
type Field struct {
	Name     string `json:"name"` // ^[A-Za-z_][A-Za-z0-9_]{0,127}$, unique ignoring case
	Type     Type   `json:"type"`
	Required bool   `json:"required,omitempty"` // present and not null
}

// ErrSchemaMismatch is what every *MismatchError unwraps to.
var ErrSchemaMismatch = errors.New("record does not match the schema")

// MismatchError says which field of a record breaks the schema and how. The
// API answers 400 schema_mismatch with the record's line and Field.
type MismatchError struct {
	Field  string // "" when the record as a whole is wrong (not an object)
	Reason string
}

func (e *MismatchError) Error() string {
	if e.Field == "" {
		return "record: " + e.Reason
	}
	return fmt.Sprintf("field %q: %s", e.Field, e.Reason)
}

// Unwrap returns ErrSchemaMismatch.
func (e *MismatchError) Unwrap() error { return ErrSchemaMismatch }

func (s *Schema) index(name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

func (s *Schema) validate() error {
	if len(s.Fields) == 0 {
		return fieldErr("schema.fields", "must have at least one field")
	}
	if len(s.Fields) > MaxFields {
		return fieldErr("schema.fields", "%d fields, at most %d", len(s.Fields), MaxFields)
	}
	seen := make(map[string]int, len(s.Fields))
	for i, f := range s.Fields {
		path := fmt.Sprintf("schema.fields[%d]", i)
		if !validFieldName(f.Name) {
			return fieldErr(path+".name", "%q is not a field name: ^[A-Za-z_][A-Za-z0-9_]{0,127}$", f.Name)
		}
		// Query engines (DuckDB, Spark) fold column names' case.
		if j, dup := seen[strings.ToLower(f.Name)]; dup {
			return fieldErr(path+".name", "%q repeats schema.fields[%d] (names are compared ignoring case)", f.Name, j)
		}
		seen[strings.ToLower(f.Name)] = i
		switch f.Type {
		case TypeString, TypeInt64, TypeDouble, TypeBool, TypeTimestamp, TypeJSON:
		default:
			return fieldErr(path+".type", "%q is not one of string, int64, double, bool, timestamp, json", f.Type)
		}
	}
	return nil
}

func validFieldName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Checker checks records against a schema on the write path. Not safe for
// concurrent use: give each goroutine its own (they are cheap).
type Checker struct {
	s      *Schema
	strict bool
	vals   []Value
	seen   []bool
	next   int // the field after the last one found: records tend to keep the schema's order
	// byName indexes the fields of a schema larger than smallSchema: a
	// scan per key would make a record's check quadratic in its fields
	// (1,024 fields: ~85x slower per byte than 8).
	byName map[string]int
}

// smallSchema is the size up to which a scan finds a key faster than a map.
const smallSchema = 16

// NewChecker returns a checker for s, which must be valid. strict refuses
// record fields that are not in the schema: Parquet files keep only schema
// fields, so for them an unknown field would be lost; an ndjson stream keeps
// the whole line and checks only the fields the schema names. strict also
// refuses a json field holding an unpaired surrogate escape, which a
// Parquet JSON column can't hold (see unpairedSurrogate).
func (s *Schema) NewChecker(strict bool) *Checker {
	c := &Checker{s: s, strict: strict, vals: make([]Value, len(s.Fields)), seen: make([]bool, len(s.Fields))}
	if len(s.Fields) > smallSchema {
		c.byName = make(map[string]int, len(s.Fields))
		for i, f := range s.Fields {
			c.byName[f.Name] = i
		}
	}
	return c
}

// Check returns nil if rec, one valid JSON record, matches the schema, or
// else a *MismatchError. It does not allocate for a matching record whose
// strings hold no escapes.
func (c *Checker) Check(rec []byte) error {
	_, err := c.Fields(rec)
	return err
}

// Value is one schema field of a checked record: its raw JSON value and,
// for numbers and times, what the check parsed it to.
type Value struct {
	// Raw is the raw JSON value; nil when the field is absent or null.
	Raw []byte
	// Int is an int64 field's value, or a timestamp field's time in
	// microseconds since the Unix epoch (finer digits truncated).
	Int int64
	// Float is a double field's value.
	Float float64
	// Plain is set, for a string field's value, when Raw holds no escape
	// (no '\\'): its text is Raw between the quotes, as the record's
	// validation found it (valid UTF-8). False says nothing.
	Plain bool
}

// Fields checks rec like Check and returns each schema field's value, in
// schema order: a zero Value for an absent or null field. Raw values are
// slices of rec. The slice is reused by the next call.
func (c *Checker) Fields(rec []byte) ([]Value, error) {
	clear(c.vals)
	clear(c.seen)
	c.next = 0
	sc, err := jsontop.NewScanner(rec)
	if err != nil {
		return nil, &MismatchError{Reason: "not a JSON object"}
	}
	fields := c.s.Fields
	for {
		k, v, ok := sc.Next()
		if !ok {
			break
		}
		i := c.find(k)
		if i < 0 {
			if c.strict {
				name, _ := jsontop.Key(k)
				return nil, &MismatchError{Field: name, Reason: "not in the schema (a Parquet file would lose it)"}
			}
			continue
		}
		if c.seen[i] {
			return nil, &MismatchError{Field: fields[i].Name, Reason: "appears twice in the record"}
		}
		c.seen[i] = true
		if jsontop.KindOf(v) == jsontop.Null {
			continue
		}
		if reason := checkValue(fields[i].Type, v, &c.vals[i]); reason != "" {
			return nil, &MismatchError{Field: fields[i].Name, Reason: reason}
		}
		if fields[i].Type == TypeString {
			c.vals[i].Plain = !sc.Escaped()
		}
		if c.strict && fields[i].Type == TypeJSON {
			if esc := unpairedSurrogate(v); esc != "" {
				return nil, &MismatchError{Field: fields[i].Name, Reason: "holds " + esc + ", half of a UTF-16 surrogate pair: a Parquet JSON value must be valid Unicode (readers such as DuckDB refuse the whole file)"}
			}
		}
		c.vals[i].Raw = v
	}
	if err := sc.Err(); err != nil {
		return nil, &MismatchError{Reason: "not valid JSON"}
	}
	for i, f := range fields {
		if f.Required && c.vals[i].Raw == nil {
			if c.seen[i] {
				return nil, &MismatchError{Field: f.Name, Reason: "required, is null"}
			}
			return nil, &MismatchError{Field: f.Name, Reason: "required, missing"}
		}
	}
	return c.vals, nil
}

// Checked keeps what a strict check found in a batch's records, for the
// Parquet encoder, which would otherwise parse each record again (issue 26):
// for each record its length and its schema fields' values, as spans of
// the record and parsed numbers, so that it holds no pointer into the
// batch and outlives the request's buffer. The encoder applies it to the
// same records read back from the staging file (Value), and falls back to
// parsing a record whose length differs. Compact, as a lagging encoder
// may hold many batches' worth: 2 bytes a record, 4 a field, 8 more a
// number or time, 1 saying whether its strings are plain (59 bytes for the
// load harness's 8 fields).
type Checked struct {
	// Schema is the schema the records were checked against: values are
	// used only by an encoder of this same schema.
	Schema  *Schema
	numeric int      // fields of Schema that keep a number
	lens    []uint16 // each record's length
	spans   []uint16 // for each record, each field's value: offset, length (0: absent or null; a JSON value is never empty)
	nums    []uint64 // for each record, each numeric field's Int, or Float's bits
	plain   []bool   // for each record: each of its string values is Plain
}

// MaxCheckedRecord is the longest record a Checked keeps.
const MaxCheckedRecord = math.MaxUint16

// NewChecked returns an empty Checked for records of s, with room for
// records of them.
func NewChecked(s *Schema, records int) *Checked {
	c := &Checked{}
	c.Reset(s)
	c.lens = make([]uint16, 0, records)
	c.spans = make([]uint16, 0, 2*records*len(s.Fields))
	c.nums = make([]uint64, 0, records*c.numeric)
	c.plain = make([]bool, 0, records)
	return c
}

// Reset empties c for records of s, keeping its memory.
func (c *Checked) Reset(s *Schema) {
	c.Schema, c.lens, c.spans, c.nums, c.plain, c.numeric = s, c.lens[:0], c.spans[:0], c.nums[:0], c.plain[:0], 0
	for _, f := range s.Fields {
		if isNumeric(f.Type) {
			c.numeric++
		}
	}
}

func isNumeric(t Type) bool { return t == TypeInt64 || t == TypeTimestamp || t == TypeDouble }

// Add appends a record and the values Fields returned for it (of c's
// schema). A record over MaxCheckedRecord, or a value that is not a slice
// of rec, can't be kept: false, and c is left as it was.
func (c *Checked) Add(rec []byte, vals []Value) bool {
	if len(rec) > MaxCheckedRecord || len(vals) != len(c.Schema.Fields) {
		return false
	}
	spans, nums := len(c.spans), len(c.nums)
	plain := true
	for i, v := range vals {
		var off uintptr
		if v.Raw != nil {
			// Raw is a slice of rec (Fields): its offset in rec.
			off = uintptr(unsafe.Pointer(unsafe.SliceData(v.Raw))) - uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
			if len(v.Raw) == 0 || off > uintptr(len(rec)) || uintptr(len(v.Raw)) > uintptr(len(rec))-off {
				c.spans, c.nums = c.spans[:spans], c.nums[:nums]
				return false
			}
		}
		c.spans = append(c.spans, uint16(off), uint16(len(v.Raw)))
		switch c.Schema.Fields[i].Type {
		case TypeString:
			plain = plain && (v.Raw == nil || v.Plain)
		case TypeInt64, TypeTimestamp:
			c.nums = append(c.nums, uint64(v.Int))
		case TypeDouble:
			c.nums = append(c.nums, math.Float64bits(v.Float))
		}
	}
	c.lens = append(c.lens, uint16(len(rec)))
	c.plain = append(c.plain, plain)
	return true
}

// Len returns the number of records in c.
func (c *Checked) Len() int { return len(c.lens) }

// RecordLen returns record i's length, without its '\n'.
func (c *Checked) RecordLen(i int) int { return int(c.lens[i]) }

// Bytes returns about how much memory c holds.
func (c *Checked) Bytes() int64 {
	return int64(cap(c.lens))*2 + int64(cap(c.spans))*2 + int64(cap(c.nums))*8 + int64(cap(c.plain))
}

// Take appends to out (nil: a new Checked) the records of c at the given
// indexes, in that order, and returns it: a batch split over partitions
// keeps each piece's records.
func (c *Checked) Take(idx []int, out *Checked) *Checked {
	if out == nil {
		out = NewChecked(c.Schema, len(idx))
	}
	f, m := 2*len(c.Schema.Fields), c.numeric
	for _, i := range idx {
		out.lens = append(out.lens, c.lens[i])
		out.plain = append(out.plain, c.plain[i])
		out.spans = append(out.spans, c.spans[i*f:(i+1)*f]...)
		out.nums = append(out.nums, c.nums[i*m:(i+1)*m]...)
	}
	return out
}

// Value returns record i's values as Fields returned them, with rec the
// record's bytes (from wherever they are now), into out (len(Schema.Fields)).
// It returns false, out untouched, if rec is not as long as the record
// that was checked, or i is out of range.
func (c *Checked) Value(i int, rec []byte, out []Value) bool {
	fields := c.Schema.Fields
	if i < 0 || i >= len(c.lens) || len(rec) != int(c.lens[i]) || len(out) != len(fields) {
		return false
	}
	spans := c.spans[2*i*len(fields) : 2*(i+1)*len(fields)]
	nums := c.nums[i*c.numeric : (i+1)*c.numeric]
	plain := c.plain[i]
	for j := range fields {
		v := Value{}
		if off, n := int(spans[2*j]), int(spans[2*j+1]); n > 0 {
			v.Raw = rec[off : off+n : off+n]
		}
		switch fields[j].Type {
		case TypeString:
			v.Plain = plain && v.Raw != nil
		case TypeInt64, TypeTimestamp:
			v.Int, nums = int64(nums[0]), nums[1:]
		case TypeDouble:
			v.Float, nums = math.Float64frombits(nums[0]), nums[1:]
		}
		out[j] = v
	}
	return true
}

// find returns the index of the schema field the raw key names, or -1.
func (c *Checker) find(key []byte) int {
	i := c.lookup(key)
	if i >= 0 {
		c.next = i + 1
	}
	return i
}

func (c *Checker) lookup(key []byte) int {
	// Field names are ASCII letters, digits and '_': only an escape can
	// make another raw key one of them, so a key without one is compared
	// as it stands.
	if bytes.IndexByte(key, '\\') >= 0 {
		k, err := jsontop.Key(key)
		if err != nil {
			return -1
		}
		key = []byte(k)
	}
	fields := c.s.Fields
	if n := c.next; n < len(fields) && string(key) == fields[n].Name {
		return n
	}
	if c.byName != nil {
		if i, ok := c.byName[string(key)]; ok {
			return i
		}
		return -1
	}
	for i, f := range fields {
		if string(key) == f.Name {
			return i
		}
	}
	return -1
}

// checkValue returns why v (not null) is no value of type t, or "", and
// puts what it parsed v to in out.
func checkValue(t Type, v []byte, out *Value) string {
	k := jsontop.KindOf(v)
	if a, b, say := takes(t); say != "" && k != a && k != b {
		return "is a " + k.String() + ", want " + say
	}
	switch t {
	case TypeInt64:
		n, ok := ParseInt64(v)
		if !ok {
			return fmt.Sprintf("number %s is not an integer in int64 range", v)
		}
		out.Int = n
	case TypeDouble:
		f, ok := ParseDouble(v)
		if !ok {
			return fmt.Sprintf("number %s is outside the double range", v)
		}
		out.Float = f
	case TypeTimestamp:
		if us, ok := utcMicros(v); ok {
			out.Int = us // the common form, without time.Parse (ParseTimestamp's value)
			break
		}
		tm, err := ParseTimestamp(v)
		if err != nil {
			return err.Error()
		}
		out.Int = tm.UnixMicro()
	}
	return ""
}

// takes returns the JSON kinds (one or two) a value of type t may be, and
// how checkValue's message says so; say is "" for a type taking any kind
// (json).
func takes(t Type) (a, b jsontop.Kind, say string) {
	switch t {
	case TypeString:
		return jsontop.String, jsontop.String, "a string"
	case TypeInt64:
		return jsontop.Number, jsontop.Number, "an int64"
	case TypeDouble:
		return jsontop.Number, jsontop.Number, "a double"
	case TypeBool:
		return jsontop.Bool, jsontop.Bool, "true or false"
	case TypeTimestamp:
		return jsontop.String, jsontop.Number, "an RFC 3339 string or epoch milliseconds"
	}
	return 0, 0, ""
}

// unpairedSurrogate returns the first \u escape in the raw JSON value v
// that is half of a UTF-16 surrogate pair without its other half, or "".
// JSON's grammar allows one; Parquet's JSON type is Unicode text, and
// DuckDB refuses to read a column holding one. encoding/json and jsontop
// turn it into U+FFFD in a string field, so only json fields, kept as
// their text, need this.
func unpairedSurrogate(v []byte) string {
	for i := 0; ; {
		j := bytes.IndexByte(v[i:], '\\')
		if j < 0 || i+j+1 >= len(v) {
			return ""
		}
		i += j
		if v[i+1] != 'u' {
			i += 2 // the escaped byte is no backslash that starts an escape
			continue
		}
		switch r := hex4(v, i+2); {
		case r >= 0xd800 && r < 0xdc00:
			if i+12 <= len(v) && v[i+6] == '\\' && v[i+7] == 'u' {
				if lo := hex4(v, i+8); lo >= 0xdc00 && lo < 0xe000 {
					i += 12
					continue
				}
			}
			return string(v[i : i+6])
		case r >= 0xdc00 && r < 0xe000:
			return string(v[i : i+6])
		}
		i += 2
	}
}

// hex4 returns the value of the 4 hex digits at v[i:], or -1.
func hex4(v []byte, i int) int {
	if i < 0 || i+4 > len(v) {
		return -1
	}
	n := 0
	for _, c := range v[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return n
}

// ParseInt64 parses a raw JSON number written as an integer, without
// allocating: no fraction, no exponent, in int64 range.
func ParseInt64(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	d := v
	if neg {
		d = v[1:]
	}
	if len(d) == 0 || len(d) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true // -(1<<63) wraps to itself
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// ParseDouble parses a raw JSON number as a float64; false when it is out
// of range. It does not allocate.
func ParseDouble(v []byte) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	// The string shares v's bytes: it lives only for this call (the error,
	// which would keep it, is dropped).
	f, err := strconv.ParseFloat(unsafe.String(&v[0], len(v)), 64)
	return f, err == nil
}

// Timestamps must fall in years 0001-9999 (UTC).
var (
	minTimestamp = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTimestamp = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// ParseTimestamp parses a raw JSON timestamp value: an RFC 3339 string
// (layout.ParseTime's rule, as partition templates read times) or an
// integer of epoch milliseconds. The result is UTC.
func ParseTimestamp(v []byte) (time.Time, error) {
	var t time.Time
	switch jsontop.KindOf(v) {
	case jsontop.String:
		b, err := jsontop.StrBytes(v)
		if err != nil {
			return t, errors.New("is not a valid JSON string")
		}
		// The string shares v's bytes (or StrBytes's copy) for this call
		// only: ParseTime keeps none of it (its error quotes a copy).
		if t, err = layout.ParseTime(unsafe.String(unsafe.SliceData(b), len(b))); err != nil {
			return t, err
		}
	case jsontop.Number:
		ms, ok := ParseInt64(v)
		if !ok {
			return t, fmt.Errorf("number %s is not an integer of epoch milliseconds", v)
		}
		t = time.UnixMilli(ms).UTC()
	default:
		return t, errors.New("want an RFC 3339 string or epoch milliseconds")
	}
	if t.Before(minTimestamp) || t.After(maxTimestamp) {
		return t, fmt.Errorf("time %s is outside years 0001-9999", v)
	}
	return t, nil
}

// utcMicros is ParseTimestamp(v).UnixMicro() for the common form of a
// timestamp, a JSON string "YYYY-MM-DDTHH:MM:SS[.fraction]Z" (1 to 9
// digits of fraction, years 0001-9999), computed without time.Parse and
// time.Date: ok is false for any other v, valid or not, which ParseTimestamp
// then decides. FuzzUTCMicros holds the two to the same answer.
func utcMicros(v []byte) (us int64, ok bool) {
	const form = len(`"2006-01-02T15:04:05Z"`)
	if len(v) < form || v[0] != '"' || v[len(v)-2] != 'Z' || v[len(v)-1] != '"' ||
		v[5] != '-' || v[8] != '-' || v[11] != 'T' || v[14] != ':' || v[17] != ':' {
		return 0, false
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(v[1:5]), num(v[6:8]), num(v[9:11])
	hour, minute, sec := num(v[12:14]), num(v[15:17]), num(v[18:20])
	if year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return 0, false
	}
	frac := v[20 : len(v)-2]
	micros := 0
	if len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return 0, false
		}
		digits := frac[1:]
		if num(digits) < 0 {
			return 0, false
		}
		for i := range 6 { // finer digits are truncated, as UnixMicro does
			micros *= 10
			if i < len(digits) {
				micros += int(digits[i] - '0')
			}
		}
	}
	days := daysFromCivil(year, month, day)
	return ((days*24+int64(hour))*60+int64(minute))*60*1e6 + int64(sec)*1e6 + int64(micros), true
}

// daysIn returns the days in month of year (proleptic Gregorian).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days from 1970-01-01 to the date (proleptic
// Gregorian, year >= 1): the count of days of whole 400-year eras, then of
// the years and months (from March, so that February's leap day is the
// year's last) within the era.
func daysFromCivil(year, month, day int) int64 {
	if month <= 2 {
		year--
	}
	era := year / 400 // year >= 0 here
	yoe := year - era*400
	mp := (month + 9) % 12 // March = 0
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
