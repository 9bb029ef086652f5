package faultfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

// TestErrors holds CrashFS, directly and through InjectFS, to the errors the
// OS returns for the same calls.
func TestErrors(t *testing.T) {
	// setup makes /f (a file holding "hello") and /d (a directory holding
	// file /d/x).
	setup := func(t *testing.T, fs afero.Fs) {
		t.Helper()
		writeFile(t, fs, "/f", "hello", false)
		must(t, fs.Mkdir("/d", 0o755))
		writeFile(t, fs, "/d/x", "", false)
	}
	// onFile opens /f with flag and runs op on it.
	onFile := func(flag int, op func(afero.File) error) func(afero.Fs) error {
		return func(fs afero.Fs) error {
			f, err := fs.OpenFile("/f", flag, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return op(f)
		}
	}
	// onClosed runs op on /f after closing it.
	onClosed := func(op func(afero.File) error) func(afero.Fs) error {
		return func(fs afero.Fs) error {
			f, err := fs.OpenFile("/f", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return op(f)
		}
	}
	tests := []struct {
		name string
		op   func(fs afero.Fs) error
		want error // nil means success
		link bool  // a *os.LinkError rather than a *os.PathError
	}{
		{"open missing", func(fs afero.Fs) error { _, err := fs.Open("/missing"); return err }, os.ErrNotExist, false},
		{"open in missing dir", func(fs afero.Fs) error { _, err := fs.Create("/missing/f"); return err }, os.ErrNotExist, false},
		{"open below file", func(fs afero.Fs) error { _, err := fs.Open("/f/x"); return err }, syscall.ENOTDIR, false},
		{"O_EXCL on existing", func(fs afero.Fs) error {
			_, err := fs.OpenFile("/f", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			return err
		}, os.ErrExist, false},
		{"O_EXCL on dir", func(fs afero.Fs) error {
			_, err := fs.OpenFile("/d", os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
			return err
		}, os.ErrExist, false},
		{"open dir for writing", func(fs afero.Fs) error { _, err := fs.OpenFile("/d", os.O_WRONLY, 0); return err }, syscall.EISDIR, false},
		{"mkdir existing", func(fs afero.Fs) error { return fs.Mkdir("/d", 0o755) }, os.ErrExist, false},
		{"mkdir over file", func(fs afero.Fs) error { return fs.Mkdir("/f", 0o755) }, os.ErrExist, false},
		{"mkdir in missing dir", func(fs afero.Fs) error { return fs.Mkdir("/missing/d", 0o755) }, os.ErrNotExist, false},
		{"mkdirall existing", func(fs afero.Fs) error { return fs.MkdirAll("/d", 0o755) }, nil, false},
		{"mkdirall below file", func(fs afero.Fs) error { return fs.MkdirAll("/f/d", 0o755) }, syscall.ENOTDIR, false},
		{"remove missing", func(fs afero.Fs) error { return fs.Remove("/missing") }, os.ErrNotExist, false},
		{"remove non-empty dir", func(fs afero.Fs) error { return fs.Remove("/d") }, syscall.ENOTEMPTY, false},
		{"removeall missing", func(fs afero.Fs) error { return fs.RemoveAll("/missing/x") }, nil, false},
		{"rename missing", func(fs afero.Fs) error { return fs.Rename("/missing", "/g") }, os.ErrNotExist, true},
		{"rename into missing dir", func(fs afero.Fs) error { return fs.Rename("/f", "/missing/g") }, os.ErrNotExist, true},
		{"rename file onto dir", func(fs afero.Fs) error { return fs.Rename("/f", "/d") }, os.ErrExist, true},
		{"rename dir onto file", func(fs afero.Fs) error { return fs.Rename("/d", "/f") }, syscall.ENOTDIR, true},
		{"rename dir into itself", func(fs afero.Fs) error {
			if err := fs.Mkdir("/d/sub", 0o755); err != nil {
				return err
			}
			return fs.Rename("/d", "/d/sub/d")
		}, syscall.EINVAL, true},
		{"rename onto itself", func(fs afero.Fs) error { return fs.Rename("/f", "/f") }, nil, false},
		{"rename-noreplace onto file", func(fs afero.Fs) error { return durable.RenameNoReplace(fs, "/d/x", "/f") }, os.ErrExist, true},
		{"rename-noreplace onto itself", func(fs afero.Fs) error { return durable.RenameNoReplace(fs, "/f", "/f") }, os.ErrExist, true},
		{"rename-noreplace to a new name", func(fs afero.Fs) error { return durable.RenameNoReplace(fs, "/d/x", "/g") }, nil, false},
		{"stat missing", func(fs afero.Fs) error { _, err := fs.Stat("/missing"); return err }, os.ErrNotExist, false},
		{"chmod missing", func(fs afero.Fs) error { return fs.Chmod("/missing", 0o600) }, os.ErrNotExist, false},
		{"read write-only", onFile(os.O_WRONLY, func(f afero.File) error {
			_, err := f.Read(make([]byte, 1))
			return err
		}), syscall.EBADF, false},
		{"write read-only", onFile(os.O_RDONLY, func(f afero.File) error {
			_, err := f.Write([]byte("x"))
			return err
		}), syscall.EBADF, false},
		{"truncate read-only", onFile(os.O_RDONLY, func(f afero.File) error { return f.Truncate(0) }), syscall.EINVAL, false},
		{"truncate negative", onFile(os.O_RDWR, func(f afero.File) error { return f.Truncate(-1) }), syscall.EINVAL, false},
		{"seek negative", onFile(os.O_RDONLY, func(f afero.File) error {
			_, err := f.Seek(-1, io.SeekStart)
			return err
		}), syscall.EINVAL, false},
		{"readdir on file", onFile(os.O_RDONLY, func(f afero.File) error {
			_, err := f.Readdirnames(-1)
			return err
		}), syscall.ENOTDIR, false},
		{"read dir", func(fs afero.Fs) error {
			f, err := fs.Open("/d")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Read(make([]byte, 1))
			return err
		}, syscall.EISDIR, false},
		{"read closed", onClosed(func(f afero.File) error { _, err := f.Read(make([]byte, 1)); return err }), os.ErrClosed, false},
		{"write closed", onClosed(func(f afero.File) error { _, err := f.Write([]byte("x")); return err }), os.ErrClosed, false},
		{"sync closed", onClosed(func(f afero.File) error { return f.Sync() }), os.ErrClosed, false},
		{"stat closed", onClosed(func(f afero.File) error { _, err := f.Stat(); return err }), os.ErrClosed, false},
		{"close closed", onClosed(func(f afero.File) error { return f.Close() }), os.ErrClosed, false},
	}
	for _, impl := range allFs() {
		for _, tt := range tests {
			t.Run(impl.name+"/"+tt.name, func(t *testing.T) {
				fs := impl.new(t)
				setup(t, fs)
				err := tt.op(fs)
				if tt.want == nil {
					if err != nil {
						t.Fatalf("err = %v, want nil", err)
					}
					return
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				var pe *os.PathError
				var le *os.LinkError
				if tt.link && !errors.As(err, &le) {
					t.Errorf("err = %T %v, want *os.LinkError", err, err)
				}
				if !tt.link && !errors.As(err, &pe) {
					t.Errorf("err = %T %v, want *os.PathError", err, err)
				}
			})
		}
	}
}

// TestFileBehaviour runs file and directory workloads against every file
// system and checks each returns what the OS returns.
func TestFileBehaviour(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, fs afero.Fs) string
		want string
	}{
		{"write seek read", func(t *testing.T, fs afero.Fs) string {
			f, err := fs.Create("/f")
			must(t, err)
			defer f.Close()
			_, err = f.Write([]byte("hello world"))
			must(t, err)
			pos, err := f.Seek(-5, io.SeekEnd)
			must(t, err)
			data, err := io.ReadAll(f)
			must(t, err)
			return fmt.Sprintf("%d %s", pos, data)
		}, "6 world"},
		{"read at end returns EOF", func(t *testing.T, fs afero.Fs) string {
			f := openWritten(t, fs, "/f", "ab")
			defer f.Close()
			buf := make([]byte, 4)
			n, err := f.Read(buf)
			must(t, err)
			_, err = f.Read(buf)
			return fmt.Sprintf("%s %v", buf[:n], err)
		}, "ab EOF"},
		{"ReadAt past end", func(t *testing.T, fs afero.Fs) string {
			f := openWritten(t, fs, "/f", "hello")
			defer f.Close()
			buf := make([]byte, 4)
			n, err := f.ReadAt(buf, 3)
			return fmt.Sprintf("%s %v", buf[:n], err)
		}, "lo EOF"},
		{"O_APPEND writes at end", func(t *testing.T, fs afero.Fs) string {
			writeFile(t, fs, "/f", "hello", false)
			f, err := fs.OpenFile("/f", os.O_RDWR|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Seek(0, io.SeekStart)
			must(t, err)
			_, err = f.WriteString(" world")
			must(t, err)
			_, err = f.WriteAt([]byte("x"), 0)
			must(t, f.Close())
			return fmt.Sprintf("%s %t", readAll(t, fs, "/f"), err != nil)
		}, "hello world true"},
		{"WriteAt past end zero-fills", func(t *testing.T, fs afero.Fs) string {
			f, err := fs.Create("/f")
			must(t, err)
			_, err = f.WriteAt([]byte("x"), 3)
			must(t, err)
			must(t, f.Close())
			return fmt.Sprintf("%q", readAll(t, fs, "/f"))
		}, `"\x00\x00\x00x"`},
		{"Truncate shrinks and grows", func(t *testing.T, fs afero.Fs) string {
			f, err := fs.Create("/f")
			must(t, err)
			_, err = f.WriteString("hello")
			must(t, err)
			must(t, f.Truncate(2))
			must(t, f.Truncate(4))
			must(t, f.Close())
			return fmt.Sprintf("%q", readAll(t, fs, "/f"))
		}, `"he\x00\x00"`},
		{"Create truncates", func(t *testing.T, fs afero.Fs) string {
			writeFile(t, fs, "/f", "hello", false)
			writeFile(t, fs, "/f", "bye", false)
			return readAll(t, fs, "/f")
		}, "bye"},
		{"O_CREATE keeps existing content", func(t *testing.T, fs afero.Fs) string {
			writeFile(t, fs, "/f", "hello", false)
			f, err := fs.OpenFile("/f", os.O_WRONLY|os.O_CREATE, 0o644)
			must(t, err)
			_, err = f.WriteString("J")
			must(t, err)
			must(t, f.Close())
			return readAll(t, fs, "/f")
		}, "Jello"},
		{"open file survives remove", func(t *testing.T, fs afero.Fs) string {
			f := openWritten(t, fs, "/f", "hello")
			defer f.Close()
			must(t, fs.Remove("/f"))
			data, err := io.ReadAll(f)
			must(t, err)
			return string(data)
		}, "hello"},
		{"Stat", func(t *testing.T, fs afero.Fs) string {
			f, err := fs.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o640)
			must(t, err)
			defer f.Close()
			_, err = f.WriteString("hello")
			must(t, err)
			must(t, fs.Mkdir("/d", 0o750))
			fi, err := fs.Stat("/f")
			must(t, err)
			di, err := fs.Stat("/d")
			must(t, err)
			hi, err := f.Stat()
			must(t, err)
			return fmt.Sprintf("%s %d %v %t; %s %v %t; %s %d",
				fi.Name(), fi.Size(), fi.Mode(), fi.IsDir(), di.Name(), di.Mode(), di.IsDir(), hi.Name(), hi.Size())
		}, "f 5 -rw-r----- false; d drwxr-x--- true; f 5"},
		{"Readdirnames in pages", func(t *testing.T, fs afero.Fs) string {
			must(t, fs.MkdirAll("/d/c", 0o755))
			for _, name := range []string{"/d/b", "/d/a", "/d/e"} {
				writeFile(t, fs, name, "", false)
			}
			f, err := fs.Open("/d")
			must(t, err)
			defer f.Close()
			var names []string
			for {
				page, err := f.Readdirnames(2)
				if err == io.EOF {
					break
				}
				must(t, err)
				if len(page) == 0 || len(page) > 2 {
					t.Errorf("page of %d names, want 1 or 2", len(page))
				}
				names = append(names, page...)
			}
			slices.Sort(names)
			return strings.Join(names, " ")
		}, "a b c e"},
		{"Readdir all", func(t *testing.T, fs afero.Fs) string {
			must(t, fs.MkdirAll("/d/c", 0o755))
			writeFile(t, fs, "/d/b", "xy", false)
			f, err := fs.Open("/d")
			must(t, err)
			defer f.Close()
			infos, err := f.Readdir(0)
			must(t, err)
			more, err := f.Readdir(-1)
			must(t, err)
			slices.SortFunc(infos, func(a, b os.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
			var out []string
			for _, fi := range infos {
				size := fi.Size()
				if fi.IsDir() {
					size = -1 // Directory sizes differ between file systems.
				}
				out = append(out, fmt.Sprintf("%s:%t:%d", fi.Name(), fi.IsDir(), size))
			}
			return fmt.Sprintf("%s +%d", strings.Join(out, " "), len(more))
		}, "b:false:2 c:true:-1 +0"},
		{"rename replaces file", func(t *testing.T, fs afero.Fs) string {
			writeFile(t, fs, "/f", "old", false)
			writeFile(t, fs, "/tmp", "new", false)
			must(t, fs.Rename("/tmp", "/f"))
			_, err := fs.Stat("/tmp")
			return fmt.Sprintf("%s %t", readAll(t, fs, "/f"), errors.Is(err, os.ErrNotExist))
		}, "new true"},
		{"rename dir", func(t *testing.T, fs afero.Fs) string {
			must(t, fs.MkdirAll("/a/b", 0o755))
			writeFile(t, fs, "/a/b/f", "hello", false)
			must(t, fs.Mkdir("/c", 0o755))
			must(t, fs.Rename("/a", "/c/a"))
			return readAll(t, fs, "/c/a/b/f")
		}, "hello"},
		{"remove empty dir and RemoveAll tree", func(t *testing.T, fs afero.Fs) string {
			must(t, fs.Mkdir("/e", 0o755))
			must(t, fs.Remove("/e"))
			must(t, fs.MkdirAll("/a/b", 0o755))
			writeFile(t, fs, "/a/b/f", "x", false)
			must(t, fs.RemoveAll("/a"))
			_, errE := fs.Stat("/e")
			_, errA := fs.Stat("/a")
			return fmt.Sprintf("%t %t", errors.Is(errE, os.ErrNotExist), errors.Is(errA, os.ErrNotExist))
		}, "true true"},
	}
	for _, impl := range allFs() {
		for _, tt := range tests {
			t.Run(impl.name+"/"+tt.name, func(t *testing.T) {
				if got := tt.run(t, impl.new(t)); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}

// TestCrashFSReaddirSorted checks the order CrashFS promises beyond the OS.
func TestCrashFSReaddirSorted(t *testing.T) {
	fs := NewCrashFS()
	for _, name := range []string{"/c", "/a", "/b"} {
		writeFile(t, fs, name, "", false)
	}
	f, err := fs.Open("/")
	must(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	must(t, err)
	if want := []string{"a", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("Readdirnames = %v, want %v", names, want)
	}
	_, err = f.Seek(0, io.SeekStart)
	must(t, err)
	infos, err := f.Readdir(1)
	must(t, err)
	if len(infos) != 1 || infos[0].Name() != "a" {
		t.Errorf("Readdir(1) after rewind = %v, want [a]", infos)
	}
}
