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
