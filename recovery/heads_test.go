package recovery

import (
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
)

// A list answers from the rows' heads: a row with thousands of files costs
// it no more than a row with one, once read (the overview lists 100 rows
// per load; decoding every file of each was 14 ms of CPU per load and most
// of the CPU of a loop polling it).
func TestListSkipsFiles(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	files := make([]committer.File, 5000)
	for i := range files {
		files[i] = committer.File{Stream: fmt.Sprintf("s%05d", i), Final: fmt.Sprintf("s%05d/part-x-%020d-%04d.ndjson", i, 1, i),
			Records: 1, Bytes: 10, Producers: map[string]committer.SeqRanges{"p": {{int64(i), int64(i)}}}}
	}
	seqs := map[string]map[string]int64{"p": {}}
	for i := range 5000 {
		seqs["p"][fmt.Sprintf("s%05d", i)] = int64(i + 1)
	}
	for id := uint64(1); id <= 3; id++ {
		c := &Checkpoint{ID: id, Files: files, FileCount: len(files), Records: 5000, Seqs: seqs, StartedAt: time.Now()}
		if err := s.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(id, time.Now(), 1, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.List(10); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		got, err := s.List(10)
		if err != nil || len(got) != 3 {
			t.Fatalf("List: %d rows, %v", len(got), err)
		}
		for _, c := range got {
			if c.Files != nil || c.Seqs != nil || c.FileCount != 5000 || c.Records != 5000 || c.State != Committed {
				t.Fatalf("row %d: files %d seqs %d file_count %d records %d state %s", c.ID, len(c.Files), len(c.Seqs), c.FileCount, c.Records, c.State)
			}
		}
	})
	// A bbolt read transaction and the answer: a few dozen allocations,
	// not one per file (15,000 files and 15,000 sequence numbers here).
	if allocs > 200 {
		t.Errorf("List of 3 rows of 5000 files: %.0f allocations per call, want at most 200", allocs)
	}
}

// The heads a list remembers follow the rows: a state change, a rewrite
// after a restart and a deleted row are seen at once.
func TestListFollowsRows(t *testing.T) {
	s, p := openTemp(t)
	state := func(s *Store) []string {
		t.Helper()
		got, err := s.List(10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range got {
			out = append(out, fmt.Sprintf("%d:%s:%d", c.ID, c.State, c.Records))
		}
		return out
	}
	want := func(s *Store, w ...string) {
		t.Helper()
		if got := state(s); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("List: %v, want %v", got, w)
		}
	}
	c := &Checkpoint{ID: 7, Files: []committer.File{{Final: "f", Records: 3}}, FileCount: 1, Records: 3, StartedAt: time.Now()}
	if err := s.Prepare(c); err != nil {
		t.Fatal(err)
	}
	want(s, "7:prepared:3")
	if err := s.Commit(7, time.Now(), 1, 100); err != nil {
		t.Fatal(err)
	}
	want(s, "7:committed:3")
	c2 := &Checkpoint{ID: 8, Files: []committer.File{{Final: "g", Records: 4}}, FileCount: 1, Records: 4, StartedAt: time.Now()}
	if err := s.Prepare(c2); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(8, time.Now(), 1, 1); err != nil { // retain one row: 7 goes
		t.Fatal(err)
	}
	want(s, "8:committed:4")
	s = reopen(t, s, p)
	defer s.Close()
	want(s, "8:committed:4")
}
