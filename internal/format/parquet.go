package format

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/eosink/eosink/internal/jsontop"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	pqgzip "github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
)

// Parquet files.
//
// A stream's schema maps to a flat Parquet schema, one column per field in
// the schema's order, optional unless required:
//
//	string    BYTE_ARRAY (STRING)
//	int64     INT64
//	double    DOUBLE
//	bool      BOOLEAN
//	timestamp INT64 (TIMESTAMP(isAdjustedToUTC=true, MICROS)); finer digits
//	          of an RFC 3339 time are truncated to the microsecond
//	json      BYTE_ARRAY (JSON), the value's JSON text as written
//
// Every column carries a field id, its position from 1 (for all streams:
// Iceberg table streams need them, other readers ignore them).
//
// Record fields not in the schema can't be stored, so the write path refuses
// them for Parquet streams (streamconf.NewChecker(strict)); Encode refuses
// them too rather than drop data.

// ParquetSchema returns the Parquet schema for a stream schema.
func ParquetSchema(s *streamconf.Schema) (*parquet.Schema, error) {
	if s == nil || len(s.Fields) == 0 {
		return nil, fmt.Errorf("%w: Parquet needs a schema with fields", ErrUnsupported)
	}
	g := orderedGroup{Group: parquet.Group{}}
	for _, f := range s.Fields {
		var n parquet.Node
		switch f.Type {
		case streamconf.TypeString:
			n = parquet.String()
		case streamconf.TypeInt64:
			n = parquet.Int(64)
		case streamconf.TypeDouble:
			n = parquet.Leaf(parquet.DoubleType)
		case streamconf.TypeBool:
			n = parquet.Leaf(parquet.BooleanType)
		case streamconf.TypeTimestamp:
			n = parquet.Timestamp(parquet.Microsecond)
		case streamconf.TypeJSON:
			n = parquet.JSON()
		default:
			return nil, fmt.Errorf("%w: field %q of type %q", ErrUnsupported, f.Name, f.Type)
		}
		if !f.Required {
			n = parquet.Optional(n)
		}
		// Field ids are the fields' positions from 1, as the Iceberg table
		// schema gives them (internal/table): Iceberg readers match
		// columns by id. Other readers ignore them.
		n = parquet.FieldID(n, len(g.names)+1)
		g.Group[f.Name] = n
		g.names = append(g.names, f.Name)
	}
	return parquet.NewSchema("record", g), nil
}

// orderedGroup is a parquet.Group whose columns keep the schema's order
// (parquet.Group sorts them by name).
type orderedGroup struct {
	parquet.Group
	names []string
}

func (g orderedGroup) Fields() []parquet.Field {
	out := make([]parquet.Field, len(g.names))
	for i, name := range g.names {
		out[i] = namedField{Node: g.Group[name], name: name}
	}
	return out
}

type namedField struct {
	parquet.Node
	name string
}

func (f namedField) Name() string { return f.name }

// Value is for building rows from Go values, which Encode never does: rows
// are made from the records' JSON.
func (f namedField) Value(reflect.Value) reflect.Value { return reflect.Value{} }

