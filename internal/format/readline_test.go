package format

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestPeekLine: PeekLine returns what ReadLine returns, line by line and
// error for error, for lines shorter and longer than the reader's buffer,
// empty lines and a last line without '\n'; a short line is a slice of
// the reader's buffer (no copy), a long one is appended to buf.
func TestPeekLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, in := range []string{
		"", "\n", "a\n", "a\nbc\n\n", "a\n" + long + "\nb\n", long + "\n", "a\nno newline", long, "a\n" + long,
	} {
		peek := bufio.NewReaderSize(strings.NewReader(in), 16)
		read := bufio.NewReaderSize(strings.NewReader(in), 16)
		for n := 0; ; n++ {
			got, gerr := PeekLine(peek, make([]byte, 0, 4))
			want, werr := ReadLine(read, nil)
			if !bytes.Equal(got, want) || !errors.Is(gerr, werr) && gerr != werr {
				t.Fatalf("%q line %d: PeekLine %q, %v; ReadLine %q, %v", in, n, got, gerr, want, werr)
			}
			if gerr != nil {
				break
			}
		}
	}
	br := bufio.NewReaderSize(strings.NewReader("short\n"), 16)
	buf := make([]byte, 0, 64)
	line, err := PeekLine(br, buf)
	if err != nil || string(line) != "short" {
		t.Fatalf("PeekLine = %q, %v", line, err)
	}
	if cap(buf) > 0 && &line[0] == &buf[:1][0] {
		t.Fatal("a line that fits the buffer was copied into buf")
	}
	if _, err := PeekLine(br, buf); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}
