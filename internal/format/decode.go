package format

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/parquet-go/parquet-go"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// Reading committed files back, for previews and `eosink verify`.
//
// OpenRecords decodes a file of any kind this package writes, chosen by its
// name's extension (streamconf.ParseExt): plain, gzip (concatenated members
// allowed) and zstd (concatenated frames allowed) ndjson or text, one record
// per '\n'-terminated line; and Parquet, each row given as a compact JSON
// object of its non-null fields. Memory is bounded whatever the file's
// size: one record (at most MaxRecordBytes) plus the decoder's state (zstd:
// its window, capped at 64 MiB; Parquet: one page per column).

// ErrCorrupt means a committed file does not decode cleanly: a broken
// compressed stream, a last record without its '\n', a bad Parquet file.
var ErrCorrupt = errors.New("file does not decode")

// Records reads a file's records one at a time. Not safe for concurrent use.
type Records interface {
	// Next returns the next record, without its '\n'. The slice is valid
	// until the next call. At the end it returns io.EOF; a decoding problem
	// is an error wrapping ErrCorrupt.
	Next() ([]byte, error)
	// Close releases the decoder. It does not close the underlying reader.
	Close() error
}

// maxZstdWindow caps the window a zstd file may ask the decoder for; eosink
// writes 1 MiB windows, other writers rarely exceed 8 MiB.
const maxZstdWindow = 64 << 20

// OpenRecords decodes the file named name (only its extension is read)
// whose size bytes r holds.
func OpenRecords(r io.ReaderAt, size int64, name string) (Records, error) {
	format, compression, _, ok := streamconf.ParseExt(name)
	if !ok {
		return nil, fmt.Errorf("%w: no known extension in %q", ErrUnsupported, name)
	}
	if format == streamconf.FormatParquet {
		return openParquet(r, size)
	}
	sr := io.NewSectionReader(r, 0, size)
	if compression == streamconf.CompressionNone {
		return &lineRecords{br: bufio.NewReaderSize(sr, 64<<10)}, nil
	}
	zr, err := Decompress(bufio.NewReaderSize(sr, 64<<10), name, maxZstdWindow)
	if err != nil {
		return nil, err
	}
	return &lineRecords{br: bufio.NewReaderSize(zr, 64<<10), close: zr.Close}, nil
}

type lineRecords struct {
	br    *bufio.Reader
	buf   []byte
	close func() error
}

func (l *lineRecords) Next() ([]byte, error) {
	var err error
	l.buf, err = readLine(l.br, l.buf[:0])
	switch {
	case err == nil, err == io.EOF:
		return l.buf, err
	case errors.Is(err, io.ErrUnexpectedEOF) && len(l.buf) > 0:
		return nil, fmt.Errorf("%w: last record has no '\\n'", ErrCorrupt)
	}
	return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
}

func (l *lineRecords) Close() error {
	if l.close != nil {
		return l.close()
	}
	return nil
}

// Count decodes the whole file and returns its record count; an error
// wrapping ErrCorrupt says it does not decode cleanly. For Parquet the count
// is of rows read, and must equal the footer's row count.
func Count(r io.ReaderAt, size int64, name string) (int64, error) {
	recs, err := OpenRecords(r, size, name)
	if err != nil {
		return 0, err
	}
	defer recs.Close()
	var n int64
	for {
		if _, err := recs.Next(); err == io.EOF {
			break
		} else if err != nil {
			return n, err
		}
		n++
	}
	if p, ok := recs.(*parquetRecords); ok && n != p.f.NumRows() {
		return n, fmt.Errorf("%w: read %d rows, footer says %d", ErrCorrupt, n, p.f.NumRows())
	}
	return n, nil
}

// Preview returns up to n records from the start of the file, each cut to
// at most maxBytes (0: no cut), for a UI or an API preview. A Parquet file
// whose pages claim more than the preview bounds is ErrTooLargeToPreview,
// before any page is read (preview.go).
func Preview(r io.ReaderAt, size int64, name string, n, maxBytes int) ([][]byte, error) {
	recs, err := OpenRecords(r, size, name)
	if err != nil {
		return nil, err
	}
	defer recs.Close()
	if p, ok := recs.(*parquetRecords); ok {
		if err := p.checkPreview(r, size, n); err != nil {
			return nil, err
		}
	}
	var out [][]byte
	for len(out) < n {
		rec, err := recs.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
		if maxBytes > 0 && len(rec) > maxBytes {
			rec = rec[:maxBytes]
		}
		out = append(out, append([]byte(nil), rec...))
	}
	return out, nil
}

// parquetRecords gives a flat Parquet file's rows as JSON objects.
type parquetRecords struct {
	f     *parquet.File
	rows  parquet.Rows
	group int
	cols  []pqColumn
	buf   []parquet.Row
	out   []byte
}

type pqColumn struct {
	name string // JSON-quoted
	kind pqKind
	unit time.Duration // timestamps
}

type pqKind uint8

const (
	pqString pqKind = iota
	pqJSON
	pqInt
	pqDouble
	pqBool
	pqTimestamp
)

