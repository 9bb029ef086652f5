package local

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

// A partition directory removed from the destination by someone else (a
// retention job deleting an old day) while this process remembers it as
// made durable: a later commit into the same partition (late data)
// creates it again. Failed before: Dirs took the remembered directory for
// present, the rename failed with ENOENT on every retry, and the commit
// (prepared, so retried for ever) held back every later checkpoint until a
// restart.
func TestCommitIntoRemovedDirectory(t *testing.T) {
	root := t.TempDir()
	dest, staging := filepath.Join(root, "dest"), filepath.Join(root, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	l := New(afero.NewOsFs(), dest, staging)
	commit := func(i int, final string) error {
		temp := filepath.Join(staging, "f"+string(rune('0'+i))+".inprogress")
		if err := durable.WriteTemp(l.FS, temp, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		return l.Commit(t.Context(), committer.File{Stream: "s", Temp: temp, Final: final, Bytes: 2, Records: 1})
	}
	if err := commit(0, "s/dt=2026-11-01/hour=00/part-n1-00000000000000000001-0000.ndjson"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dest, "s", "dt=2026-11-01")); err != nil {
		t.Fatal(err)
	}
	final := "s/dt=2026-11-01/hour=00/part-n1-00000000000000000002-0000.ndjson"
	if err := commit(1, final); err != nil {
		t.Fatalf("commit into a partition removed since: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, final)); err != nil || string(b) != "x\n" {
		t.Fatalf("committed file: %q %v", b, err)
	}
}
