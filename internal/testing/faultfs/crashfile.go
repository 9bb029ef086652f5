package faultfs

import (
	"bytes"
	"io"
	"maps"
	"os"
	"slices"
	"syscall"
	"time"
)

// crashFile is an open handle on a CrashFS inode. It keeps working on its
// inode after the inode's name is removed, as an open file does. All fields
// but the immutable ones are guarded by fs.mu.
type crashFile struct {
	fs     *CrashFS
	name   string
	n      *inode
	read   bool
	write  bool
	append bool

	pos    int64
	closed bool
	// Readdir and Readdirnames page through a sorted snapshot of the entry
	// names taken by the first call.
	dirNames []string
	listed   bool
}

// begin locks the file system and checks that f is open; on success the
// caller must unlock fs.mu.
func (f *crashFile) begin(op string) error {
	f.fs.mu.Lock()
	if f.closed {
		f.fs.mu.Unlock()
		return pathErr(op, f.name, os.ErrClosed)
	}
	return nil
}

// beginChecked is begin, then check (checkRead or checkWrite): on
// success fs.mu is held, on failure it is not.
func (f *crashFile) beginChecked(op string, check func() error) error {
	if err := f.begin(op); err != nil {
		return err
	}
	if err := check(); err != nil {
		f.fs.mu.Unlock()
		return err
	}
	return nil
}

// Name returns the name f was opened with.
func (f *crashFile) Name() string { return f.name }

// Close closes f. Closing does not make anything durable.
func (f *crashFile) Close() error {
	if err := f.begin("close"); err != nil {
		return err
	}
	defer f.fs.mu.Unlock()
	f.closed = true
	return nil
}

// Sync makes a regular file's current content, or a directory's current
// entries, durable.
func (f *crashFile) Sync() error {
	if err := f.begin("sync"); err != nil {
		return err
	}
	defer f.fs.mu.Unlock()
	if f.n.dir {
		f.n.syncedEntries = maps.Clone(f.n.entries)
		return nil
	}
	f.n.synced = bytes.Clone(f.n.data)
	return nil
}

// checkRead reports why f cannot be read. Callers hold fs.mu.
func (f *crashFile) checkRead() error {
	switch {
	case f.n.dir:
		return pathErr("read", f.name, syscall.EISDIR)
	case !f.read:
		return pathErr("read", f.name, syscall.EBADF)
	}
	return nil
}

// checkWrite reports why f cannot be written. Callers hold fs.mu.
func (f *crashFile) checkWrite() error {
	if f.n.dir || !f.write {
		return pathErr("write", f.name, syscall.EBADF)
	}
	return nil
}

// Read reads from the current offset.
func (f *crashFile) Read(p []byte) (int, error) {
	if err := f.beginChecked("read", f.checkRead); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	if f.pos >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[f.pos:])
	f.pos += int64(n)
	return n, nil
}

// ReadAt reads at off without moving the offset.
func (f *crashFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.beginChecked("read", f.checkRead); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	if off < 0 {
		return 0, pathErr("readat", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// writeAt writes p at off, zero-filling any gap. Callers hold fs.mu.
func (f *crashFile) writeAt(p []byte, off int64) int {
	if end := off + int64(len(p)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], p)
	f.n.modTime = time.Now()
	return len(p)
}

// Write writes at the current offset, or at the end in append mode.
func (f *crashFile) Write(p []byte) (int, error) {
	if err := f.beginChecked("write", f.checkWrite); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	if f.append {
		f.pos = int64(len(f.n.data))
	}
	n := f.writeAt(p, f.pos)
	f.pos += int64(n)
	return n, nil
}

// WriteAt writes at off without moving the offset. Like os.File it refuses
// files opened with O_APPEND.
func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.beginChecked("write", f.checkWrite); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	if f.append || off < 0 {
		return 0, pathErr("writeat", f.name, syscall.EINVAL)
	}
	return f.writeAt(p, off), nil
}

// WriteString writes s like Write.
func (f *crashFile) WriteString(s string) (int, error) {
	return f.Write([]byte(s))
}

// Seek sets the offset. On a directory, seeking to 0 restarts Readdir.
func (f *crashFile) Seek(offset int64, whence int) (int64, error) {
	if err := f.begin("seek"); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	var pos int64
	switch whence {
	case io.SeekStart:
		pos = offset
	case io.SeekCurrent:
		pos = f.pos + offset
	case io.SeekEnd:
		pos = int64(len(f.n.data)) + offset
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if pos < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.pos = pos
	if f.n.dir && pos == 0 {
		f.dirNames, f.listed = nil, false
	}
	return pos, nil
}

// Truncate changes the current size of the file; the change is durable on
// the next Sync.
func (f *crashFile) Truncate(size int64) error {
	if err := f.begin("truncate"); err != nil {
		return err
	}
	defer f.fs.mu.Unlock()
	if f.n.dir || !f.write || size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	f.n.modTime = time.Now()
	return nil
}

// Stat describes the inode f is open on.
func (f *crashFile) Stat() (os.FileInfo, error) {
	if err := f.begin("stat"); err != nil {
		return nil, err
	}
	defer f.fs.mu.Unlock()
	return f.n.info(baseName(f.name)), nil
}

// nextNames returns up to count (all if count <= 0) further entry names that
// still exist, in sorted order. Callers hold fs.mu.
func (f *crashFile) nextNames(count int) ([]string, error) {
	if !f.n.dir {
		return nil, pathErr("readdirent", f.name, syscall.ENOTDIR)
	}
	if !f.listed {
		f.dirNames = slices.Sorted(maps.Keys(f.n.entries))
		f.listed = true
	}
	var names []string
	for len(f.dirNames) > 0 && (count <= 0 || len(names) < count) {
		name := f.dirNames[0]
		f.dirNames = f.dirNames[1:]
		if _, ok := f.n.entries[name]; ok {
			names = append(names, name)
		}
	}
	if count > 0 && len(names) == 0 {
		return nil, io.EOF
	}
	return names, nil
}

// Readdir returns entries in name order, count at a time when count > 0.
func (f *crashFile) Readdir(count int) ([]os.FileInfo, error) {
	if err := f.begin("readdirent"); err != nil {
		return nil, err
	}
	defer f.fs.mu.Unlock()
	names, err := f.nextNames(count)
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(names))
	for _, name := range names {
		infos = append(infos, f.n.entries[name].info(name))
	}
	return infos, nil
}

// Readdirnames returns entry names in sorted order, n at a time when n > 0.
func (f *crashFile) Readdirnames(n int) ([]string, error) {
	if err := f.begin("readdirent"); err != nil {
		return nil, err
	}
	defer f.fs.mu.Unlock()
	return f.nextNames(n)
}
