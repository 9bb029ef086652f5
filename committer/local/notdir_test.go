package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/spf13/afero"
)

// A name under a file (a file placed where a partition's directory would
// be) is not found, not a failure: the download is 404, not 500. Failed
// before: Open returned the lstat's ENOTDIR, which the API answered 500.
func TestOpenUnderAFileIsNotFound(t *testing.T) {
	root := t.TempDir()
	dest := filepath.Join(root, "dest")
	if err := os.MkdirAll(filepath.Join(dest, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "s", "dt=2026-12-02"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := New(afero.NewOsFs(), dest, filepath.Join(root, "staging"))
	if _, _, err := l.Open(t.Context(), "s/dt=2026-12-02/hour=02/part-n-00000000000000000001-0000.ndjson"); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("open under a file: %v, want ErrNotFound", err)
	}
}
