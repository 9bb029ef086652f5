package local

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/spf13/afero"
)

// A symbolic link placed in the destination — to a file or a directory
// outside it — is never followed by Open or listed by List.
func TestSymlinksRefused(t *testing.T) {
	root := t.TempDir()
	dest, outside := filepath.Join(root, "dest"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(dest, "s"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "s", "ok.ndjson"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(dest, "s", "file-link"): filepath.Join(outside, "secret"),
		filepath.Join(dest, "dir-link"):       outside,
		filepath.Join(dest, "s", "root-link"): "/",
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	l := New(afero.NewOsFs(), dest, filepath.Join(root, "staging"))
	for _, name := range []string{"s/file-link", "dir-link/secret", "s/root-link/etc/passwd"} {
		rc, _, err := l.Open(t.Context(), name)
		if err == nil {
			data, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("Open(%q) followed a symlink and served %q", name, data)
		}
		if !errors.Is(err, committer.ErrNotFound) {
			t.Fatalf("Open(%q): %v, want ErrNotFound", name, err)
		}
	}
	entries, err := l.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Path != "s/ok.ndjson" {
		t.Fatalf("List: %+v, want only s/ok.ndjson", entries)
	}
	if rc, _, err := l.Open(t.Context(), "s/ok.ndjson"); err != nil {
		t.Fatalf("a regular file: %v", err)
	} else {
		rc.Close()
	}
}
