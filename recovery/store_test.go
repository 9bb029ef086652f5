package recovery

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/streamconf"
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

func TestStoreListBefore(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	var ids []uint64 // newest first
	for id := uint64(2); id <= 40; id += 3 {
		c := &Checkpoint{ID: id, Files: []committer.File{{Final: "f"}}}
		if err := s.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(id, time.Now(), 1, 100); err != nil { // retain every row
			t.Fatal(err)
		}
		ids = slices.Insert(ids, 0, id)
	}
	for _, c := range []struct {
		before uint64
		limit  int
		want   []uint64
	}{
		{math.MaxUint64, 3, ids[:3]},
		{ids[0] + 1, 3, ids[:3]},
		{ids[0], 2, ids[1:3]},
		{ids[0] - 1, 2, ids[1:3]}, // between two ids
		{3, 10, []uint64{2}},
		{2, 10, nil},
		{0, 3, ids[:3]}, // 0: no bound
	} {
		got, err := s.ListBefore(c.before, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []uint64
		for _, ck := range got {
			gotIDs = append(gotIDs, ck.ID)
			if ck.Files != nil {
				t.Errorf("before %d: files listed", c.before)
			}
		}
		if !slices.Equal(gotIDs, c.want) {
			t.Errorf("before %d limit %d: got %v, want %v", c.before, c.limit, gotIDs, c.want)
		}
	}
	// Pages by 4 from the top hold every checkpoint once, newest first.
	var all []uint64
	before := uint64(math.MaxUint64)
	for {
		page, err := s.ListBefore(before, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range page {
			all = append(all, ck.ID)
		}
		if len(page) < 4 {
			break
		}
		before = page[len(page)-1].ID
	}
	if !slices.Equal(all, ids) {
		t.Fatalf("pages: got %v, want %v", all, ids)
	}
}

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

// RestoreStream writes a configuration read back from the destination
// only where the store has none or an older version, keeping its version,
// so the next PUT continues after it.
func TestRestoreStreamKeepsVersion(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	c := streamconf.Config{Version: 5, Format: streamconf.FormatText}.Defaults()
	if wrote, err := s.RestoreStream(StreamConfig{Stream: "a", Config: c, UpdatedAt: time.Now()}); err != nil || !wrote {
		t.Fatalf("restore into an empty store: %v %v", wrote, err)
	}
	older := streamconf.Config{Version: 4, Format: streamconf.FormatNDJSON}.Defaults()
	if wrote, err := s.RestoreStream(StreamConfig{Stream: "a", Config: older}); err != nil || wrote {
		t.Fatalf("restore of an older version: %v %v, want nothing written", wrote, err)
	}
	got, ok, err := s.Stream("a")
	if err != nil || !ok || got.Config != c {
		t.Fatalf("stream a: %+v %v %v, want %+v", got, ok, err, c)
	}
	next, err := s.PutStream("a", streamconf.Config{}, time.Now())
	if err != nil || next.Config.Version != 6 {
		t.Fatalf("PUT after the restore: %+v %v, want version 6", next, err)
	}
	if _, err := s.RestoreStream(StreamConfig{Stream: "b", Config: streamconf.Config{Format: "nope", Version: 1}}); err == nil {
		t.Fatal("an invalid configuration was restored")
	}
}

// A rebuilt store records the newest checkpoint the rebuild went through
// with the seal's key (one transaction), keeps the higher of two, and
// its seal's checkpoint is never above its newest commit, or the one
// rebuilt through, minus 2: a start whose store kept up reads documents
// from that commit minus 1 on. The key made with a higher checkpoint
// (the first one the store opens minus 2) checks from it once the store
// has committed that far.
func TestForgottenSealRebuiltThrough(t *testing.T) {
	s, p := openTemp(t)
	seal, err := s.MakeForgottenSeal(40, 10)
	if err != nil || seal.Key == nil || seal.Since != 8 {
		t.Fatalf("the seal of a store rebuilt through 10, made for 40: %+v, %v; want a key, since 8", seal, err)
	}
	again, err := s.MakeForgottenSeal(90, 7) // a later start: the same key, an older mark is not kept
	if err != nil || string(again.Key) != string(seal.Key) || again.Since != 8 {
		t.Fatalf("the seal again: %+v, %v; want the same key, since 8", again, err)
	}
	s = reopen(t, s, p)
	if got, err := s.RebuiltThrough(); err != nil || got != 10 {
		t.Fatalf("rebuilt through %d, %v; want 10", got, err)
	}
	if _, err := s.MakeForgottenSeal(0, 30); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ commit, since uint64 }{{29, 28}, {45, 40}} {
		if err := s.Prepare(&Checkpoint{ID: c.commit, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(c.commit, time.Now(), 1, 10); err != nil {
			t.Fatal(err)
		}
		if seal, err := s.ForgottenSeal(); err != nil || seal.Since != c.since {
			t.Fatalf("rebuilt through 30, made for 40, committed %d: since %d, %v; want %d", c.commit, seal.Since, err, c.since)
		}
	}
	if got, err := s.RebuiltThrough(); err != nil || got != 30 {
		t.Fatalf("rebuilt through %d, %v; want 30", got, err)
	}
}
