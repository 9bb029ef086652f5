package faultfs

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

var (
	_ afero.Fs                 = (*InjectFS)(nil)
	_ afero.File               = (*injectFile)(nil)
	_ durable.NoReplaceRenamer = (*InjectFS)(nil)
)

// InjectFS wraps an afero.Fs, and every file it opens, so that each
// operation is counted and first submitted to an Injector, which may fail it.
// Directory syncs (Open the directory, then Sync) pass through to the wrapped
// file system and count as OpSync. InjectFS is safe for concurrent use if the
// wrapped file system is.
type InjectFS struct {
	fs  afero.Fs
	inj Injector

	seq    atomic.Int64
	counts [numKinds]atomic.Int64
}

// NewInjectFS wraps fs. A nil inj fails nothing, which counts a workload's
// operations.
func NewInjectFS(fs afero.Fs, inj Injector) *InjectFS {
	return &InjectFS{fs: fs, inj: inj}
}

// Count returns how many operations whose kind is in kinds were attempted,
// failed ones included.
func (fs *InjectFS) Count(kinds KindSet) int64 {
	var total int64
	for k := range OpKind(numKinds) {
		if kinds.Has(k) {
			total += fs.counts[k].Load()
		}
	}
	return total
}

// check counts an operation and asks the injector about it.
func (fs *InjectFS) check(kind OpKind, path string) error {
	idx := fs.seq.Add(1) - 1
	fs.counts[kind].Add(1)
	if fs.inj == nil {
		return nil
	}
	return fs.inj.MaybeError(Op{Kind: kind, Path: path, Index: idx})
}

// wrapErr makes an injected error read like the OS's.
func wrapErr(op, path string, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	if errors.As(err, &pe) || errors.As(err, &le) {
		return err
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

// Name returns "InjectFS(" plus the wrapped file system's name plus ")".
func (fs *InjectFS) Name() string { return "InjectFS(" + fs.fs.Name() + ")" }

// Create creates or truncates name; it is an OpOpen.
func (fs *InjectFS) Create(name string) (afero.File, error) {
	if err := fs.check(OpOpen, name); err != nil {
		return nil, wrapErr("open", name, err)
	}
	return fs.wrapFile(fs.fs.Create(name))
}

// Open opens name for reading; it is an OpOpen.
func (fs *InjectFS) Open(name string) (afero.File, error) {
	if err := fs.check(OpOpen, name); err != nil {
		return nil, wrapErr("open", name, err)
	}
	return fs.wrapFile(fs.fs.Open(name))
}

// OpenFile opens name with flag and perm; it is an OpOpen.
func (fs *InjectFS) OpenFile(name string, flag int, perm os.FileMode) (afero.File, error) {
	if err := fs.check(OpOpen, name); err != nil {
		return nil, wrapErr("open", name, err)
	}
	return fs.wrapFile(fs.fs.OpenFile(name, flag, perm))
}

func (fs *InjectFS) wrapFile(f afero.File, err error) (afero.File, error) {
	if err != nil {
		return nil, err
	}
	return &injectFile{fs: fs, f: f}, nil
}

// Mkdir creates directory name; it is an OpMkdir.
func (fs *InjectFS) Mkdir(name string, perm os.FileMode) error {
	if err := fs.check(OpMkdir, name); err != nil {
		return wrapErr("mkdir", name, err)
	}
	return fs.fs.Mkdir(name, perm)
}

// MkdirAll creates path and its parents; it is one OpMkdir.
func (fs *InjectFS) MkdirAll(path string, perm os.FileMode) error {
	if err := fs.check(OpMkdir, path); err != nil {
		return wrapErr("mkdir", path, err)
	}
	return fs.fs.MkdirAll(path, perm)
}

// Remove removes name; it is an OpRemove.
func (fs *InjectFS) Remove(name string) error {
	if err := fs.check(OpRemove, name); err != nil {
		return wrapErr("remove", name, err)
	}
	return fs.fs.Remove(name)
}

// RemoveAll removes path and its contents; it is one OpRemove.
func (fs *InjectFS) RemoveAll(path string) error {
	if err := fs.check(OpRemove, path); err != nil {
		return wrapErr("unlinkat", path, err)
	}
	return fs.fs.RemoveAll(path)
}

// Rename moves oldname to newname; it is an OpRename whose Path is oldname.
// Injected errors come back as *os.LinkError.
func (fs *InjectFS) Rename(oldname, newname string) error {
	if err := fs.check(OpRename, oldname); err != nil {
		return renameErr(oldname, newname, err)
	}
	return fs.fs.Rename(oldname, newname)
}

// renameErr is an injected rename error as *os.LinkError, unless the
// fault already is a path or link error.
func renameErr(oldname, newname string, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	if errors.As(err, &pe) || errors.As(err, &le) {
		return err
	}
	return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
}

// RenameNoReplace is Rename that never replaces newname (see
// durable.NoReplaceRenamer); it is an OpRename whose Path is oldname. The
// wrapped file system's own RenameNoReplace is used when it has one.
func (fs *InjectFS) RenameNoReplace(oldname, newname string) error {
	if err := fs.check(OpRename, oldname); err != nil {
		return renameErr(oldname, newname, err)
	}
	return durable.RenameNoReplace(fs.fs, oldname, newname)
}

// Stat describes name; it is an OpStat.
func (fs *InjectFS) Stat(name string) (os.FileInfo, error) {
	if err := fs.check(OpStat, name); err != nil {
		return nil, wrapErr("stat", name, err)
	}
	return fs.fs.Stat(name)
}

// Chmod changes the mode of name; it is an OpSetAttr.
func (fs *InjectFS) Chmod(name string, mode os.FileMode) error {
	if err := fs.check(OpSetAttr, name); err != nil {
		return wrapErr("chmod", name, err)
	}
	return fs.fs.Chmod(name, mode)
}

// Chown changes the owner of name; it is an OpSetAttr.
func (fs *InjectFS) Chown(name string, uid, gid int) error {
	if err := fs.check(OpSetAttr, name); err != nil {
		return wrapErr("chown", name, err)
	}
	return fs.fs.Chown(name, uid, gid)
}

// Chtimes changes the times of name; it is an OpSetAttr.
func (fs *InjectFS) Chtimes(name string, atime, mtime time.Time) error {
	if err := fs.check(OpSetAttr, name); err != nil {
		return wrapErr("chtimes", name, err)
	}
	return fs.fs.Chtimes(name, atime, mtime)
}

// injectFile wraps a file opened through an InjectFS.
type injectFile struct {
	fs *InjectFS
	f  afero.File
}

// Name returns the wrapped file's name; it is not an operation.
func (f *injectFile) Name() string { return f.f.Name() }

// Close closes the file; it is an OpClose. An injected error is returned
// after closing the wrapped file anyway, as close(2) releases the descriptor
// even when it reports an error.
func (f *injectFile) Close() error {
	if err := f.fs.check(OpClose, f.Name()); err != nil {
		_ = f.f.Close() // The injected error is the one to report.
		return wrapErr("close", f.Name(), err)
	}
	return f.f.Close()
}

// Read is an OpRead.
func (f *injectFile) Read(p []byte) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, wrapErr("read", f.Name(), err)
	}
	return f.f.Read(p)
}

