package recovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
)

// TestEncodeCheckpointRawSameBytes: a row re-encoded with its files left
// encoded (encodeCheckpointRaw, which splices them back in) is byte for
// byte what json.Marshal writes for it, with and without files, and with
// an error text that looks like the field it splices before.
func TestEncodeCheckpointRawSameBytes(t *testing.T) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	var files []committer.File
	for i := range 3 {
		f := FileOf("s", fmt.Sprintf("/staging/f%d.inprogress", i), fmt.Sprintf("s/part-n1-%020d-%04d.ndjson", 7, i), 3, 1, "d6a8b2e4")
		f.Producers = map[string]committer.SeqRanges{"files": {{1, 2}}, "<p&>": {{3, 3}}}
		files = append(files, f)
	}
	for _, c := range []*Checkpoint{
		{ID: 7, State: Prepared, StartedAt: at, PreparedAt: at, Files: files, Seqs: map[string]map[string]int64{"files": {"file_count": 3}}},
		{ID: 8, State: Prepared, StartedAt: at, Error: `x,"file_count":1`},
		{ID: 9, State: Prepared, StartedAt: at, Files: []committer.File{}},
	} {
		v, err := encodeCheckpoint(c)
		if err != nil {
			t.Fatal(err)
		}
		r, err := decodeCheckpointRaw(v)
		if err != nil {
			t.Fatal(err)
		}
		r.State, r.CommittedAt, r.DurationMS = Committed, at.Add(time.Second), 12
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeCheckpointRaw(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("checkpoint %d: %v\n got %s\nwant %s", c.ID, err, got, want)
		}
		back, err := decodeCheckpoint(got)
		if err != nil || back.State != Committed || len(back.Files) != len(c.Files) {
			t.Fatalf("checkpoint %d: decoded back %+v %v", c.ID, back, err)
		}
	}
}

// TestCommitDraftedStale: a draft read before the row changed is not
// applied: the row is decoded again, so a checkpoint committed since stays
// as its first commit recorded it. A fresh draft commits like CommitFiles.
func TestCommitDraftedStale(t *testing.T) {
	st, _ := openTemp(t)
	defer st.Close()
	t1, t2 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for id := uint64(1); id <= 2; id++ {
		ck := &Checkpoint{ID: id, StartedAt: t1, PreparedAt: t1, Files: []committer.File{FileOf("s", "/t", fmt.Sprintf("s/f%d", id), 1, 1, "")}}
		if err := st.Prepare(ck); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := st.DraftCommit(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CommitFiles(1, nil, t1, 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitDrafted(1, nil, t2, 7, 0, stale); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Get(1); err != nil || c.State != Committed || !c.CommittedAt.Equal(t1) || c.DurationMS != 5 {
		t.Fatalf("checkpoint 1 after a stale draft: %+v %v; want its first commit (%v, 5 ms)", c, err, t1)
	}
	fresh, err := st.DraftCommit(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CommitDrafted(2, nil, t2, 7, 0, fresh); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Get(2); err != nil || c.State != Committed || !c.CommittedAt.Equal(t2) || len(c.Files) != 1 {
		t.Fatalf("checkpoint 2: %+v %v", c, err)
	}
	if p, err := st.Pending(); err != nil || len(p) != 0 {
		t.Fatalf("pending %+v %v", p, err)
	}
}
