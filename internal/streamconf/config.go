// Package streamconf owns a stream's configuration (docs/design.md "Streams"):
// the Config document that PUT /v1/streams/{stream} takes and answers, its
// defaults and validation, the record schema with its fast per-record
// checker, and the file extension a configuration gives.
//
// The JSON form is the API's body: fields absent or empty take their
// defaults (see Defaults). Decode refuses unknown fields and values of the
// wrong JSON type; Validate checks the values. Both report a *FieldError
// whose Field is the path of the offending value as the client wrote it,
// e.g. "schema.fields[2].type", which the API sends as
// {"error":"invalid_body","field":...,"message":...}.
//
// Versions: Version counts accepted changes of one stream's configuration.
// A stream never configured has version 0 and the defaults; the store gives
// each accepted PUT the previous version + 1, and a checkpoint's files are
// written with the version in force at its barrier. Clients don't set it:
// Decode ignores a version in the body.
package streamconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/eosink/eosink/internal/layout"
)

// Formats of a stream's files.
const (
	FormatAuto    = ""        // from each write's Content-Type: ndjson or text
	FormatNDJSON  = "ndjson"  // .ndjson
	FormatText    = "text"    // .txt
	FormatParquet = "parquet" // .parquet, needs a schema
)

// Compressions. For ndjson and text files: the whole file is one gzip or
// zstd stream. For Parquet: the page codec (default zstd).
const (
	CompressionNone   = "none"
	CompressionGzip   = "gzip"
	CompressionZstd   = "zstd"
	CompressionSnappy = "snappy" // Parquet only
)

// Dedup modes (docs/design.md "Idempotency keys").
const (
	DedupNone = "none"
	DedupBody = "body"
)

// Tables (docs/design.md "Tables"): "" is the same as TableNone.
const (
	TableNone    = "none"
	TableIceberg = "iceberg" // an Apache Iceberg v2 table at <stream>/; needs format parquet
)

// Limits of a configuration.
const (
	MinRollSize = 4 << 10 // bytes; 0 means the server's --roll-size
	MaxRollSize = 1 << 40
	MaxFields   = 1024 // schema fields
	// MaxPartitions bounds max_partitions; DefaultMaxPartitions is its
	// default. Each partition of a checkpoint is a file (a transaction
	// holding a descriptor until pre-commit).
	MaxPartitions        = 100000
	DefaultMaxPartitions = 1000
)

// ErrInvalid is what every *FieldError unwraps to.
var ErrInvalid = errors.New("invalid stream configuration")

