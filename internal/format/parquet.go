package format

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"unicode/utf8"

	"github.com/eosink/eosink/internal/jsontop"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	pqgzip "github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
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

func pageCodec(c string, concurrency int) (compress.Codec, error) {
	switch {
	case isZstdPages(c):
		return newZstdPages(concurrency)
	}
	switch c {
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
	pw, err := NewParquetWriter(w, e, nil)
	if err != nil {
		return 0, err
	}
	br := bufio.NewReaderSize(r, encodeBufferSize)
	var line []byte
	for {
		line, err = readLine(br, line[:0])
		if err == io.EOF {
			break
		}
		if err != nil {
			return pw.Records(), err
		}
		if err := pw.WriteRecord(line); err != nil {
			return pw.Records(), err
		}
	}
	if err := pw.Close(); err != nil {
		return pw.Records(), err
	}
	return pw.Records(), nil
}

// ParquetWriter writes NDJSON records to one Parquet file as they come, a
// row group at a time: a row group is written to w once RowGroupBytes of
// source records are in it, so its memory is bounded by one row group
// (see DefaultRowGroupBytes) whatever the file's size. Close writes the
// last row group and the footer. After an error the file is unusable and
// every later call returns that error. Not safe for concurrent use.
type ParquetWriter struct {
	pw         *parquet.Writer
	columns    []*parquet.ColumnWriter
	check      *streamconf.Checker
	schema     *streamconf.Schema
	fields     []streamconf.Field
	groupBytes int64
	inGroup    int64 // source bytes in the row group being built
	records    int64
	before     func()
	err        error

	// Rows go to the column writers a batch at a time, each column's
	// values in one call: parquet-go's cost per call (levels, a page size
	// check) then falls on a batch, not on each row, and no []parquet.Row
	// is built. pending holds each column's values of the batch (column
	// i's from i*batchRows, no append, no slice header per column), text the
	// bytes their strings point into (a record's line is reused after
	// WriteRecord).
	pending []parquet.Value
	batched int
	text    []byte
}

// A batch is at most batchRows rows, or the row that takes their strings
// past batchBytes. A page (parquet-go's PageBufferSize, 256 KiB) is cut
// after the batch that fills it, so it may run over by a batch.
const (
	batchRows  = 32
	batchBytes = 32 << 10
)

// NewParquetWriter starts a Parquet file of encoding e on w, its pages
// compressed by pages' codec (nil: a codec of its own). Nothing is written
// before the first row group is complete.
func NewParquetWriter(w io.Writer, e Encoding, pages *PageCodecs) (*ParquetWriter, error) {
	return NewParquetWriterPages(w, e, pages, nil)
}

// NewParquetWriterPages is NewParquetWriter keeping the compressed pages
// of the row group being built in pf instead of the heap (nil: the heap).
// The file's bytes are the same either way. pf is the caller's: written
// from offset 0 again for each row group, never synced or closed here.
func NewParquetWriterPages(w io.Writer, e Encoding, pages *PageCodecs, pf PageFile) (*ParquetWriter, error) {
	schema, err := ParquetSchema(e.Schema)
	if err != nil {
		return nil, err
	}
	codec, err := pages.codec(e.Compression)
	if err != nil {
		return nil, err
	}
	groupBytes := e.RowGroupBytes
	if groupBytes <= 0 {
		groupBytes = DefaultRowGroupBytes
	}
	p := &ParquetWriter{check: e.Schema.NewChecker(true), schema: e.Schema, fields: e.Schema.Fields, groupBytes: groupBytes, before: e.beforeRowGroup}
	p.pending = make([]parquet.Value, len(p.fields)*batchRows)
	err = p.guard(func() error {
		opts := []parquet.WriterOption{schema, parquet.Compression(codec), parquet.DataPageStatistics(pageStatistics)}
		if pf != nil {
			opts = append(opts, parquet.ColumnPageBuffers(newPageFilePool(pf)))
		}
		p.pw = parquet.NewWriter(w, append(opts, testWriterOptions...)...)
		p.columns = p.pw.ColumnWriters()
		if len(p.columns) != len(p.fields) {
			return fmt.Errorf("parquet writer has %d columns, the schema %d fields", len(p.columns), len(p.fields))
		}
		return nil
	})
	return p, err
}

// Records returns the records written so far, in complete row groups or not.
func (p *ParquetWriter) Records() int64 { return p.records }

// Buffered returns the source bytes of the records in the row group being
// built, not yet written to w.
func (p *ParquetWriter) Buffered() int64 { return p.inGroup }

// guard runs f, turning a panic of parquet-go (it panics on some internal
// errors) into an error, and makes the first error sticky: a panic must
// not take the process down with it, the transaction aborts instead.
func (p *ParquetWriter) guard(f func() error) (err error) {
	if p.err != nil {
		return p.err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet writer panicked: %v", r)
		}
		if err != nil {
			p.err = err
		}
	}()
	return f()
}

