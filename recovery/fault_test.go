package recovery

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

// pointRootOutOfMap rewrites the root page of the bbolt file at p so that
// every leaf element's key lies ~2 GiB past the element (just within bbolt's 2 GiB slice bound): a read of it
// faults on memory that no mapping covers. The layout is bbolt v1's: page
// header {id u64, flags u16, count u16, overflow u32}, meta after it
// {magic, version, pageSize, flags u32; root bucket {root pgid, sequence
// u64}; freelist, pgid, txid, checksum u64},
// leaf elements {flags, pos, ksize, vsize u32}.
func pointRootOutOfMap(t *testing.T, p string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageSize := int(le.Uint32(data[16+8:]))
	var root uint64
	var txid uint64
	for m := range 2 { // the meta page with the newest transaction
		meta := data[m*pageSize+16:]
		if id := le.Uint64(meta[48:]); id >= txid {
			txid, root = id, le.Uint64(meta[16:])
		}
	}
	page := data[int(root)*pageSize:]
	if flags := le.Uint16(page[8:]); flags != 0x02 {
		t.Fatalf("root page %d has flags %#x, want a leaf page: bbolt's layout changed", root, flags)
	}
	count := int(le.Uint16(page[10:]))
	for i := range count {
		le.PutUint32(page[16+16*i+4:], 0x7FFFFE00)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A state store whose pages point outside the file faults inside bbolt
// (a SIGSEGV on its memory map, not a Go panic). Open must still report it
// as ErrCorrupt naming the file; it crashed the process ("unexpected fault
// address", seen once in the suite's -race pass of TestStoreCorruption).
func TestStoreFaultOnOpenIsCorrupt(t *testing.T) {
	s, p := openTemp(t)
	if err := s.Prepare(&Checkpoint{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pointRootOutOfMap(t, p)
	s, err := Open(p)
	if err == nil {
		s.Close()
		t.Fatal("opened a store whose root page points outside the file")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("error does not name the file or the problem: %v", err)
	}
}