// FieldError names the offending field of a configuration and says why.
type FieldError struct {
	Field   string // path as written in the body, e.g. "schema.fields[2].type"
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, a ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// Config is one stream's configuration.
type Config struct {
	Version     int64   `json:"version,omitempty"`
	Format      string  `json:"format,omitempty"`
	Compression string  `json:"compression,omitempty"`
	Partition   string  `json:"partition,omitempty"`
	Schema      *Schema `json:"schema,omitempty"`
	RollSize    int64   `json:"roll_size,omitempty"`
	Dedup       string  `json:"dedup,omitempty"`
	// MaxPartitions bounds the partitions one checkpoint of the stream
	// opens (each one file or more, as they roll): a batch needing more
	// than this alone is refused (400 invalid_partition), one that would
	// pass it with what is open already waits for the next checkpoint
	// (429).
	MaxPartitions int `json:"max_partitions,omitempty"`
	// Table makes the stream an Iceberg table (TableIceberg) or not (""
	// or TableNone).
	Table string `json:"table,omitempty"`
	// KeepSnapshots bounds an Iceberg table's snapshots: table maintenance
	// expires older ones (never the newest of each node) and merges their
	// manifests. 0 means DefaultKeepSnapshots.
	KeepSnapshots int `json:"keep_snapshots,omitempty"`
}

// Limits of keep_snapshots.
const (
	DefaultKeepSnapshots = 100
	MaxKeepSnapshots     = 100000
)

// IsTable reports whether the stream is an Iceberg table.
func (c Config) IsTable() bool { return c.Table == TableIceberg }

// Defaults returns c with every empty field set to its default: no
// compression, the default partition template, no dedup. Format stays ""
// (from the write's Content-Type) and RollSize 0 (the server's --roll-size).
// For Parquet, Compression defaults to zstd pages.
func (c Config) Defaults() Config {
	if c.Compression == "" {
		c.Compression = CompressionNone
		if c.Format == FormatParquet {
			c.Compression = CompressionZstd
		}
	}
	if c.Partition == "" {
		c.Partition = layout.DefaultPartition
	}
	if c.Dedup == "" {
		c.Dedup = DedupNone
	}
	if c.MaxPartitions == 0 {
		c.MaxPartitions = DefaultMaxPartitions
	}
	return c
}

// Decode reads a configuration body strictly: unknown fields, values of the
// wrong JSON type, trailing data and duplicate fields are *FieldErrors. The
// result is not validated (see Validate) and has no defaults applied.
func Decode(body []byte) (Config, error) {
	var c Config
	members, err := object(body, "")
	if err != nil {
		return c, err
	}
	for _, m := range members {
		// Each member but the schema is one JSON value into one field.
		var dst any
		want := "a string"
		switch m.key {
		case "version":
			var v int64 // ignored: the store assigns versions
			dst, want = &v, "an integer"
		case "format":
			dst = &c.Format
		case "compression":
			dst = &c.Compression
		case "partition":
			dst = &c.Partition
		case "roll_size":
			dst, want = &c.RollSize, "an integer"
		case "dedup":
			dst = &c.Dedup
		case "max_partitions":
			dst, want = &c.MaxPartitions, "an integer"
		case "table":
			dst = &c.Table
		case "keep_snapshots":
			dst, want = &c.KeepSnapshots, "an integer"
		case "schema":
			if string(m.val) == "null" {
				continue
			}
			s, err := decodeSchema(m.val)
			if err != nil {
				return c, err
			}
			c.Schema = s
			continue
		default:
			return c, fieldErr(join("", m.key), "unknown field")
		}
		if err := decodeValue(m.val, dst, m.key, want); err != nil {
			return c, err
		}
	}
	return c, nil
}

func decodeSchema(b []byte) (*Schema, error) {
	members, err := object(b, "schema")
	if err != nil {
		return nil, err
	}
	s := &Schema{}
	for _, m := range members {
		if m.key != "fields" {
			return nil, fieldErr(join("schema", m.key), "unknown field")
		}
		var raws []json.RawMessage
		if err := decodeValue(m.val, &raws, "schema.fields", "an array"); err != nil {
			return nil, err
		}
		s.Fields = make([]Field, 0, len(raws))
		for i, raw := range raws {
			path := fmt.Sprintf("schema.fields[%d]", i)
			fm, err := object(raw, path)
			if err != nil {
				return nil, err
			}
			var f Field
			for _, m := range fm {
				switch m.key {
				case "name":
					err = decodeValue(m.val, &f.Name, path+".name", "a string")
				case "type":
					err = decodeValue(m.val, &f.Type, path+".type", "a string")
				case "required":
					err = decodeValue(m.val, &f.Required, path+".required", "true or false")
				default:
					err = fieldErr(join(path, m.key), "unknown field")
				}
				if err != nil {
					return nil, err
				}
			}
			s.Fields = append(s.Fields, f)
		}
	}
	return s, nil
}

type member struct {
	key string
	val json.RawMessage
}

// object splits a JSON object into its members, in order, refusing
// duplicates. path names the object in errors ("" for the body).
func object(b []byte, path string) ([]member, error) {
	where := path
	if where == "" {
		where = "body"
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, fieldErr(where, "not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fieldErr(where, "must be a JSON object")
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fieldErr(where, "not valid JSON: %v", err)
		}
		key := tok.(string) // object keys are strings
		name := join(path, key)
		if seen[key] {
			return nil, fieldErr(name, "appears twice")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fieldErr(name, "not valid JSON: %v", err)
		}
		out = append(out, member{key, raw})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fieldErr(where, "not valid JSON: %v", err)
	}
	if path == "" {
		if _, err := dec.Token(); err == nil {
			return nil, fieldErr(where, "data after the object")
		}
	}
	return out, nil
}

// join names member key of the object at path; a key that is empty or
// could be misread as a path ('.', '[', '"', non-printable) is quoted.
func join(path, key string) string {
	if key == "" || strings.ContainsAny(key, ".[]\"\\") || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func decodeValue(raw json.RawMessage, dst any, field, want string) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fieldErr(field, "must be %s", want)
	}
	return nil
}

