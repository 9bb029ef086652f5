package durable

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/afero"
)

// NoReplaceRenamer is implemented by file systems that can rename a file
// without replacing an existing target, atomically: the rename fails with
// an error wrapping fs.ErrExist (EEXIST) instead. Durable's recipe uses it
// when the afero.Fs has it (NewOsFs, faultfs's CrashFS and InjectFS).
type NoReplaceRenamer interface {
	RenameNoReplace(oldname, newname string) error
}

// OsFs is afero's OS file system with RenameNoReplace.
type OsFs struct{ afero.OsFs }

var _ NoReplaceRenamer = (*OsFs)(nil)

// NewOsFs returns the OS file system eosink runs on.
func NewOsFs() afero.Fs { return &OsFs{} }

// Name returns "OsFs".
func (*OsFs) Name() string { return "OsFs" }

// RenameNoReplace renames with renameat2(RENAME_NOREPLACE) where the
// kernel and file system have it, else by link and unlink, which fails
// just the same when newname exists (a crash in between leaves both names
// for one inode, which commit's recovery handles).
func (*OsFs) RenameNoReplace(oldname, newname string) error {
	return renameNoReplace(oldname, newname)
}

// linkUnlink renames by link(2), which never replaces, then unlink(2).
func linkUnlink(oldname, newname string) error {
	if err := os.Link(oldname, newname); err != nil {
		return err
	}
	if err := os.Remove(oldname); err != nil {
		return fmt.Errorf("rename %s: remove old name after link: %w", oldname, err)
	}
	return nil
}

// RenameNoReplace renames oldname to newname on fs unless newname exists,
// in which case it fails with an error wrapping fs.ErrExist. File systems
// without NoReplaceRenamer get a check then a rename, which a concurrent
// writer can race: only in-memory test file systems lack it.
func RenameNoReplace(fs afero.Fs, oldname, newname string) error {
	if r, ok := fs.(NoReplaceRenamer); ok {
		return r.RenameNoReplace(oldname, newname)
	}
	if _, err := fs.Stat(newname); err == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EEXIST}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fs.Rename(oldname, newname)
}
