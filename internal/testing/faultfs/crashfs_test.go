package faultfs

import (
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/afero"
)

func TestCrashClone(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, fs afero.Fs)
		want map[string]string
	}{
		{
			name: "synced file in unsynced dir is lost",
			run: func(t *testing.T, fs afero.Fs) {
				writeFile(t, fs, "/f", "hello", true)
			},
			want: map[string]string{},
		},
		{
			name: "synced file in synced dir survives",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "unsynced file in synced dir is empty",
			run: func(t *testing.T, fs afero.Fs) {
				writeFile(t, fs, "/f", "hello", false)
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/f": ""},
		},
		{
			name: "data written after last sync is lost",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				appendFile(t, fs, "/f", " world")
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "overwrite in place after sync is lost",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				f, err := fs.OpenFile("/f", os.O_WRONLY, 0)
				must(t, err)
				_, err = f.WriteAt([]byte("J"), 0)
				must(t, err)
				must(t, f.Close())
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "relative and absolute paths name the same file",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.Mkdir("d", 0o755))
				writeFile(t, fs, "d/../d/./f", "hello", true)
				syncDir(t, fs, "/d/")
				syncDir(t, fs, ".")
			},
			want: map[string]string{"/d": dirMark, "/d/f": "hello"},
		},
		{
			name: "rename without dir sync keeps old name",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/tmp", "hello")
				must(t, fs.Rename("/tmp", "/f"))
			},
			want: map[string]string{"/tmp": "hello"},
		},
		{
			name: "rename with dir sync keeps new name only",
			run: func(t *testing.T, fs afero.Fs) {
				writeFile(t, fs, "/tmp", "hello", true)
				must(t, fs.Rename("/tmp", "/f"))
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "rename with only destination dir synced keeps both names",
			run: func(t *testing.T, fs afero.Fs) {
				renameAcross(t, fs, "/b/g")
				syncDir(t, fs, "/b")
			},
			want: map[string]string{"/a": dirMark, "/b": dirMark, "/a/f": "hello", "/b/g": "hello"},
		},
		{
			name: "rename with only source dir synced loses both names",
			run: func(t *testing.T, fs afero.Fs) {
				renameAcross(t, fs, "/b/g")
				syncDir(t, fs, "/a")
			},
			want: map[string]string{"/a": dirMark, "/b": dirMark},
		},
		{
			name: "rename over existing file",
			run: func(t *testing.T, fs afero.Fs) {
				replaceDurable(t, fs)
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/f": "new"},
		},
		{
			name: "rename over existing file without dir sync keeps old file",
			run: func(t *testing.T, fs afero.Fs) {
				replaceDurable(t, fs)
			},
			want: map[string]string{"/f": "old"},
		},
		{
			name: "remove without dir sync brings file back",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				must(t, fs.Remove("/f"))
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "remove with dir sync",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				must(t, fs.Remove("/f"))
				syncDir(t, fs, "/")
			},
			want: map[string]string{},
		},
		{
			name: "sync of removed open file does not bring it back",
			run: func(t *testing.T, fs afero.Fs) {
				f, err := fs.Create("/f")
				must(t, err)
				syncDir(t, fs, "/")
				must(t, fs.Remove("/f"))
				syncDir(t, fs, "/")
				_, err = f.WriteString("hello")
				must(t, err)
				must(t, f.Sync())
				must(t, f.Close())
			},
			want: map[string]string{},
		},
		{
			name: "RemoveAll with parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				durableNested(t, fs)
				must(t, fs.RemoveAll("/a"))
				syncDir(t, fs, "/")
			},
			want: map[string]string{},
		},
		{
			name: "RemoveAll without parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				durableNested(t, fs)
				must(t, fs.RemoveAll("/a"))
			},
			want: map[string]string{"/a": dirMark, "/a/b": dirMark, "/a/b/f": "hello"},
		},
		{
			name: "MkdirAll with only leaf synced",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.MkdirAll("/a/b/c", 0o755))
				syncDir(t, fs, "/a/b/c")
				syncDir(t, fs, "/a/b")
			},
			want: map[string]string{},
		},
		{
			name: "MkdirAll with root synced",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.MkdirAll("/a/b/c", 0o755))
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/a": dirMark},
		},
		{
			name: "MkdirAll with every parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.MkdirAll("/a/b/c", 0o755))
				syncDir(t, fs, "/a/b")
				syncDir(t, fs, "/a")
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/a": dirMark, "/a/b": dirMark, "/a/b/c": dirMark},
		},
		{
			name: "nested file needs every parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.MkdirAll("/a/b", 0o755))
				writeFile(t, fs, "/a/b/f", "hello", true)
				syncDir(t, fs, "/a/b")
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/a": dirMark},
		},
		{
			name: "truncate without sync is lost",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				truncateFile(t, fs, "/f", 2, false)
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "truncate with sync",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				truncateFile(t, fs, "/f", 2, true)
			},
			want: map[string]string{"/f": "he"},
		},
		{
			name: "O_TRUNC without sync keeps synced content",
			run: func(t *testing.T, fs afero.Fs) {
				durableFile(t, fs, "/f", "hello")
				writeFile(t, fs, "/f", "bye", false)
			},
			want: map[string]string{"/f": "hello"},
		},
		{
			name: "directory rename with parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				durableDir(t, fs)
				must(t, fs.Rename("/a", "/b"))
				syncDir(t, fs, "/")
			},
			want: map[string]string{"/b": dirMark, "/b/f": "hello"},
		},
		{
			name: "directory rename without parent synced",
			run: func(t *testing.T, fs afero.Fs) {
				durableDir(t, fs)
				must(t, fs.Rename("/a", "/b"))
			},
			want: map[string]string{"/a": dirMark, "/a/f": "hello"},
		},
		{
			// Durable state ends up with /a/b naming /c and /c/a naming /a;
			// the clone must cut the cycle and place each directory once.
			name: "directory renames forming a durable cycle",
			run: func(t *testing.T, fs afero.Fs) {
				must(t, fs.MkdirAll("/a/b", 0o755))
				syncDir(t, fs, "/a")
				must(t, fs.Rename("/a/b", "/c"))
				syncDir(t, fs, "/")
				must(t, fs.Rename("/a", "/c/a"))
				syncDir(t, fs, "/c")
			},
			want: map[string]string{"/a": dirMark, "/a/b": dirMark},
		},
	}
	wrappers := []struct {
		name string
		wrap func(*CrashFS) afero.Fs
	}{
		{"direct", func(fs *CrashFS) afero.Fs { return fs }},
		{"inject", func(fs *CrashFS) afero.Fs { return NewInjectFS(fs, nil) }},
	}
	for _, tt := range tests {
		for _, w := range wrappers {
			t.Run(tt.name+"/"+w.name, func(t *testing.T) {
				fs := NewCrashFS()
				tt.run(t, w.wrap(fs))
				before := fs.String()
				clone := fs.CrashClone()
				if got := tree(t, clone); !maps.Equal(got, tt.want) {
					t.Errorf("clone = %v, want %v\nstate:\n%s", got, tt.want, before)
				}
				if after := fs.String(); after != before {
					t.Errorf("CrashClone changed the original:\n%s\nwant:\n%s", after, before)
				}
				// In a clone everything present is durable.
				if got, want := tree(t, clone.CrashClone()), tree(t, clone); !maps.Equal(got, want) {
					t.Errorf("clone of clone = %v, want %v", got, want)
				}
			})
		}
	}
}

