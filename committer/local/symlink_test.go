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

// Remove never removes through a symbolic link: with _forgotten/ (or a
// node's folder in it) a link to the data or outside the destination, a
// name under it that resolves to a committed file leaves the file; a
// document that is itself a link loses the link, never its target.
func TestRemoveThroughSymlinks(t *testing.T) {
	root := t.TempDir()
	dest, outside := filepath.Join(root, "dest"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(dest, "s", "dt=1"), filepath.Join(dest, "_forgotten", "n2"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dest, "s", "dt=1", "00000000000000000007-0000.json")
	secret := filepath.Join(outside, "00000000000000000007-0000.json")
	for _, f := range []string{data, secret} {
		if err := os.WriteFile(f, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(dest, "_forgotten", "n1"):                                   filepath.Join(dest, "s", "dt=1"),
		filepath.Join(dest, "_forgotten", "n2", "00000000000000000007-0000.json"): secret,
		filepath.Join(dest, "_forgotten", "n3"):                                   outside,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	l := New(afero.NewOsFs(), dest, filepath.Join(root, "staging"))
	for _, name := range []string{
		"_forgotten/n1/00000000000000000007-0000.json",
		"_forgotten/n2/00000000000000000007-0000.json",
		"_forgotten/n3/00000000000000000007-0000.json",
	} {
		_ = l.Remove(t.Context(), name) // refused or done: what stays is checked below
	}
	for _, f := range []string{data, secret} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s after removes through links: %v", f, err)
		}
	}
}

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