// WriteRecord adds one record (a JSON object, without its '\n'); when the
// row group holds RowGroupBytes of records it is written to w. The record
// is copied: line may be reused after the call.
func (p *ParquetWriter) WriteRecord(line []byte) error {
	return p.guard(func() error {
		vals, err := p.check.Fields(line)
		if err != nil {
			return fmt.Errorf("record %d: %w", p.records+1, err)
		}
		return p.write(line, vals, false)
	})
}

// WriteChecked adds one record as WriteRecord does, with vals what a strict
// check of line against the writer's schema returned
// (streamconf.Checker.Fields, or Checked.Value for the same bytes): it
// does not parse line again. The caller vouches for vals, and for line
// having passed the write path's validation (valid JSON in valid UTF-8):
// a string value marked Plain is taken as its bytes between the quotes,
// without looking at them again. line is copied.
func (p *ParquetWriter) WriteChecked(line []byte, vals []streamconf.Value) error {
	return p.guard(func() error {
		if len(vals) != len(p.fields) {
			return fmt.Errorf("record %d: %d values for %d fields", p.records+1, len(vals), len(p.fields))
		}
		return p.write(line, vals, true)
	})
}

// Schema returns the stream schema the writer encodes.
func (p *ParquetWriter) Schema() *streamconf.Schema { return p.schema }

// write adds a checked record's values to the batch, and writes the batch
// and the row group when they are full. plain says whether a string value
// marked Plain may be taken as it stands (WriteChecked).
func (p *ParquetWriter) write(line []byte, vals []streamconf.Value, plain bool) error {
	for i := range p.fields {
		f := &p.fields[i]
		// The value is made in place and its levels set there (what
		// v.Level(0, def, i) returns, without copying a Value twice).
		v := &p.pending[i*batchRows+p.batched]
		if err := p.parquetValue(v, f.Type, &vals[i], plain); err != nil {
			return fmt.Errorf("record %d: field %q: %w", p.records+1, f.Name, err)
		}
		if !f.Required && vals[i].Raw != nil {
			v.SetDefinitionLevel(1)
		}
		v.SetColumnIndex(i)
	}
	p.batched++
	p.records++
	if p.batched >= batchRows || len(p.text) >= batchBytes {
		if err := p.writeBatch(); err != nil {
			return err
		}
	}
	if p.inGroup += int64(len(line)) + 1; p.inGroup >= p.groupBytes {
		if err := p.endRowGroup(); err != nil {
			return err
		}
		if err := p.pw.Flush(); err != nil {
			return fmt.Errorf("write Parquet row group: %w", err)
		}
		p.compactIndexes()
		p.inGroup = 0
	}
	return nil
}

// endRowGroup hands the batched rows to the column writers and calls the
// before hook: what comes before a row group is written (a flush, or the
// last at Close).
func (p *ParquetWriter) endRowGroup() error {
	if err := p.writeBatch(); err != nil {
		return err
	}
	if p.before != nil {
		p.before()
	}
	return nil
}

// writeBatch hands the batched rows to the column writers.
func (p *ParquetWriter) writeBatch() error {
	if p.batched == 0 {
		return nil
	}
	for i := range p.columns {
		vals := p.pending[i*batchRows : i*batchRows+p.batched]
		n, err := p.columns[i].WriteRowValues(vals)
		if err == nil && n != p.batched {
			err = fmt.Errorf("column %d took %d of %d rows", i, n, p.batched)
		}
		if err != nil {
			return fmt.Errorf("write Parquet rows: %w", err)
		}
		clear(vals) // no references into text
	}
	p.batched = 0
	if cap(p.text) > 4*batchBytes {
		p.text = nil // a huge record's copy is not kept
	}
	p.text = p.text[:0]
	return nil
}

// Close writes the last row group and the footer. It does not close w.
func (p *ParquetWriter) Close() error {
	return p.guard(func() error {
		if err := p.endRowGroup(); err != nil {
			return err
		}
		if err := p.pw.Close(); err != nil {
			return fmt.Errorf("finish Parquet file: %w", err)
		}
		p.err = errWriterClosed
		return nil
	})
}

// compactIndexes copies the page bounds of the row group just written
// (its column indexes' min and max values, which parquet-go keeps until
// Close writes them in the footer) into one array per column that holds
// just them. parquet-go's arrays hold every page's whole min and max
// value, which a column index then truncates to ColumnIndexSizeLimit
// (16 bytes) by slicing: for a column of ~1 KiB strings that is ~64 KiB
// of heap per row group kept to the end of the file, ~0.6 MiB for a file
// of 10 row groups, for 1 KiB of bounds. The values are the same bytes,
// so is the footer. The arrays are reached through File's view of the
// row group just written, whose ColumnIndex values share their slices with
// what the writer keeps for the footer (parquet-go v0.32.0); should that
// change, the copies are only ignored and the heap is what it was.
func (p *ParquetWriter) compactIndexes() {
	if noCompactIndexes {
		return
	}
	v := p.pw.File()
	if v == nil {
		return
	}
	cis := v.ColumnIndexes()
	for i := range cis {
		compactValues(cis[i].MinValues)
		compactValues(cis[i].MaxValues)
	}
}

