package web

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// Preview limits.
const (
	previewLines = 50
	previewBytes = 64 << 10
	// previewCompressed bounds the compressed bytes read for a gzip preview.
	previewCompressed = 1 << 20
	// maxPretty bounds a line pretty-printed; longer ones show as text.
	maxPretty = 16 << 10
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
}

// readPreview reads the first lines of a file: at most previewLines lines
// and previewBytes bytes (after decompression for .gz). Lines that are valid
// JSON are pretty-printed; others show as text, invalid UTF-8 replaced.
func readPreview(r io.Reader, name string) (preview, error) {
	switch path.Ext(name) {
	case ".gz":
		zr, err := gzip.NewReader(io.LimitReader(r, previewCompressed))
		if err != nil {
			return preview{Note: "This file is not valid gzip."}, nil
		}
		defer zr.Close()
		r = zr
	case ".zst":
		return preview{Note: "This file is compressed with zstd; download it to read it."}, nil
	}
	buf := make([]byte, previewBytes+1)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		if strings.HasSuffix(name, ".gz") {
			// A gzip stream cut by the compressed limit: show what came out.
			if n == 0 {
				return preview{Note: "This gzip file could not be read."}, nil
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
		var out bytes.Buffer
		if json.Indent(&out, data, "", "  ") == nil {
			for i, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
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
			var out bytes.Buffer
			if json.Indent(&out, []byte(line), "", "  ") == nil {
				pl.JSON, pl.Segs = true, highlightJSON(out.String())
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

// highlightJSON splits indented JSON into classed runs: object keys, string
// values, numbers, literals (true, false, null) and punctuation. The text is
// escaped by the template, never here.
func highlightJSON(s string) []seg {
	var out []seg
	add := func(class, text string) {
		if n := len(out); n > 0 && out[n-1].Class == class {
			out[n-1].Text += text
			return
		}
		out = append(out, seg{Class: class, Text: text})
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
			add(class, s[i:j])
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(s) && strings.IndexByte("0123456789.eE+-", s[j]) >= 0 {
				j++
			}
			add("n", s[i:j])
			i = j
		case c == 't' || c == 'f' || c == 'n':
			j := i
			for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
				j++
			}
			add("l", s[i:j])
			i = j
		case strings.IndexByte("{}[],:", c) >= 0:
			add("p", s[i:i+1])
			i++
		default:
			add("", s[i:i+1])
			i++
		}
	}
	return out
}