func TestCrashCloneIndependent(t *testing.T) {
	fs := NewCrashFS()
	durableFile(t, fs, "/f", "hello")
	clone := fs.CrashClone()

	appendFile(t, clone, "/f", " clone")
	writeFile(t, clone, "/g", "new", false)
	appendFile(t, fs, "/f", " original")

	if got, want := tree(t, fs), map[string]string{"/f": "hello original"}; !maps.Equal(got, want) {
		t.Errorf("original = %v, want %v", got, want)
	}
	if got, want := tree(t, clone), map[string]string{"/f": "hello clone", "/g": "new"}; !maps.Equal(got, want) {
		t.Errorf("clone = %v, want %v", got, want)
	}
	if got, want := tree(t, fs.CrashClone()), map[string]string{"/f": "hello"}; !maps.Equal(got, want) {
		t.Errorf("second clone = %v, want %v", got, want)
	}
}

// TestCrashCloneSharedInode checks that two durable names left by a half
// synced rename name one inode in the clone, like hard links.
func TestCrashCloneSharedInode(t *testing.T) {
	fs := NewCrashFS()
	renameAcross(t, fs, "/b/f")
	syncDir(t, fs, "/b")

	clone := fs.CrashClone()
	appendFile(t, clone, "/a/f", " world")
	if got := readAll(t, clone, "/b/f"); got != "hello world" {
		t.Errorf("/b/f = %q, want %q", got, "hello world")
	}
	must(t, clone.Remove("/a/f"))
	if got := readAll(t, clone, "/b/f"); got != "hello world" {
		t.Errorf("/b/f after removing /a/f = %q, want %q", got, "hello world")
	}
}

