package recovery

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
)

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
