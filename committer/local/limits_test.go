package local

import (
	"context"
	"errors"
	"path"
	"strings"
	"syscall"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/spf13/afero"
)

// TestLimitsAreTheKernels: a final name of Limits().MaxName bytes commits
// on the real file system, and one byte more is what the kernel refuses
// (ENAMETOOLONG): the engine's write-time check holds exactly.
func TestLimitsAreTheKernels(t *testing.T) {
	fs := afero.NewOsFs()
	dest, staging := t.TempDir(), t.TempDir()
	l := New(fs, dest, staging)
	lim := l.Limits()
	if lim.MaxElem != 255 || lim.MaxName != 4095-len(path.Clean(dest))-1 {
		t.Fatalf("limits %+v for dest %s", lim, dest)
	}
	name := func(n int) string { // n bytes in elements of at most 200
		var segs []string
		for n > 0 {
			k := min(n, 200)
			if n-k == 1 { // no element of 0 bytes after a '/'
				k--
			}
			segs = append(segs, strings.Repeat("a", k))
			n -= k + 1
		}
		return strings.Join(segs, "/")
	}
	for _, n := range []int{lim.MaxName, lim.MaxName + 1} {
		final := name(n)
		if len(final) != n {
			t.Fatalf("made a name of %d bytes, want %d", len(final), n)
		}
		tmp := path.Join(staging, "f.inprogress")
		if err := afero.WriteFile(fs, tmp, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := l.Commit(context.Background(), committer.File{Temp: tmp, Final: final, Bytes: 2})
		switch {
		case n == lim.MaxName && err != nil:
			t.Fatalf("a name of MaxName bytes: %v", err)
		case n > lim.MaxName && !errors.Is(err, syscall.ENAMETOOLONG):
			t.Fatalf("a name of MaxName+1 bytes: %v, want ENAMETOOLONG", err)
		}
	}
}