func TestCrashFSString(t *testing.T) {
	fs := NewCrashFS()
	must(t, fs.Mkdir("/d", 0o755))
	syncDir(t, fs, "/")
	writeFile(t, fs, "/d/f", "hello", true)
	appendFile(t, fs, "/d/f", "!")
	want := strings.Join([]string{
		"/",
		"/d/ durable=true",
		"/d/f size=6 synced=5 durable=false",
		"",
	}, "\n")
	if got := fs.String(); got != want {
		t.Errorf("String() =\n%s\nwant:\n%s", got, want)
	}
}

// TestCrashFSConcurrent is for the race detector.
func TestCrashFSConcurrent(t *testing.T) {
	fs := NewCrashFS()
	must(t, fs.Mkdir("/d", 0o755))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := "/d/" + string(rune('a'+i))
			writeX(t, fs, name, 20)
		})
		wg.Go(func() {
			_ = fs.CrashClone()
			_ = fs.String()
			if d, err := fs.Open("/d"); err == nil {
				_ = d.Sync()
				_, _ = d.Readdirnames(-1)
				_ = d.Close()
			}
		})
	}
	wg.Wait()
	syncDir(t, fs, "/d")
	syncDir(t, fs, "/")
	got := tree(t, fs.CrashClone())
	if len(got) != 9 {
		t.Fatalf("clone has %d entries, want 9: %v", len(got), got)
	}
	for name, data := range got {
		if name != "/d" && data != strings.Repeat("x", 20) {
			t.Errorf("%s = %q, want 20 x", name, data)
		}
	}
}

// The starting states that several cases above share.

// renameAcross makes the directories /a and /b durable and /a/f ("hello")
// durable in /a, then renames /a/f to to, syncing nothing after.
func renameAcross(t *testing.T, fs afero.Fs, to string) {
	t.Helper()
	must(t, fs.Mkdir("/a", 0o755))
	must(t, fs.Mkdir("/b", 0o755))
	syncDir(t, fs, "/")
	writeFile(t, fs, "/a/f", "hello", true)
	syncDir(t, fs, "/a")
	must(t, fs.Rename("/a/f", to))
}

// replaceDurable makes /f ("old") durable, then renames a synced /tmp
// ("new") over it, syncing nothing after.
func replaceDurable(t *testing.T, fs afero.Fs) {
	t.Helper()
	durableFile(t, fs, "/f", "old")
	writeFile(t, fs, "/tmp", "new", true)
	must(t, fs.Rename("/tmp", "/f"))
}

// durableNested makes /a/b/f ("hello") durable: the file, then every
// directory up to the root.
func durableNested(t *testing.T, fs afero.Fs) {
	t.Helper()
	must(t, fs.MkdirAll("/a/b", 0o755))
	writeFile(t, fs, "/a/b/f", "hello", true)
	syncDir(t, fs, "/a/b")
	syncDir(t, fs, "/a")
	syncDir(t, fs, "/")
}

// durableDir makes the directory /a and its file /a/f ("hello") durable.
func durableDir(t *testing.T, fs afero.Fs) {
	t.Helper()
	must(t, fs.Mkdir("/a", 0o755))
	writeFile(t, fs, "/a/f", "hello", true)
	syncDir(t, fs, "/a")
	syncDir(t, fs, "/")
}
