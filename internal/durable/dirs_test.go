package durable

import (
	"fmt"
	"testing"

	"github.com/spf13/afero"
)

// TestDirsBounded: Dirs forgets the least recently used directories beyond
// its bound, so a process that writes to ever new partitions does not grow
// without end (I11); a forgotten directory is synced again, never skipped.
func TestDirsBounded(t *testing.T) {
	fs := afero.NewMemMapFs()
	var d Dirs
	n := DefaultMaxDirs + 500
	for i := range n {
		if err := d.MkdirAll(fs, fmt.Sprintf("/dest/s/dt=%05d", i)); err != nil {
			t.Fatal(err)
		}
		// The root stays recently used, so it is never the one forgotten.
		if err := d.MkdirAll(fs, "/dest"); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(d.done); got > DefaultMaxDirs {
		t.Fatalf("Dirs remembers %d directories, want at most %d", got, DefaultMaxDirs)
	}
	if !d.known("/dest") {
		t.Fatal("the most recently used directory was forgotten")
	}
	if d.known("/dest/s/dt=00000") {
		t.Fatal("the least recently used directory is still remembered")
	}
	if !d.known(fmt.Sprintf("/dest/s/dt=%05d", n-1)) {
		t.Fatal("the newest directory is not remembered")
	}
	// Forgotten means synced again: MkdirAll works and remembers it anew.
	if err := d.MkdirAll(fs, "/dest/s/dt=00000"); err != nil {
		t.Fatal(err)
	}
	if !d.known("/dest/s/dt=00000") {
		t.Fatal("a directory made durable again is not remembered")
	}
}
