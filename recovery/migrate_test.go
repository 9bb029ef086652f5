package recovery

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestStoreMigratesVersion1: a version 1 store (producers with every
// stream in one row, no pending index) opens as the current version with the same
// state, once.
func TestStoreMigratesVersion1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.db")
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
	writeRows(t, p, rows)
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

// writeRows writes a bbolt file holding rows, bucket by bucket.
func writeRows(t *testing.T, p string, rows map[string]map[string]string) {
	t.Helper()
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
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
}

// TestStoreMigratesVersion2Keys: a version 2 store's JSON key rows, with
// their index by age, become version 3's binary rows (the empty scope's
// ids, hashes cut to 16 bytes), in age order, counted, the old buckets
// gone; a row that does not decode is corruption naming the file.
func TestStoreMigratesVersion2Keys(t *testing.T) {
	at1, at2 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	order := func(at time.Time, id string) string { return string(u64(uint64(at.UnixNano()))) + id }
	rows := func(b string) map[string]map[string]string {
		return map[string]map[string]string{
			"meta": {"version": string(u64(2)), "last_id": string(u64(8)), "last_committed": string(u64(7)), "idem_count": string(u64(2))},
			"idem_keys": {
				"s\x00a": `{"stream":"s","key":"a","hash":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"checkpoint":7,"at":"2026-01-01T00:01:00Z"}`,
				"t\x00b": b,
			},
			"idem_order": {order(at2, "s\x00a"): "", order(at1, "t\x00b"): ""},
		}
	}
	p := filepath.Join(t.TempDir(), "state.db")
	writeRows(t, p, rows(`{"stream":"t","key":"b","hash":[9],"checkpoint":6,"at":"2026-01-01T00:00:00Z"}`))
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := s.Keys(time.Time{})
	if err != nil || len(ks) != 2 {
		t.Fatalf("keys %+v %v, want 2", ks, err)
	}
	if k := ks[0]; k.ID != KeyID("", "t", "b") || k.Hash != [KeyHashSize]byte{9} || k.Checkpoint != 6 || !k.At.Equal(at1) {
		t.Errorf("oldest key %+v, want t/b of checkpoint 6", k)
	}
	if k := ks[1]; k.ID != KeyID("", "s", "a") || k.Hash != [KeyHashSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16} || k.Checkpoint != 7 || !k.At.Equal(at2) {
		t.Errorf("newest key %+v, want s/a of checkpoint 7, its hash cut to 16 bytes", k)
	}
	if n, err := s.KeyCount(); err != nil || n != 2 {
		t.Errorf("key count %d %v, want 2", n, err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketKeysV2) != nil || tx.Bucket(bucketKeyOrderV2) != nil {
			t.Error("version 2 key buckets left after the migration")
		}
		if v := tx.Bucket(bucketMeta).Get(keyVersion); binary.BigEndian.Uint64(v) != storeVersion {
			t.Errorf("version %x", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	bad := filepath.Join(t.TempDir(), "state.db")
	writeRows(t, bad, rows(`{not json`))
	if _, err := Open(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("open with an undecodable version 2 key: %v, want ErrCorrupt naming %s", err, bad)
	}
}
