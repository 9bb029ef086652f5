package recovery

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// prepareKeys prepares checkpoint id holding keys (of stream "s", no
// scope), and commits it unless it is to stay prepared.
func prepareKeys(t *testing.T, s *Store, id uint64, at time.Time, pol KeyPolicy, commit bool, keys ...string) {
	t.Helper()
	c := &Checkpoint{ID: id, StartedAt: at, KeyPolicy: pol}
	for _, k := range keys {
		c.Keys = append(c.Keys, Key{ID: KeyID("", "s", k), Hash: [KeyHashSize]byte{byte(len(k))}, Checkpoint: id, At: at})
	}
	if err := s.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := s.Commit(id, at, 1, 100); err != nil {
			t.Fatal(err)
		}
	}
}

func keyNames(t *testing.T, s *Store, since time.Time) []string {
	t.Helper()
	ks, err := s.Keys(since)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range ks {
		name := "?"
		for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
			if KeyID("", "s", n) == k.ID {
				name = n
			}
		}
		out = append(out, name)
	}
	return out
}

// TestKeysPreparedExpiredCapped: keys are recorded by Prepare, oldest
// first; the policy of a later prepare expires old ones and caps the count.
func TestKeysPreparedExpiredCapped(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prepareKeys(t, s, 1, t0, KeyPolicy{}, true, "a", "b")
	prepareKeys(t, s, 2, t0.Add(time.Minute), KeyPolicy{}, true, "c")
	if got := keyNames(t, s, time.Time{}); len(got) != 3 || got[2] != "c" {
		t.Fatalf("keys %v, want a b c", got)
	}
	if got := keyNames(t, s, t0.Add(time.Second)); len(got) != 1 || got[0] != "c" {
		t.Fatalf("keys since t0+1s: %v, want c", got)
	}
	// Expire what was prepared before t0+30s, cap at 2.
	prepareKeys(t, s, 3, t0.Add(2*time.Minute), KeyPolicy{ExpireBefore: t0.Add(30 * time.Second), Max: 2}, true, "d", "e")
	if got := keyNames(t, s, time.Time{}); len(got) != 2 || got[0] != "d" && got[0] != "e" {
		t.Fatalf("keys %v, want d and e (a, b expired, c over the cap)", got)
	}
	if n, err := s.KeyCount(); err != nil || n != 2 {
		t.Fatalf("count %d %v, want 2", n, err)
	}
	// The same key again (a retry accepted after its key expired) is a
	// newer row; the older one goes first.
	prepareKeys(t, s, 4, t0.Add(3*time.Minute), KeyPolicy{Max: 2}, true, "d")
	if got := keyNames(t, s, time.Time{}); len(got) != 2 || got[1] != "d" {
		t.Fatalf("keys %v, want e then d", got)
	}
	if n, _ := s.KeyCount(); n != 2 {
		t.Fatalf("count %d after a key again, want 2", n)
	}
	ks, err := s.Keys(time.Time{})
	if err != nil || ks[1].Checkpoint != 4 || ks[1].Hash != [KeyHashSize]byte{1} || !ks[1].At.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("key d as read: %+v %v", ks, err)
	}
}

// TestKeysOfUncommittedCheckpointOutliveCap: the cap and the window never
// drop the keys of a checkpoint not yet committed, so a crash before its
// commit still finds them (the replay commits the batch; its retry must be
// a duplicate). Before, the cap dropped the oldest keys, committed or not.
func TestKeysOfUncommittedCheckpointOutliveCap(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prepareKeys(t, s, 1, t0, KeyPolicy{}, true, "a")
	// Prepared, not committed: a clock stepped back puts them first.
	prepareKeys(t, s, 2, t0.Add(-time.Hour), KeyPolicy{Max: 1, ExpireBefore: t0.Add(time.Minute)}, false, "b", "c")
	if got := keyNames(t, s, time.Time{}); len(got) != 2 || got[0] != "b" && got[0] != "c" {
		t.Fatalf("keys %v, want b and c (uncommitted: kept past the cap and the window), a dropped", got)
	}
	if n, _ := s.KeyCount(); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
}

// TestKeysCorruptRecord: a key record that does not decode is reported as
// corruption, naming the file.
func TestKeysCorruptRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	prepareKeys(t, s, 1, time.Unix(100, 0), KeyPolicy{}, true, "a")
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKeyLog).Put([]byte("short"), []byte("row")) }); err != nil {
		t.Fatal(err)
	}
	_, err = s.Keys(time.Time{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("keys of a corrupt record: %v, want ErrCorrupt naming %s", err, path)
	}
	_ = s.Close()
}