// compactValues replaces vs's values by copies in one array of their
// total length, each capped at its own (nil stays nil).
func compactValues(vs [][]byte) {
	n := 0
	for _, v := range vs {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	for j, v := range vs {
		if v == nil {
			continue
		}
		start := len(buf)
		buf = append(buf, v...)
		vs[j] = buf[start:len(buf):len(buf)]
	}
}

// noCompactIndexes turns compactIndexes off: for tests that compare the
// files with and without it.
var noCompactIndexes bool

// pageStatistics says whether each data page's header carries the page's
// statistics (min, max, null count): off. parquet-go v0.32.0 writes them
// by default, whole values (a page of a 1 KiB string column holds two of
// its strings in its header), and scans each page for its bounds twice,
// once for the header and once for the column index. They repeat what the
// file has elsewhere: every file has a column index (page index) with each
// page's bounds (truncated to 16 bytes) and null count, which is what
// readers filter pages by, and each row group's statistics in the footer.
// The Parquet format makes the headers' statistics optional; DuckDB (the
// independent reader of tests/) reads the files the same without them.
// Off, the files come out 1.2-1.5% smaller (the harness's records,
// web-log-like ones), and the header's scan of each page, ~3% of the
// encoder's CPU profile (BenchmarkParquetWriter), is not run; too little
// for that benchmark to resolve on a loaded machine. Issue 26,
// BENCHMARKS.md (h6-pq).
const pageStatistics = false

// testWriterOptions are added to every writer's options: for tests and
// benchmarks that try parquet-go's settings.
var testWriterOptions []parquet.WriterOption

var errWriterClosed = errors.New("parquet writer closed")

// parquetValue sets *out to one checked value (Raw nil when absent), its
// levels zero. A byte array's bytes are copied into p.text, where they
// stay until the batch is written. With plain, a string value marked Plain
// is its bytes between the quotes (see WriteChecked).
func (p *ParquetWriter) parquetValue(out *parquet.Value, t streamconf.Type, v *streamconf.Value, plain bool) error {
	if v.Raw == nil {
		*out = parquet.NullValue()
		return nil
	}
	switch t {
	case streamconf.TypeString:
		if n := len(v.Raw); plain && v.Plain && n >= 2 {
			*out = parquet.ByteArrayValue(p.keep(v.Raw[1 : n-1]))
			return nil
		}
		b, err := stringBytes(v.Raw)
		if err != nil {
			return err
		}
		*out = parquet.ByteArrayValue(p.keep(b))
	case streamconf.TypeInt64, streamconf.TypeTimestamp:
		*out = parquet.Int64Value(v.Int) // the check parsed it: the value, or the time in µs
	case streamconf.TypeDouble:
		*out = parquet.DoubleValue(v.Float)
	case streamconf.TypeBool:
		*out = parquet.BooleanValue(v.Raw[0] == 't')
	case streamconf.TypeJSON:
		*out = parquet.ByteArrayValue(p.keep(v.Raw))
	default:
		return fmt.Errorf("%w: type %q", ErrUnsupported, t)
	}
	return nil
}

// keep copies b into p.text. When text grows, the values made so far keep
// pointing into its old array, which nothing writes to again.
func (p *ParquetWriter) keep(b []byte) []byte {
	start := len(p.text)
	p.text = append(p.text, b...)
	return p.text[start:len(p.text):len(p.text)]
}

// stringBytes returns the text of a JSON string value of a checked record:
// its bytes between the quotes when they mean themselves, else
// jsontop.StrBytes's decoding. The record is valid JSON (the write path
// refuses any other), so its strings hold no raw control bytes: no '\\'
// and valid UTF-8 suffice, and both checks run a word at a time, where
// jsontop's plain goes byte by byte.
func stringBytes(raw []byte) ([]byte, error) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		if in := raw[1 : n-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
			return in, nil
		}
	}
	return jsontop.StrBytes(raw)
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

// PeekLine is ReadLine without a copy when it can: a line that fits in
// br's buffer is returned as a slice of it, valid until the next read of
// br; a longer one is appended to buf as ReadLine does.
func PeekLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	frag, err := br.ReadSlice('\n')
	if err == nil {
		return frag[:len(frag)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err == io.EOF && len(frag) > 0 {
			return append(buf, frag...), io.ErrUnexpectedEOF
		}
		return buf, err
	}
	if len(buf)+len(frag) > MaxRecordBytes+1 {
		return buf, errRecordTooLarge
	}
	return readLine(br, append(buf, frag...))
}

// ReadLine appends the next '\n'-terminated line of br to buf, without the
// '\n', as the encoders read plain records: io.EOF at the end,
// io.ErrUnexpectedEOF for a last line without '\n', and an error for a
// line over MaxRecordBytes.
func ReadLine(br *bufio.Reader, buf []byte) ([]byte, error) { return readLine(br, buf) }
