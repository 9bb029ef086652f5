package faultfs

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/afero"
)

// dirMark stands for a directory in the maps returned by tree.
const dirMark = "<dir>"

// tree lists every file (with its content) and directory (as dirMark) of fs
// except the root.
func tree(t *testing.T, fs afero.Fs) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := afero.Walk(fs, "/", func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if path == "/" {
			return nil
		}
		if info.IsDir() {
			got[path] = dirMark
			return nil
		}
		data, err := afero.ReadFile(fs, path)
		if err != nil {
			return err
		}
		got[path] = string(data)
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	return got
}

// writeFile creates name with data, syncing it if sync is set.
func writeFile(t *testing.T, fs afero.Fs, name, data string, sync bool) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatalf("write: %v", err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// openWritten writes data to name (not synced) and opens it for reading;
// the caller closes it.
func openWritten(t *testing.T, fs afero.Fs, name, data string) afero.File {
	t.Helper()
	writeFile(t, fs, name, data, false)
	f, err := fs.Open(name)
	must(t, err)
	return f
}

// durableFile creates name with data and makes both durable: the file
// synced, then the root directory (name must be at the root).
func durableFile(t *testing.T, fs afero.Fs, name, data string) {
	t.Helper()
	writeFile(t, fs, name, data, true)
	syncDir(t, fs, "/")
}

// truncateFile truncates name to size, syncing it if sync is set.
func truncateFile(t *testing.T, fs afero.Fs, name string, size int64, sync bool) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	must(t, err)
	must(t, f.Truncate(size))
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

// appendFile appends data to name without syncing.
func appendFile(t *testing.T, fs afero.Fs, name, data string) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// syncDir makes dir's entries durable the way production code does.
func syncDir(t *testing.T, fs afero.Fs, dir string) {
	t.Helper()
	f, err := fs.Open(dir)
	if err != nil {
		t.Fatalf("open dir: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync dir: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close dir: %v", err)
	}
}

// readAll reads name or fails the test.
func readAll(t *testing.T, fs afero.Fs, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(data)
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fsCase is one file system the behaviour tests run against.
type fsCase struct {
	name string
	new  func(t *testing.T) afero.Fs
}

// allFs returns the real OS file system, to hold CrashFS to the OS's
// behaviour, a CrashFS, and an InjectFS over a CrashFS.
func allFs() []fsCase {
	return []fsCase{
		{"os", func(t *testing.T) afero.Fs {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return afero.NewBasePathFs(afero.NewOsFs(), dir)
		}},
		{"crash", func(*testing.T) afero.Fs { return NewCrashFS() }},
		{"inject", func(*testing.T) afero.Fs { return NewInjectFS(NewCrashFS(), nil) }},
	}
}

// writeX creates name and writes n bytes "x" one at a time, then syncs
// and closes it; it reports errors with t.Error, so goroutines may call it.
func writeX(t *testing.T, fs afero.Fs, name string, n int) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Error(err)
		return
	}
	for range n {
		if _, err := f.WriteString("x"); err != nil {
			t.Error(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Error(err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
}