// ReadAt is an OpRead.
func (f *injectFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, wrapErr("read", f.Name(), err)
	}
	return f.f.ReadAt(p, off)
}

// Seek passes through uncounted.
func (f *injectFile) Seek(offset int64, whence int) (int64, error) {
	return f.f.Seek(offset, whence)
}

// failWrite reports an injected write error, first writing half of p with
// write if the injector asked for a short write.
func (f *injectFile) failWrite(err error, p []byte, write func([]byte) (int, error)) (int, error) {
	var short *ShortWriteError
	if !errors.As(err, &short) {
		return 0, wrapErr("write", f.Name(), err)
	}
	n, werr := write(p[:len(p)/2])
	if werr != nil {
		return n, werr
	}
	return n, wrapErr("write", f.Name(), short.Err)
}

// Write is an OpWrite.
func (f *injectFile) Write(p []byte) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		return f.failWrite(err, p, f.f.Write)
	}
	return f.f.Write(p)
}

// WriteAt is an OpWrite.
func (f *injectFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		return f.failWrite(err, p, func(b []byte) (int, error) { return f.f.WriteAt(b, off) })
	}
	return f.f.WriteAt(p, off)
}

// WriteString is an OpWrite.
func (f *injectFile) WriteString(s string) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		return f.failWrite(err, []byte(s), f.f.Write)
	}
	return f.f.WriteString(s)
}

// Sync is an OpSync, on files and directories alike.
func (f *injectFile) Sync() error {
	if err := f.fs.check(OpSync, f.Name()); err != nil {
		return wrapErr("sync", f.Name(), err)
	}
	return f.f.Sync()
}

// Truncate is an OpTruncate.
func (f *injectFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.Name()); err != nil {
		return wrapErr("truncate", f.Name(), err)
	}
	return f.f.Truncate(size)
}

// Stat is an OpStat.
func (f *injectFile) Stat() (os.FileInfo, error) {
	if err := f.fs.check(OpStat, f.Name()); err != nil {
		return nil, wrapErr("stat", f.Name(), err)
	}
	return f.f.Stat()
}

// Readdir is an OpRead.
func (f *injectFile) Readdir(count int) ([]os.FileInfo, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return nil, wrapErr("readdirent", f.Name(), err)
	}
	return f.f.Readdir(count)
}

// Readdirnames is an OpRead.
func (f *injectFile) Readdirnames(n int) ([]string, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return nil, wrapErr("readdirent", f.Name(), err)
	}
	return f.f.Readdirnames(n)
}
