package durable

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace is renameat2(RENAME_NOREPLACE), falling back to link and
// unlink where the file system refuses the flag (EINVAL) or the kernel
// lacks the call (ENOSYS).
func renameNoReplace(oldname, newname string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return linkUnlink(oldname, newname)
	}
	return &os.LinkError{Op: "renameat2", Old: oldname, New: newname, Err: err}
}
