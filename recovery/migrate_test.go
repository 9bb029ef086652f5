package recovery

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestStoreMigratesVersion1: a version 1 store (producers with every
// stream in one row, no pending index) opens as the current version with the same
// state, once.
func TestStoreMigratesVersion1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]map[string]string{
		"meta": {"version": string(u64(1)), "last_id": string(u64(1030))},
		"checkpoints": {
			string(u64(1)): `{"id":1,"state":"committed","file_count":0,"records":0,"bytes":0,"started_at":"2026-01-01T00:00:00Z","duration_ms":1}`,
			string(u64(2)): `{"id":2,"state":"prepared","files":[{"stream":"s","temp":"/t/x","final":"s/x","bytes":3,"records":1,"crc32c":"00"}],"file_count":1,"records":1,"bytes":3,"started_at":"2026-01-01T00:00:00Z","duration_ms":0,"seqs":{"a":{"s":5}}}`,
			string(u64(3)): `{"id":3,"state":"aborted","file_count":0,"records":0,"bytes":0,"started_at":"2026-01-01T00:00:00Z","duration_ms":0,"error":"x"}`,
		},
		"producers": {
			"a": `{"producer":"a","epoch":2,"streams":{"s":{"next_seq":5,"committed_seq":3,"committed_in":1},"t":{"next_seq":1,"committed_seq":-1}}}`,
			"b": `{"producer":"b","epoch":0,"streams":{}}`,
		},
		"intents": {},
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for b, kv := range rows {
			bk, err := tx.CreateBucket([]byte(b))
			if err != nil {
				return err
			}
			for k, v := range kv {
				if err := bk.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	{
		s, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Producer("a")
		if err != nil || a == nil || a.ID != "a" || a.Epoch != 2 {
			t.Fatalf("producer a %+v %v", a, err)
		}
		if b, err := s.Producer("b"); err != nil || b == nil || len(b.Streams) != 0 {
			t.Fatalf("producer b %+v %v", b, err)
		}
		if n, err := s.ProducerCount(); err != nil || n != 2 {
			t.Fatalf("producer count %d %v, want 2", n, err)
		}
		if got := a.Streams; got["s"] != (StreamSeq{NextSeq: 5, CommittedSeq: 3, CommittedIn: 1}) || got["t"] != (StreamSeq{NextSeq: 1, CommittedSeq: -1}) || len(got) != 2 {
			t.Fatalf("producer a's streams %+v", got)
		}
		if pend, err := s.Pending(); err != nil || len(pend) != 1 || pend[0].ID != 2 || len(pend[0].Files) != 1 {
			t.Fatalf("pending %+v %v", pend, err)
		}
		if id, err := s.NewestCommitted(); err != nil || id != 1 {
			t.Fatalf("newest committed %d %v", id, err)
		}
		if id, _ := s.LastID(); id != 1030 {
			t.Fatalf("last id %d", id)
		}
		if err := s.db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(bucketMeta).Get(keyVersion); binary.BigEndian.Uint64(v) != storeVersion {
				t.Fatalf("version %x", v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Committing the migrated prepared checkpoint advances a's entry.
		if err := s.Commit(2, time.Now(), 1, 10); err != nil {
			t.Fatal(err)
		}
		a, _ = s.Producer("a")
		if got := a.Streams["s"]; got.CommittedSeq != 4 || got.CommittedIn != 2 {
			t.Fatalf("after commit: %+v", got)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pend, err := s.Pending(); err != nil || len(pend) != 0 {
		t.Fatalf("pending after commit %+v %v", pend, err)
	}
}
