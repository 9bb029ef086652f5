package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOsFsRenameNoReplace: the OS file system's no-replace rename, with
// renameat2 and with its link-and-unlink fallback.
func TestOsFsRenameNoReplace(t *testing.T) {
	for name, rename := range map[string]func(o, n string) error{
		"renameat2":   NewOsFs().(NoReplaceRenamer).RenameNoReplace,
		"link+unlink": linkUnlink,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
			for p, s := range map[string]string{a: "a", b: "b"} {
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := rename(a, b); !errors.Is(err, os.ErrExist) {
				t.Fatalf("rename onto an existing file: %v", err)
			}
			if data, _ := os.ReadFile(b); string(data) != "b" {
				t.Fatalf("target replaced: %q", data)
			}
			if err := rename(a, c); err != nil {
				t.Fatal(err)
			}
			if data, _ := os.ReadFile(c); string(data) != "a" {
				t.Fatalf("renamed: %q", data)
			}
			if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("old name still there: %v", err)
			}
		})
	}
}
