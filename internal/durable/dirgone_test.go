package durable_test

import (
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

// Directories remembered durable, then removed by someone else (a
// retention job deleting an old partition) and needed again: a rename
// into them succeeds (it made them again) and, once Sync returns, a power
// cut keeps the file, into the removed directory itself and into a new
// one under a removed one. Failed before: the rename into the remembered
// directory failed with ENOENT (for ever: the commit never passed), and
// the file under a removed parent was lost by a power cut after Sync,
// which stopped at the parent it remembered (made again, its own entry
// never synced).
func TestRenameIntoRemovedDirectory(t *testing.T) {
	for _, into := range []string{"/data/files/s/dt=1/h=0", "/data/files/s/dt=1/h=1"} {
		t.Run(into, func(t *testing.T) {
			base := faultfs.NewCrashFS()
			for _, d := range []string{"/data/staging", "/data/files"} {
				if err := durable.MkdirAll(base, d); err != nil {
					t.Fatal(err)
				}
			}
			var dirs durable.Dirs
			rename := func(name, final string) {
				t.Helper()
				tmp := "/data/staging/" + name
				if err := durable.WriteTemp(base, tmp, []byte("x\n")); err != nil {
					t.Fatal(err)
				}
				dir, err := durable.RenameUnsynced(base, &dirs, tmp, final)
				if err != nil {
					t.Fatalf("rename to %s: %v", final, err)
				}
				if err := dirs.Sync(base, dir); err != nil {
					t.Fatal(err)
				}
			}
			rename("a", "/data/files/s/dt=1/h=0/a")
			if err := base.RemoveAll("/data/files/s/dt=1"); err != nil {
				t.Fatal(err)
			}
			if err := durable.SyncDir(base, "/data/files/s"); err != nil {
				t.Fatal(err)
			}
			rename("b", into+"/b")
			if b, err := afero.ReadFile(base.CrashClone(), into+"/b"); err != nil || string(b) != "x\n" {
				t.Fatalf("power cut after Sync: %q %v, want the file", b, err)
			}
		})
	}
}
