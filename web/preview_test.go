package web

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/stagetest"
	"github.com/eosink/eosink/staging"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
	"github.com/spf13/afero"
)

// previewSize is the bytes of text a preview holds.
func previewSize(p preview) int {
	n := 0
	for _, l := range p.Lines {
		n += len(l.Text)
		for _, s := range l.Segs {
			n += len(s.Text)
		}
	}
	return n
}

// TestPreviewDeepJSON: pretty-printing costs time and output quadratic in
// nesting depth (a 5 KB record 2,500 deep made a 12.6 MB page and 9 s of
// CPU). Past the depth bound a line shows raw, as sent.
func TestPreviewDeepJSON(t *testing.T) {
	deep := func(d int) string { return strings.Repeat("[", d) + strings.Repeat("]", d) }
	wide := "[" + strings.Repeat("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],", 200) + "0]"
	tests := []struct {
		name, file, body string
		raw              bool // the deep line shows as text
	}{
		{"ndjson 2,500 deep", "f.ndjson", "{\"ok\":1}\n" + deep(2500) + "\n", true},
		{"ndjson 10,000 deep", "f.ndjson", "{\"ok\":1}\n" + deep(10000) + "\n", true},
		{"json document 10,000 deep", "f.json", deep(10000), true},
		{"ndjson shallow and wide", "f.ndjson", "{\"ok\":1}\n" + wide + "\n", true},
		{"ndjson 20 deep is pretty", "f.ndjson", "{\"ok\":1}\n" + deep(20) + "\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := readPreview(t.Context(), strings.NewReader(tt.body), tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if n := previewSize(p); n > 4*previewBytes {
				t.Fatalf("preview holds %d bytes of text for a %d-byte file", n, len(tt.body))
			}
			last := p.Lines[len(p.Lines)-1]
			if last.JSON == tt.raw {
				t.Fatalf("deep line pretty-printed: %v, want %v", last.JSON, !tt.raw)
			}
			if tt.raw && last.Text != strings.TrimSuffix(tt.body[strings.LastIndexByte(strings.TrimSuffix(tt.body, "\n"), '\n')+1:], "\n") {
				t.Fatalf("raw line %.40q… is not the line as sent", last.Text)
			}
		})
	}
}

