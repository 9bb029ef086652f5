//go:build linux

package batch

import (
	"strings"
	"syscall"
	"testing"
)

// guardPage returns a page of memory followed by a page mapped PROT_NONE:
// a read one byte past the returned slice faults.
func guardPage(t *testing.T) []byte {
	t.Helper()
	ps := syscall.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	if err := syscall.Mprotect(m[ps:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	return m[:ps:ps]
}

// TestAdvNoReadPastEnd puts records so that their last byte is the last
// readable byte before a guard page: the checks (SSE2 loads, eight-byte
// words, the padded last block) must never read past the slice. A read
// past it faults the test binary.
func TestAdvNoReadPastEnd(t *testing.T) {
	page := guardPage(t)
	ps := len(page)
	recs := []string{"1", `""`, `"`, `{"a":"b"}`, `{"a":"b"`, `[1,2,3]`, "\"\xc3", `"\u00e`, `tru`, `-`, `1e`}
	for n := 1; n <= 300; n++ {
		recs = append(recs, string(advValidOfLen(n)))
		recs = append(recs, `"`+strings.Repeat("a", n))
	}
	for n := fastMax - 70; n <= fastMax+70; n++ {
		recs = append(recs, string(advValidOfLen(n)))
	}
	for _, r := range recs {
		b := page[ps-len(r):]
		copy(b, r)
		advCheck(t, b)
		// And as a whole NDJSON body, without and with its final '\n'.
		_, _ = Parse("application/x-ndjson", b, Limits{})
		if r[len(r)-1] != '\n' {
			b2 := page[ps-len(r)-1:]
			copy(b2, r+"\n")
			_, _ = Parse("application/x-ndjson", b2, Limits{})
		}
	}
}
