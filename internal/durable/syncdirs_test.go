package durable_test

import (
	"testing"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

// TestRenameUnsyncedSyncsNoDirectory: RenameUnsynced into directories it
// creates syncs nothing (so no directory is synced between a checkpoint's
// renames); a power cut before Dirs.Sync leaves the file where it was,
// never in neither place; after Sync of the final directory, the file,
// its new directories and their entries in every ancestor are durable.
func TestRenameUnsyncedSyncsNoDirectory(t *testing.T) {
	base := faultfs.NewCrashFS()
	if err := durable.MkdirAll(base, "/data/staging"); err != nil {
		t.Fatal(err)
	}
	if err := durable.MkdirAll(base, "/data/files"); err != nil {
		t.Fatal(err)
	}
	f, err := base.Create("/data/staging/a.inprogress")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncClose(f); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncDir(base, "/data/staging"); err != nil {
		t.Fatal(err)
	}
	fs := faultfs.NewInjectFS(base, nil)
	var dirs durable.Dirs
	syncs := fs.Count(faultfs.Kinds(faultfs.OpSync))
	dir, err := durable.RenameUnsynced(fs, &dirs, "/data/staging/a.inprogress", "/data/files/s/dt=1/hour=2/a")
	if err != nil {
		t.Fatal(err)
	}
	if n := fs.Count(faultfs.Kinds(faultfs.OpSync)) - syncs; n != 0 {
		t.Fatalf("RenameUnsynced ran %d syncs, want 0", n)
	}
	cut := base.CrashClone()
	if ok, _ := afero.Exists(cut, "/data/staging/a.inprogress"); !ok {
		t.Fatal("power cut before the sync: the file left staging but its new name is not durable")
	}
	if err := dirs.Sync(fs, dir); err != nil {
		t.Fatal(err)
	}
	cut = base.CrashClone()
	if b, err := afero.ReadFile(cut, "/data/files/s/dt=1/hour=2/a"); err != nil || string(b) != "x\n" {
		t.Fatalf("power cut after the sync: %q %v, want the file at its new name", b, err)
	}
	// Under a directory remembered durable: its entry for the new child
	// is synced too.
	if err := dirs.Sync(fs, "/data/files"); err != nil {
		t.Fatal(err)
	}
	if _, err := durable.RenameUnsynced(fs, &dirs, "/data/files/s/dt=1/hour=2/a", "/data/files/t/a"); err != nil {
		t.Fatal(err)
	}
	if err := dirs.Sync(fs, "/data/files/t"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := afero.Exists(base.CrashClone(), "/data/files/t/a"); !ok {
		t.Fatal("power cut after the sync of a new directory under a remembered one: the file is lost")
	}
	// Remembered: the next sync of the directory is one fsync.
	syncs = fs.Count(faultfs.Kinds(faultfs.OpSync))
	if err := dirs.Sync(fs, dir); err != nil {
		t.Fatal(err)
	}
	if n := fs.Count(faultfs.Kinds(faultfs.OpSync)) - syncs; n != 1 {
		t.Fatalf("Sync of a remembered directory ran %d syncs, want 1", n)
	}
}