// Validate checks a configuration (defaults applied or not) and returns
// the first problem as a *FieldError, fields checked in document order.
func (c Config) Validate() error {
	switch c.Format {
	case FormatAuto, FormatNDJSON, FormatText, FormatParquet:
	default:
		return fieldErr("format", "%q is not one of ndjson, text, parquet", c.Format)
	}
	switch c.Compression {
	case "", CompressionNone, CompressionGzip, CompressionZstd:
	case CompressionSnappy:
		if c.Format != FormatParquet {
			return fieldErr("compression", "snappy is a Parquet page codec: for %s use none, gzip or zstd", formatName(c.Format))
		}
	default:
		return fieldErr("compression", "%q is not one of none, gzip, zstd (or snappy for parquet)", c.Compression)
	}
	switch c.Table {
	case "", TableNone:
	case TableIceberg:
		if c.Format != FormatParquet {
			return fieldErr("table", "an Iceberg table needs format parquet")
		}
		if c.Partition == "" {
			return fieldErr("partition", "an Iceberg table needs a partition template of its columns ({time:F:%%Y-%%m-%%d}, {time:F:%%H}, {field:F}) or of literal text only; the default partitions by ingest time, which is no column")
		}
	default:
		return fieldErr("table", "%q is not one of none, iceberg", c.Table)
	}
	if c.KeepSnapshots < 0 || c.KeepSnapshots > MaxKeepSnapshots {
		return fieldErr("keep_snapshots", "%d is outside 1..%d (0 for the default, %d)", c.KeepSnapshots, MaxKeepSnapshots, DefaultKeepSnapshots)
	}
	if c.KeepSnapshots != 0 && !c.IsTable() {
		return fieldErr("keep_snapshots", "only a table stream keeps snapshots: set table to iceberg")
	}
	if c.IsTable() {
		if err := c.validateTable(); err != nil {
			return err
		}
	}
	if c.Partition != "" {
		tmpl, err := layout.CompileTemplate(c.Partition)
		if err != nil {
			return partitionErr(err)
		}
		if tmpl.NeedsRecord() && c.Format != FormatNDJSON && c.Format != FormatParquet {
			return fieldErr("partition", "{time:...} and {field:...} read JSON records: set format to ndjson or parquet")
		}
		if c.Format == FormatParquet && c.Schema != nil {
			for _, f := range tmpl.Fields() {
				if c.Schema.index(f) < 0 {
					return fieldErr("partition", "field %q is not in the schema (Parquet keeps only schema fields)", f)
				}
			}
		}
	}
	if c.Schema != nil {
		if c.Format != FormatNDJSON && c.Format != FormatParquet {
			return fieldErr("schema", "a schema checks JSON records: set format to ndjson or parquet")
		}
		if err := c.Schema.validate(); err != nil {
			return err
		}
	} else if c.Format == FormatParquet {
		return fieldErr("schema", "format parquet needs a schema")
	}
	if c.RollSize != 0 && (c.RollSize < MinRollSize || c.RollSize > MaxRollSize) {
		return fieldErr("roll_size", "%d is outside %d..%d bytes (0 for the server's --roll-size)", c.RollSize, MinRollSize, int64(MaxRollSize))
	}
	switch c.Dedup {
	case "", DedupNone, DedupBody:
	default:
		return fieldErr("dedup", "%q is not one of none, body", c.Dedup)
	}
	if c.MaxPartitions < 0 || c.MaxPartitions > MaxPartitions {
		return fieldErr("max_partitions", "%d is outside 1..%d (0 for the default, %d)", c.MaxPartitions, MaxPartitions, DefaultMaxPartitions)
	}
	return nil
}

// partitionErr is the partition field's error for a template that does
// not compile: the byte offset and message of a *layout.TemplateError.
func partitionErr(err error) error {
	var te *layout.TemplateError
	if errors.As(err, &te) {
		return fieldErr("partition", "at byte %d: %s", te.Offset, te.Msg)
	}
	return fieldErr("partition", "%v", err)
}

func formatName(f string) string {
	if f == "" {
		return "ndjson and text"
	}
	return f
}

// validateTable checks what an Iceberg table needs of the partition
// template and the schema: transforms of schema columns of the right type.
func (c Config) validateTable() error {
	tt, err := layout.CompileTableTemplate(c.Partition)
	if err != nil {
		return partitionErr(err)
	}
	if c.Schema == nil {
		return nil // the schema check below says it is needed
	}
	for _, p := range tt.Parts {
		i := c.Schema.index(p.Field)
		if i < 0 {
			return fieldErr("partition", "field %q is not in the schema", p.Field)
		}
		f := c.Schema.Fields[i]
		switch {
		case p.Transform == layout.TransformIdentity && f.Type != TypeString && f.Type != TypeInt64:
			return fieldErr("partition", "{field:%s}: identity partitions of a table take a string or int64 column, %q is %s", p.Field, p.Field, f.Type)
		case p.Transform != layout.TransformIdentity && f.Type != TypeTimestamp:
			return fieldErr("partition", "{time:%s:...}: %s partitions of a table take a timestamp column, %q is %s", p.Field, p.Transform, p.Field, f.Type)
		case !f.Required:
			return fieldErr("partition", "field %q: a table partitions by required columns only", p.Field)
		}
	}
	return nil
}

// TableTemplate compiles the partition template of a table stream. Call
// it on a validated Config with IsTable.
func (c Config) TableTemplate() (*layout.TableTemplate, error) {
	return layout.CompileTableTemplate(c.Partition)
}