func pageCodec(c string) (compress.Codec, error) {
	switch c {
	case "", streamconf.CompressionZstd:
		return &pqzstd.Codec{Level: pqzstd.DefaultLevel, Concurrency: 1}, nil
	case streamconf.CompressionSnappy:
		return &snappy.Codec{}, nil
	case streamconf.CompressionGzip:
		return &pqgzip.Codec{Level: pqgzip.DefaultCompression}, nil
	case streamconf.CompressionNone:
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("%w: Parquet page codec %q", ErrUnsupported, c)
}

// encodeParquet writes the NDJSON records of r to w as one Parquet file and
// returns how many it wrote.
func encodeParquet(w io.Writer, r io.Reader, e Encoding) (records int64, err error) {
	schema, err := ParquetSchema(e.Schema)
	if err != nil {
		return 0, err
	}
	codec, err := pageCodec(e.Compression)
	if err != nil {
		return 0, err
	}
	groupBytes := e.RowGroupBytes
	if groupBytes <= 0 {
		groupBytes = DefaultRowGroupBytes
	}
	defer func() {
		// parquet-go panics on some internal errors; a panic must not take
		// the process down with it: the transaction aborts instead.
		if p := recover(); p != nil {
			err = fmt.Errorf("parquet writer panicked: %v", p)
		}
	}()
	pw := parquet.NewWriter(w, schema, parquet.Compression(codec))
	check := e.Schema.NewChecker(true)
	fields := e.Schema.Fields
	br := bufio.NewReaderSize(r, encodeBufferSize)
	var line []byte
	rows := []parquet.Row{make(parquet.Row, 0, len(fields))}
	var inGroup int64
	for {
		line, err = readLine(br, line[:0])
		if err == io.EOF {
			break
		}
		if err != nil {
			return records, err
		}
		vals, err := check.Values(line)
		if err != nil {
			return records, fmt.Errorf("record %d: %w", records+1, err)
		}
		row := rows[0][:0]
		for i, f := range fields {
			v, err := parquetValue(f.Type, vals[i])
			if err != nil {
				return records, fmt.Errorf("record %d: field %q: %w", records+1, f.Name, err)
			}
			def := 0
			if !f.Required && vals[i] != nil {
				def = 1
			}
			row = append(row, v.Level(0, def, i))
		}
		rows[0] = row
		if _, err := pw.WriteRows(rows); err != nil {
			return records, fmt.Errorf("write Parquet row: %w", err)
		}
		records++
		if inGroup += int64(len(line)) + 1; inGroup >= groupBytes {
			if e.beforeRowGroup != nil {
				e.beforeRowGroup()
			}
			if err := pw.Flush(); err != nil {
				return records, fmt.Errorf("write Parquet row group: %w", err)
			}
			inGroup = 0
		}
	}
	if e.beforeRowGroup != nil {
		e.beforeRowGroup()
	}
	if err := pw.Close(); err != nil {
		return records, fmt.Errorf("finish Parquet file: %w", err)
	}
	return records, nil
}

// parquetValue converts one checked raw JSON value (nil when absent).
func parquetValue(t streamconf.Type, raw []byte) (parquet.Value, error) {
	if raw == nil {
		return parquet.NullValue(), nil
	}
	switch t {
	case streamconf.TypeString:
		// No copies: the writer copies values into its column buffers
		// during WriteRows, before the line buffer is reused
		// (TestEncodeRoundTrip would see reused bytes otherwise).
		b, err := jsontop.StrBytes(raw)
		if err != nil {
			return parquet.Value{}, err
		}
		return parquet.ByteArrayValue(b), nil
	case streamconf.TypeInt64:
		n, _ := streamconf.ParseInt64(raw) // checked
		return parquet.Int64Value(n), nil
	case streamconf.TypeDouble:
		d, _ := streamconf.ParseDouble(raw) // checked
		return parquet.DoubleValue(d), nil
	case streamconf.TypeBool:
		return parquet.BooleanValue(raw[0] == 't'), nil
	case streamconf.TypeTimestamp:
		tm, err := streamconf.ParseTimestamp(raw)
		if err != nil {
			return parquet.Value{}, err
		}
		return parquet.Int64Value(tm.UnixMicro()), nil
	case streamconf.TypeJSON:
		return parquet.ByteArrayValue(raw), nil
	}
	return parquet.Value{}, fmt.Errorf("%w: type %q", ErrUnsupported, t)
}

// errRecordTooLarge is returned for a line over MaxRecordBytes.
var errRecordTooLarge = fmt.Errorf("record longer than %d bytes", MaxRecordBytes)

// readLine appends the next '\n'-terminated line of br to buf, without the
// '\n'. It returns io.EOF at the end, and io.ErrUnexpectedEOF for a last
// line without '\n' (a plain temp file always ends in one).
func readLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > MaxRecordBytes+1 {
			return buf, errRecordTooLarge
		}
		buf = append(buf, frag...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(buf) > 0:
			return buf, io.ErrUnexpectedEOF
		default:
			return buf, err
		}
	}
}
