package web

import (
	"context"
	"errors"
	"strings"
	"testing"
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