// CheckChange refuses a change of a table stream's configuration that its
// table cannot follow: a table stays a table with its partition template
// and format, and its schema changes only as Iceberg allows without
// rewriting files — optional fields added at the end (the fields' ids are
// their positions). The error is a *FieldError.
func CheckChange(old, next Config) error {
	if !old.IsTable() {
		return nil
	}
	switch {
	case !next.IsTable():
		return fieldErr("table", "the stream is an Iceberg table and stays one")
	case next.Partition != old.Partition:
		return fieldErr("partition", "a table stream keeps its partition template %q (its files and partition spec follow it)", old.Partition)
	case next.Format != old.Format:
		return fieldErr("format", "a table stream stays %s", old.Format)
	}
	if old.Schema == nil || next.Schema == nil {
		return nil
	}
	of, nf := old.Schema.Fields, next.Schema.Fields
	for i, f := range of {
		if i >= len(nf) {
			return fieldErr("schema.fields", "field %q is missing: a table's columns can't be dropped", f.Name)
		}
		if nf[i] != f {
			return fieldErr(fmt.Sprintf("schema.fields[%d]", i), "field %q changed: a table takes only new optional fields, added at the end", f.Name)
		}
	}
	for i := len(of); i < len(nf); i++ {
		if nf[i].Required {
			return fieldErr(fmt.Sprintf("schema.fields[%d].required", i), "a new field of a table must be optional: its older files have no value for it")
		}
	}
	return nil
}

// Template compiles the configuration's partition template (the default
// when none is set). Call it on a validated Config.
func (c Config) Template() (*layout.Template, error) {
	if c.IsTable() {
		tt, err := layout.CompileTableTemplate(c.Partition)
		if err != nil {
			return nil, err
		}
		return tt.Template, nil
	}
	if c.Partition == "" {
		return layout.CompileTemplate(layout.DefaultPartition)
	}
	return layout.CompileTemplate(c.Partition)
}

// Ext returns the extension of a file holding records of kind content,
// "ndjson" (a JSON write) or "txt" (a text/plain write), for this
// configuration: "ndjson", "txt" or "parquet", then ".gz" or ".zst" for a
// compressed ndjson or text stream. A text write to a stream of format
// ndjson or parquet is refused with ErrContentMismatch: its lines are not
// JSON. JSON writes to a text stream are stored as text lines.
func (c Config) Ext(content string) (string, error) {
	var base string
	switch {
	case content != ExtNDJSON && content != ExtText:
		return "", fmt.Errorf("file extension for content %q: %w", content, ErrContentMismatch)
	case c.Format == FormatParquet || c.Format == FormatNDJSON:
		if content == ExtText {
			return "", fmt.Errorf("text records for a %s stream: %w", c.Format, ErrContentMismatch)
		}
		base = ExtNDJSON
		if c.Format == FormatParquet {
			return ExtParquet, nil
		}
	case c.Format == FormatText:
		base = ExtText
	default:
		base = content
	}
	switch c.Compression {
	case CompressionGzip:
		return base + ExtGzip, nil
	case CompressionZstd:
		return base + ExtZstd, nil
	}
	return base, nil
}

// ErrContentMismatch means a write's content type does not fit the
// stream's format; the API answers 415.
var ErrContentMismatch = errors.New("content type does not fit the stream's format")

// File extensions (without the leading dot of the whole extension).
const (
	ExtNDJSON  = "ndjson"
	ExtText    = "txt"
	ExtParquet = "parquet"
	ExtGzip    = ".gz"
	ExtZstd    = ".zst"
)

// ParseExt is Ext's inverse for a file name: the format (ndjson, text,
// parquet) and compression (none, gzip, zstd) its extension says, and the
// extension itself. ok is false for a name without one of the known
// extensions. Parquet page codecs are inside the file, not in its name.
func ParseExt(name string) (format, compression, ext string, ok bool) {
	compression = CompressionNone
	rest := name
	switch {
	case strings.HasSuffix(rest, ExtGzip):
		compression, rest = CompressionGzip, strings.TrimSuffix(rest, ExtGzip)
	case strings.HasSuffix(rest, ExtZstd):
		compression, rest = CompressionZstd, strings.TrimSuffix(rest, ExtZstd)
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", "", "", false
	}
	ext = name[i+1:]
	switch rest[i+1:] {
	case ExtNDJSON:
		return FormatNDJSON, compression, ext, true
	case ExtText:
		return FormatText, compression, ext, true
	case ExtParquet:
		if compression == CompressionNone {
			return FormatParquet, compression, ext, true
		}
	}
	return "", "", "", false
}
