package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
)

// Preview limits.
const (
	previewLines = 50
	previewBytes = 64 << 10
	// previewCompressed bounds the compressed bytes read for a gzip preview.
	previewCompressed = 1 << 20
	// maxPretty bounds a line pretty-printed; longer ones show as text.
	maxPretty = 16 << 10
	// maxPrettyDepth and maxPrettyOut bound what is pretty-printed: the
	// indented form grows with length times depth, so a deep or dense
	// value shows as sent instead.
	maxPrettyDepth = 64
	maxPrettyOut   = 128 << 10
)

// seg is a run of preview text with a highlighting class ("" for plain).
type seg struct {
	Class string
	Text  string
}

// previewLine is one line of a file's preview.
type previewLine struct {
	N    int
	JSON bool  // pretty-printed JSON, in Segs
	Segs []seg // for JSON lines
	Text string
	Cut  bool // the line goes on past the bytes read
}

// preview is the start of a file.
type preview struct {
	Lines     []previewLine
	More      bool   // the file goes on past the lines shown
	Note      string // why there is no preview, if there is none
	BytesRead int
	// Table holds the first rows of a Parquet file (preview_table.go);
	// Lines is then empty.
	Table *previewTable
}

// readPreview reads the first lines of a file: at most previewLines lines
// and previewBytes bytes (after decompression for .gz). Lines that are valid
// JSON are pretty-printed; others show as text, invalid UTF-8 replaced.
// It stops with ctx's error when the request is gone.
func readPreview(ctx context.Context, r io.Reader, name string) (preview, error) {
	switch path.Ext(name) {
	case streamconf.ExtGzip, streamconf.ExtZstd:
		zr, err := format.Decompress(io.LimitReader(r, previewCompressed), name, previewZstdWindow)
		if err != nil {
			return preview{Note: map[string]string{streamconf.ExtGzip: "This file is not valid gzip.", streamconf.ExtZstd: "This file is not valid zstd."}[path.Ext(name)]}, nil
		}
		defer zr.Close()
		r = zr
	case "." + streamconf.ExtParquet:
		return readParquetPreview(ctx, r, name) // preview_table.go
	}
	buf := make([]byte, previewBytes+1)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		if ext := path.Ext(name); ext == streamconf.ExtGzip || ext == streamconf.ExtZstd {
			// A compressed stream cut by the compressed limit: show what came out.
			if n == 0 {
				return preview{Note: "This compressed file could not be read."}, nil
			}
		} else {
			return preview{}, err
		}
	}
	p := preview{BytesRead: min(n, previewBytes)}
	data := buf[:n]
	more := n > previewBytes
	if more {
		data = data[:previewBytes]
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return preview{Note: "This file holds binary data; download it to read it."}, nil
	}
	if path.Ext(name) == ".json" && !more && json.Valid(data) {
		// One document over many lines (a manifest): indent it whole.
		if out, ok := indent(data); ok {
			for i, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
				if i == previewLines {
					p.More = true
					break
				}
				p.Lines = append(p.Lines, previewLine{N: i + 1, JSON: true, Segs: highlightJSON(line)})
			}
			return p, nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), previewBytes+1)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return preview{}, err
		}
		if len(p.Lines) == previewLines {
			p.More = true
			break
		}
		line := strings.TrimSuffix(sc.Text(), "\r")
		pl := previewLine{N: len(p.Lines) + 1}
		if !utf8.ValidString(line) {
			line = strings.ToValidUTF8(line, "\uFFFD")
		}
		if len(line) <= maxPretty && json.Valid([]byte(line)) {
			if out, ok := indent([]byte(line)); ok {
				pl.JSON, pl.Segs = true, highlightJSON(out)
			}
		}
		if !pl.JSON {
			pl.Text = line
		}
		p.Lines = append(p.Lines, pl)
	}
	if more && len(p.Lines) > 0 && !p.More {
		// The last line read may be cut at the byte limit.
		if !bytes.HasSuffix(data, []byte("\n")) {
			last := &p.Lines[len(p.Lines)-1]
			last.Cut, last.JSON, last.Segs = true, false, nil
			last.Text = strings.ToValidUTF8(string(data[bytes.LastIndexByte(data, '\n')+1:]), "\uFFFD")
		}
		p.More = true
	}
	return p, nil
}

// indent pretty-prints the valid JSON b, or returns false if it nests
// deeper than maxPrettyDepth or its indented form could pass maxPrettyOut
// bytes: both are known from one scan, before any indenting.
func indent(b []byte) (string, bool) {
	depth, maxDepth, size := 0, 0, len(b)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			maxDepth = max(maxDepth, depth)
			size += 1 + 2*depth // a line break and the next line's indent
		case ']', '}':
			depth--
			size += 1 + 2*depth
		case ',':
			size += 1 + 2*depth
		case ':':
			size++ // the space after it
		}
		if maxDepth > maxPrettyDepth || size > maxPrettyOut {
			return "", false
		}
	}
	var out bytes.Buffer
	out.Grow(size)
	if json.Indent(&out, b, "", "  ") != nil {
		return "", false
	}
	return out.String(), true
}

// highlightJSON splits indented JSON into classed runs: object keys, string
// values, numbers, literals (true, false, null) and punctuation. Runs are
// slices of s, so adjacent runs of one class merge by moving an end, never
// by copying. The text is escaped by the template, never here.
func highlightJSON(s string) []seg {
	var out []seg
	start := 0 // where the last run in out starts in s
	add := func(class string, from, to int) {
		if n := len(out); n > 0 && out[n-1].Class == class {
			out[n-1].Text = s[start:to]
			return
		}
		out = append(out, seg{Class: class, Text: s[from:to]})
		start = from
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s))
			class := "s"
			if k := strings.IndexFunc(s[j:], func(r rune) bool { return r != ' ' }); k >= 0 && s[j+k] == ':' {
				class = "k"
			}
			add(class, i, j)
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(s) && strings.IndexByte("0123456789.eE+-", s[j]) >= 0 {
				j++
			}
			add("n", i, j)
			i = j
		case c == 't' || c == 'f' || c == 'n':
			j := i
			for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
				j++
			}
			add("l", i, j)
			i = j
		case strings.IndexByte("{}[],:", c) >= 0:
			add("p", i, i+1)
			i++
		default:
			add("", i, i+1)
			i++
		}
	}
	return out
}
