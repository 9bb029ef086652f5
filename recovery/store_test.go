package recovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// reopen closes s and opens the store at p again, closed at the test's end.
func reopen(t *testing.T, s *Store, p string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreLifecycle(t *testing.T) {
	s, p := openTemp(t)
	if _, err := s.InitProducer("a"); err != nil {
		t.Fatal(err)
	}
	pr, err := s.InitProducer("a")
	if err != nil || pr.Epoch != 1 {
		t.Fatalf("second init: %+v %v", pr, err)
	}
	c := &Checkpoint{ID: 7, StartedAt: time.Now(), Files: []committer.File{{Final: "s/x", Temp: "/t/x", Bytes: 3}},
		Seqs: map[string]map[string]int64{"a": {"s": 4}}}
	if err := s.Prepare(c); err != nil {
		t.Fatal(err)
	}
	pend, err := s.Pending()
	if err != nil || len(pend) != 1 || pend[0].ID != 7 || len(pend[0].Files) != 1 {
		t.Fatalf("pending: %+v %v", pend, err)
	}
	a, _ := s.Producer("a")
	if got := a.Streams["s"]; got.NextSeq != 4 || got.CommittedSeq != -1 {
		t.Fatalf("prepared seqs: %+v", got)
	}
	if err := s.Commit(7, time.Now(), 5, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(7, time.Now(), 5, 10); err != nil {
		t.Fatalf("commit is not idempotent: %v", err)
	}
	if err := s.Abort(&Checkpoint{ID: 7}, "late"); err == nil {
		t.Fatal("aborted a committed checkpoint")
	}
	a, _ = s.Producer("a")
	if got := a.Streams["s"]; got.NextSeq != 4 || got.CommittedSeq != 3 {
		t.Fatalf("committed seqs: %+v", got)
	}
	if err := s.Abort(&Checkpoint{ID: 9}, "disk"); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.LastID(); id != 9 {
		t.Fatalf("last id %d", id)
	}
	s = reopen(t, s, p)
	c9, err := s.Get(9)
	if err != nil || c9.State != Aborted || c9.Error != "disk" {
		t.Fatalf("reopen: %+v %v", c9, err)
	}
	if _, err := s.Get(8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing checkpoint: %v", err)
	}
}

// TestStoreRetentionDeletesRows: rows of checkpoints retain or more ids
// old are deleted at commit (I11), except a prepared one, which recovery
// still needs; the newest committed id outlives its row.
func TestStoreRetentionDeletesRows(t *testing.T) {
	s, p := openTemp(t)
	if err := s.Prepare(&Checkpoint{ID: 3, Files: []committer.File{{Final: "stuck"}}}); err != nil {
		t.Fatal(err)
	}
	for id := uint64(4); id <= 30; id++ {
		c := &Checkpoint{ID: id, Files: []committer.File{{Final: "f"}}}
		if err := s.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(id, time.Now(), 1, 10); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(4); id <= 20; id++ {
		if c, err := s.Get(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("checkpoint %d beyond the retention: %+v %v", id, c, err)
		}
	}
	for id := uint64(21); id <= 30; id++ {
		if c, err := s.Get(id); err != nil || len(c.Files) != 1 || c.State != Committed {
			t.Fatalf("checkpoint %d within the retention: %+v %v", id, c, err)
		}
	}
	s = reopen(t, s, p)
	if pend, err := s.Pending(); err != nil || len(pend) != 1 || pend[0].ID != 3 || pend[0].Files[0].Final != "stuck" {
		t.Fatalf("the prepared checkpoint was pruned: %+v %v", pend, err)
	}
	if id, err := s.NewestCommitted(); err != nil || id != 30 {
		t.Fatalf("newest committed %d %v", id, err)
	}
}

// TestStoreOpenWritesNothing: opening a store that is current (buckets,
// version, producer count) is a read: no write transaction, whose page
// write and two fdatasyncs a start would wait for. The prepared checkpoint
// it decoded still goes to the replay without a second decode.
func TestStoreOpenWritesNothing(t *testing.T) {
	s, p := openTemp(t)
	if err := s.Prepare(&Checkpoint{ID: 1, Files: []committer.File{FileOf("s", "/t", "s/f", 1, 1, "")}}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, p)
	if v := s.Version(); v != 0 {
		t.Fatalf("Open of a current store ran %d write transactions, want 0", v)
	}
	pend, err := s.Pending()
	if err != nil || len(pend) != 1 || len(pend[0].Files) != 1 || s.decodedOnOpen != 1 {
		t.Fatalf("pending %+v %v, decoded on open %d", pend, err, s.decodedOnOpen)
	}
}

// TestStoreOpenReadsBounded: Open decodes the prepared checkpoints and a
// bounded sample of the newest rows, not every row: start time does not
// grow with history (I11).
func TestStoreOpenReadsBounded(t *testing.T) {
	s, p := openTemp(t)
	for id := uint64(1); id <= 500; id++ {
		if err := s.Prepare(&Checkpoint{ID: id}); err != nil {
			t.Fatal(err)
		}
		if id%100 == 0 {
			continue // stays prepared
		}
		if err := s.Commit(id, time.Now(), 1, 0); err != nil { // retention off: every row stays
			t.Fatal(err)
		}
	}
	s = reopen(t, s, p)
	if s.decodedOnOpen > checkOnOpen+5 {
		t.Fatalf("Open decoded %d checkpoint rows of 500, want at most %d", s.decodedOnOpen, checkOnOpen+5)
	}
	pend, err := s.Pending()
	if err != nil || len(pend) != 5 || pend[0].ID != 100 || pend[4].ID != 500 {
		t.Fatalf("pending %+v %v", pend, err)
	}
}

func TestStoreCorruption(t *testing.T) {
	good, p := openTemp(t)
	if err := good.Prepare(&Checkpoint{ID: 1}); err != nil {
		t.Fatal(err)
	}
	good.Close()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"garbage":       []byte(strings.Repeat("not a database ", 1000)),
		"truncated":     data[:100],
		"half":          data[:len(data)/2],
		"zeroed meta":   append(make([]byte, 8192), data[8192:]...),
		"flipped bytes": flip(data),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			q := filepath.Join(t.TempDir(), "state.db")
			if err := os.WriteFile(q, content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(q)
			if err == nil {
				// A flip may land in free space; then the store must still work.
				defer s.Close()
				if _, err := s.Pending(); err != nil && !strings.Contains(err.Error(), "decode") {
					t.Fatalf("opened a damaged store that then fails: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), q) {
				t.Fatalf("error does not name the file or the problem: %v", err)
			}
		})
	}
}

func flip(b []byte) []byte {
	out := append([]byte(nil), b...)
	for i := 16; i < len(out); i += 97 {
		out[i] ^= 0xff
	}
	return out
}

// TestStorePendingAfterOpen: the replay's Pending takes the prepared
// checkpoints Open decoded, once, and only while the store is unchanged;
// a commit that keeps the files rewrites the row with them as prepared.
func TestStorePendingAfterOpen(t *testing.T) {
	s, p := openTemp(t)
	files := []committer.File{FileOf("s", "/st/a", "s/a", 3, 1, "d6a8b2e4"), FileOf("s", "/st/b", "s/b", 4, 2, "")}
	for id := uint64(1); id <= 2; id++ {
		if err := s.Prepare(&Checkpoint{ID: id, Files: files, Seqs: map[string]map[string]int64{}}); err != nil {
			t.Fatal(err)
		}
	}
	s = reopen(t, s, p)
	for i := range 2 { // from Open, then decoded again
		pend, err := s.Pending()
		if err != nil || len(pend) != 2 || pend[0].ID != 1 || len(pend[1].Files) != 2 || pend[1].Files[1].Final != "s/b" {
			t.Fatalf("pending %d: %+v %v", i, pend, err)
		}
	}
	s = reopen(t, s, p)
	if err := s.Commit(1, time.Now(), 7, 0); err != nil {
		t.Fatal(err)
	}
	pend, err := s.Pending() // changed since Open: read from the store
	if err != nil || len(pend) != 1 || pend[0].ID != 2 {
		t.Fatalf("pending after a commit: %+v %v", pend, err)
	}
	c, err := s.Get(1)
	if err != nil || c.State != Committed || c.DurationMS != 7 || len(c.Files) != 2 || c.Files[0].CRC32C != "d6a8b2e4" || c.Files[1].Records != 2 {
		t.Fatalf("committed row: %+v %v", c, err)
	}
	if err := s.Commit(1, time.Now(), 9, 0); err != nil { // again: already committed
		t.Fatal(err)
	}
	if c, err := s.Get(1); err != nil || c.DurationMS != 7 {
		t.Fatalf("committed twice: %+v %v", c, err)
	}
}