func openParquet(r io.ReaderAt, size int64) (rec Records, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: Parquet reader panicked: %v", ErrCorrupt, p)
		}
	}()
	// parquet-go allocates the footer length the file claims before
	// reading it: check it against the file's size first, so a corrupt
	// file can't make verify allocate gigabytes.
	var tail [8]byte
	if size < 12 {
		return nil, fmt.Errorf("%w: %d bytes is too short for Parquet", ErrCorrupt, size)
	}
	// A ReaderAt may answer a read that reaches the end with io.EOF and
	// every byte (S3 objects do): only a short read is an error.
	if n, err := r.ReadAt(tail[:], size-8); n < len(tail) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read Parquet footer: %w", err)
	}
	if footer := int64(binary.LittleEndian.Uint32(tail[:4])); footer > size-12 {
		return nil, fmt.Errorf("%w: Parquet footer of %d bytes in a file of %d", ErrCorrupt, footer, size)
	}
	// The page index and bloom filters are not needed to read rows, and
	// their lengths are claims of the file too.
	f, err := parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	p := &parquetRecords{f: f, buf: make([]parquet.Row, 1)}
	for _, field := range f.Schema().Fields() {
		if !field.Leaf() || field.Repeated() {
			return nil, fmt.Errorf("%w: Parquet column %q is not a flat field", ErrUnsupported, field.Name())
		}
		c := pqColumn{name: strconv.Quote(field.Name())}
		t := field.Type()
		var lv pqformat.LogicalTypeValue
		if lt := t.LogicalType(); lt != nil {
			lv = lt.Value
		}
		ts, isTS := lv.(*pqformat.TimestampType)
		_, isJSON := lv.(*pqformat.JsonType)
		switch {
		case t.Kind() == parquet.Boolean:
			c.kind = pqBool
		case t.Kind() == parquet.Double:
			c.kind = pqDouble
		case t.Kind() == parquet.Int64 && isTS:
			c.kind = pqTimestamp
			switch ts.Unit.Value.(type) {
			case *pqformat.MilliSeconds:
				c.unit = time.Millisecond
			case *pqformat.MicroSeconds:
				c.unit = time.Microsecond
			default:
				c.unit = time.Nanosecond
			}
		case t.Kind() == parquet.Int64 || t.Kind() == parquet.Int32:
			c.kind = pqInt
		case t.Kind() == parquet.ByteArray && isJSON:
			c.kind = pqJSON
		case t.Kind() == parquet.ByteArray:
			c.kind = pqString
		default:
			return nil, fmt.Errorf("%w: Parquet column %q of type %v", ErrUnsupported, field.Name(), t)
		}
		p.cols = append(p.cols, c)
	}
	return p, nil
}

func (p *parquetRecords) Next() (rec []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: Parquet reader panicked: %v", ErrCorrupt, r)
		}
	}()
	for {
		if p.rows == nil {
			groups := p.f.RowGroups()
			if p.group >= len(groups) {
				return nil, io.EOF
			}
			p.rows = groups[p.group].Rows()
			p.group++
		}
		n, err := p.rows.ReadRows(p.buf)
		if n == 1 {
			return p.encode(p.buf[0])
		}
		if err == io.EOF || err == nil {
			if cerr := p.rows.Close(); cerr != nil {
				return nil, fmt.Errorf("%w: %w", ErrCorrupt, cerr)
			}
			p.rows = nil
			continue
		}
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
}

// encode writes a row as a compact JSON object of its non-null fields.
func (p *parquetRecords) encode(row parquet.Row) ([]byte, error) {
	out := append(p.out[:0], '{')
	first := true
	for _, v := range row {
		col := v.Column()
		if col < 0 || col >= len(p.cols) {
			return nil, fmt.Errorf("%w: value of column %d", ErrCorrupt, col)
		}
		if v.IsNull() {
			continue
		}
		c := p.cols[col]
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(append(out, c.name...), ':')
		switch c.kind {
		case pqString:
			out = strconv.AppendQuote(out, string(v.ByteArray()))
		case pqJSON:
			out = append(out, v.ByteArray()...)
		case pqInt:
			n := v.Int64()
			if v.Kind() == parquet.Int32 {
				n = int64(v.Int32())
			}
			out = strconv.AppendInt(out, n, 10)
		case pqDouble:
			out = strconv.AppendFloat(out, v.Double(), 'g', -1, 64)
		case pqBool:
			out = strconv.AppendBool(out, v.Boolean())
		case pqTimestamp:
			var t time.Time
			switch c.unit {
			case time.Millisecond:
				t = time.UnixMilli(v.Int64())
			case time.Microsecond:
				t = time.UnixMicro(v.Int64())
			default:
				t = time.Unix(0, v.Int64())
			}
			t = t.UTC()
			out = strconv.AppendQuote(out, t.Format(time.RFC3339Nano))
		}
	}
	p.out = append(out, '}')
	return p.out, nil
}

func (p *parquetRecords) Close() error {
	if p.rows != nil {
		return p.rows.Close()
	}
	return nil
}
