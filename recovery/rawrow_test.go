package recovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	bolt "go.etcd.io/bbolt"
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

// FuzzEncodeCheckpointRaw: for any strings in a row's files, error and
// seqs (escapes, invalid UTF-8, U+2028, HTML characters, text that looks
// like the field the files are spliced before), a row re-encoded with its
// files left encoded is byte for byte what json.Marshal writes for it,
// and decodes back to the checkpoint it was. Seeds run in the ordinary
// test run; go test -fuzz FuzzEncodeCheckpointRaw explores further.
func FuzzEncodeCheckpointRaw(f *testing.F) {
	for _, s := range []string{"", `,"file_count":1`, "\u2028\u2029", "<&>", "\xff\xfe", `\"`, "\x00\x1f", "é😀", `"files":[]`} {
		f.Add(s, s, s, int64(3))
	}
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, a, b, c string, n int64) {
		file := FileOf(a, "/staging/"+b, c, n, n, b)
		file.Producers = map[string]committer.SeqRanges{a: {{1, n}}, c: {{n, n}}}
		file.UploadID, file.ETag = b, c
		ck := &Checkpoint{ID: 7, State: Prepared, StartedAt: at, PreparedAt: at, Error: b,
			Files: []committer.File{file, file}, Seqs: map[string]map[string]int64{a: {b: n}, c: {"file_count": n}}}
		v, err := encodeCheckpoint(ck)
		if err != nil {
			t.Skip(err) // not a row eosink can write
		}
		r, err := decodeCheckpointRaw(v)
		if err != nil {
			t.Fatal(err)
		}
		r.State, r.CommittedAt, r.DurationMS = Committed, at.Add(time.Second), n
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeCheckpointRaw(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v\n got %s\nwant %s", err, got, want)
		}
		back, err := decodeCheckpoint(got)
		if err != nil || back.State != Committed || len(back.Files) != 2 || back.Error != r.Error {
			t.Fatalf("decoded back %+v %v", back, err)
		}
	})
}

// TestEncodeCheckpointRawFixture: every checkpoint row of the version 2
// fixture (written by an older eosink) re-encodes with its files spliced
// in to the bytes json.Marshal writes.
func TestEncodeCheckpointRawFixture(t *testing.T) {
	s, err := Open(copyFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows := 0
	err = s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCheckpoints).ForEach(func(k, v []byte) error {
			r, err := decodeCheckpointRaw(v)
			if err != nil {
				return err
			}
			r.State, r.DurationMS = Committed, 5
			want, err := json.Marshal(r)
			if err != nil {
				return err
			}
			got, err := encodeCheckpointRaw(r)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("row %x: %v\n got %s\nwant %s", k, err, got, want)
			}
			rows++
			return nil
		})
	})
	if err != nil || rows == 0 {
		t.Fatalf("%d rows: %v", rows, err)
	}
}

// TestEncodeCheckpointRawOddRows: rows json.Marshal did not write (fields
// in another order, whitespace and newlines, unknown fields, escapes
// where json.Marshal writes none and none where it writes them) re-encode
// with their files spliced in to valid JSON that decodes to what
// json.Marshal's encoding of the same row decodes to.
func TestEncodeCheckpointRawOddRows(t *testing.T) {
	for _, row := range []string{
		`{"file_count":1,"files":[{"final":"s/a<b>&.ndjson","stream":"s","temp":"/t","bytes":2,"records":1,"crc32c":"x"}],"state":"prepared","id":7,"started_at":"2026-11-29T09:00:00Z"}`,
		"{ \"id\" : 7 ,\n \"state\" : \"prepared\" ,\n \"files\" : [ {\n \"stream\" : \"s\\u00e9\\u2028\" , \"final\" : \"s/\\/x.ndjson\" , \"producers\" : { \"p\" : [ 1 , 2 ] } } ,\n {\"stream\":\"t\"} ] ,\n \"file_count\" : 2 , \"legacy\" : {\"files\":[1]}, \"seqs\" : { \"p\" : { \"s\" : 3 } } }",
		`{"id":7,"state":"prepared","files":[{"stream":"s","final":"a","producers":{"p":[5,9]}}],"file_count":1,"error":"x,\"file_count\":2"}`,
	} {
		r, err := decodeCheckpointRaw([]byte(row))
		if err != nil {
			t.Fatal(err)
		}
		r.State, r.DurationMS = Committed, 5
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeCheckpointRaw(r)
		if err != nil || !json.Valid(got) {
			t.Fatalf("%v: invalid JSON %s", err, got)
		}
		g, err := decodeCheckpoint(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := decodeCheckpoint(want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("spliced row decodes to\n%+v\nwant\n%+v", g, w)
		}
	}
}
