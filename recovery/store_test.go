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
	ps, _ := s.Producers()
	if got := ps[0].Streams["s"]; got.NextSeq != 4 || got.CommittedSeq != -1 {
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
	ps, _ = s.Producers()
	if got := ps[0].Streams["s"]; got.NextSeq != 4 || got.CommittedSeq != 3 {
		t.Fatalf("committed seqs: %+v", got)
	}
	if err := s.Abort(&Checkpoint{ID: 9}, "disk"); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.LastID(); id != 9 {
		t.Fatalf("last id %d", id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c9, err := s.Get(9)
	if err != nil || c9.State != Aborted || c9.Error != "disk" {
		t.Fatalf("reopen: %+v %v", c9, err)
	}
	if _, err := s.Get(8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing checkpoint: %v", err)
	}
}

func TestStorePrunesOldDetails(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	for id := uint64(1); id <= 30; id++ {
		c := &Checkpoint{ID: id, Files: []committer.File{{Final: "f"}}}
		if err := s.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(id, time.Now(), 1, 10); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := s.Get(5)
	recent, _ := s.Get(25)
	if len(old.Files) != 0 || old.FileCount != 1 || len(recent.Files) != 1 {
		t.Fatalf("prune: old %+v recent %+v", old, recent)
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
