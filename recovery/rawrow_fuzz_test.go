package recovery

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	bolt "go.etcd.io/bbolt"
)

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