// TestPreviewStopsWhenClientLeaves: a preview for a request that is gone
// stops with the context's error.
func TestPreviewStopsWhenClientLeaves(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := readPreview(ctx, strings.NewReader(strings.Repeat("{\"n\":1}\n", 40)), "f.ndjson")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// TestPreviewEncoded: a zstd file is decompressed for its preview, a
// Parquet file shows its first rows as a table. Fails before: zstd showed
// only a note, Parquet showed "binary data".
func TestPreviewEncoded(t *testing.T) {
	fs := afero.NewMemMapFs()
	schema := &streamconf.Schema{Fields: []streamconf.Field{{Name: "id", Type: streamconf.TypeInt64, Required: true}, {Name: "name", Type: streamconf.TypeString}}}
	var recs []string
	for i := range 30 {
		r := fmt.Sprintf(`{"id":%d}`, i)
		if i%2 == 0 {
			r = fmt.Sprintf(`{"id":%d,"name":"n<%d>"}`, i, i)
		}
		recs = append(recs, r)
	}
	for _, c := range []struct {
		ext string
		enc format.Encoding
	}{
		{"ndjson.zst", format.Encoding{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}},
		{"parquet", format.Encoding{Format: streamconf.FormatParquet, Schema: schema}},
	} {
		enc := stagetest.Encode(t, fs, "/t-"+c.ext+staging.Suffix, recs, c.enc)
		f, err := fs.Open(enc.Temp)
		if err != nil {
			t.Fatal(err)
		}
		p, err := readPreview(t.Context(), f, "s/part-n1-00000000000000000001-0000."+c.ext)
		f.Close()
		if err != nil || p.Note != "" {
			t.Fatalf("%s: %v %q", c.ext, err, p.Note)
		}
		switch c.ext {
		case "parquet":
			tb := p.Table
			if tb == nil || len(tb.Rows) != previewRows || !p.More || strings.Join(tb.Columns, ",") != "id,name" {
				t.Fatalf("parquet table %+v more %v", tb, p.More)
			}
			if got := strings.Join(tb.Rows[2], "|") + " " + strings.Join(tb.Rows[3], "|"); got != "2|n<2> 3|" {
				t.Fatalf("parquet rows 2 and 3: %q", got)
			}
		default:
			if len(p.Lines) != 30 || !p.Lines[0].JSON || !strings.Contains(previewText(p.Lines[4]), `"n<4>"`) {
				t.Fatalf("zstd preview: %d lines %+v", len(p.Lines), p.Lines[:1])
			}
		}
	}
}

func previewText(l previewLine) string {
	s := l.Text
	for _, g := range l.Segs {
		s += g.Text
	}
	return s
}

// hostileParquet returns a Parquet file of three int64 rows whose one
// page header claims compressed bytes and values it does not hold, as a
// file planted in the destination may.
func hostileParquet(t *testing.T, compressed, values int32) []byte {
	t.Helper()
	type row struct{ ID int64 }
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.Compression(&parquet.Uncompressed))
	if _, err := w.Write([]row{{1}, {2}, {3}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	md := *f.Metadata()
	cc := &md.RowGroups[0].Columns[0]
	off := cc.MetaData.DataPageOffset
	var proto thrift.CompactProtocol
	br := proto.NewReaderFromBytes(data[off:])
	var h pqformat.PageHeader
	if err := thrift.NewDecoder(br).Decode(&h); err != nil {
		t.Fatal(err)
	}
	page := data[off+int64(br.BytesRead()) : off+int64(br.BytesRead())+int64(h.CompressedPageSize)]
	if compressed > 0 { // 0: as written
		h.CompressedPageSize, h.UncompressedPageSize = compressed, compressed
	}
	if h.DataPageHeaderV2.Valid {
		h.DataPageHeaderV2.V.NumValues, h.DataPageHeaderV2.V.NumRows = values, values
	} else {
		h.DataPageHeader.V.NumValues = values
	}
	hdr, err := thrift.Marshal(&proto, &h)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte("PAR1"), hdr...)
	out = append(out, page...)
	cc.MetaData.DataPageOffset, cc.MetaData.DictionaryPageOffset = 4, 0
	cc.MetaData.TotalCompressedSize = int64(len(hdr) + len(page))
	cc.MetaData.TotalUncompressedSize = cc.MetaData.TotalCompressedSize
	cc.FileOffset = 4
	cc.ColumnIndexOffset, cc.ColumnIndexLength, cc.OffsetIndexOffset, cc.OffsetIndexLength = 0, 0, 0, 0
	footer, err := thrift.Marshal(&proto, &md)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	return append(out, "PAR1"...)
}

// TestPreviewHostileParquet: a Parquet file planted in the destination
// whose page header claims 512 MiB (or a billion values) is refused a
// preview with a note, before anything of that size is allocated (each
// preview allocated what the header claimed: 0.5-2 GB). The same file
// with honest headers previews.
func TestPreviewHostileParquet(t *testing.T) {
	honest := hostileParquet(t, 0, 3) // rebuilt the same way, sizes as written
	for _, tt := range []struct {
		name   string
		data   []byte
		refuse bool
	}{
		{"512 MiB page", hostileParquet(t, 512<<20, 3), true},
		{"a billion values", hostileParquet(t, 24, 1<<30), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			p, err := readPreview(t.Context(), bytes.NewReader(tt.data), "s/part-n1-00000000000000000001-0000.parquet")
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("a preview of a %d-byte file allocated %d MiB", len(tt.data), got>>20)
			}
			if p.Table != nil || !strings.Contains(p.Note, "too large to preview") {
				t.Errorf("preview %+v, want a note that it is too large", p)
			}
		})
	}
	p, err := readPreview(t.Context(), bytes.NewReader(honest), "s/part-n1-00000000000000000001-0000.parquet")
	if err != nil || p.Table == nil || len(p.Table.Rows) != 3 || p.Table.Rows[2][0] != "3" {
		t.Fatalf("the honest file: %v %+v", err, p)
	}
}
