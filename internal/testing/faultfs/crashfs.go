package faultfs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

var (
	_ afero.Fs                 = (*CrashFS)(nil)
	_ afero.File               = (*crashFile)(nil)
	_ durable.NoReplaceRenamer = (*CrashFS)(nil)
)

// CrashFS is an in-memory afero.Fs that remembers which file contents and
// directory entries were synced, so that [CrashFS.CrashClone] can produce the
// file system a power cut would leave. The package documentation describes
// the durability model.
//
// Paths may be absolute or relative; both are taken from the root, and ".."
// never leaves it. There are no permission checks and no symlinks. All
// methods, and the methods of the files it returns, are safe for concurrent
// use: one mutex guards the whole tree.
type CrashFS struct {
	mu   sync.Mutex
	root *inode
}

// inode is a file or directory. Its fields are guarded by CrashFS.mu.
type inode struct {
	dir     bool
	perm    os.FileMode
	modTime time.Time

	// Regular files: the content the process sees and the content the last
	// Sync made durable.
	data   []byte
	synced []byte

	// Directories: the entries the process sees and the entries the last
	// Sync made durable.
	entries       map[string]*inode
	syncedEntries map[string]*inode
}

func newDirInode(perm os.FileMode) *inode {
	return &inode{
		dir:           true,
		perm:          perm & os.ModePerm,
		modTime:       time.Now(),
		entries:       map[string]*inode{},
		syncedEntries: map[string]*inode{},
	}
}

func newFileInode(perm os.FileMode) *inode {
	return &inode{perm: perm & os.ModePerm, modTime: time.Now()}
}

func (n *inode) mode() os.FileMode {
	if n.dir {
		return os.ModeDir | n.perm
	}
	return n.perm
}

// NewCrashFS returns an empty CrashFS holding only its root directory.
func NewCrashFS() *CrashFS {
	return &CrashFS{root: newDirInode(0o755)}
}

// CrashClone returns a new, independent CrashFS holding only the durable
// state of fs: what a power cut at this moment would leave. In the clone,
// current state equals durable state. fs is not changed.
func (fs *CrashFS) CrashClone() *CrashFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	files := map[*inode]*inode{}
	placed := map[*inode]bool{}
	var cloneDir func(old *inode) *inode
	cloneDir = func(old *inode) *inode {
		placed[old] = true
		n := newDirInode(old.perm)
		n.modTime = old.modTime
		for _, name := range slices.Sorted(maps.Keys(old.syncedEntries)) {
			child := old.syncedEntries[name]
			if child.dir {
				if placed[child] {
					continue
				}
				n.entries[name] = cloneDir(child)
				continue
			}
			c, ok := files[child]
			if !ok {
				c = newFileInode(child.perm)
				c.modTime = child.modTime
				c.data = bytes.Clone(child.synced)
				c.synced = bytes.Clone(child.synced)
				files[child] = c
			}
			n.entries[name] = c
		}
		n.syncedEntries = maps.Clone(n.entries)
		return n
	}
	return &CrashFS{root: cloneDir(fs.root)}
}

// String lists every directory and file of the current state, one a line in
// sorted order, with file sizes, synced sizes and whether the entry is
// durable. It is meant for test failure messages.
func (fs *CrashFS) String() string {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	var b strings.Builder
	var walk func(dir *inode, path string, durable bool)
	walk = func(dir *inode, path string, durable bool) {
		for _, name := range slices.Sorted(maps.Keys(dir.entries)) {
			n := dir.entries[name]
			p := path + "/" + name
			d := durable && dir.syncedEntries[name] == n
			if n.dir {
				fmt.Fprintf(&b, "%s/ durable=%t\n", p, d)
				walk(n, p, d)
				continue
			}
			fmt.Fprintf(&b, "%s size=%d synced=%d durable=%t\n", p, len(n.data), len(n.synced), d)
		}
	}
	b.WriteString("/\n")
	walk(fs.root, "", true)
	return b.String()
}

// split cleans name and returns its components from the root; the root itself
// has none.
func split(name string) []string {
	p := filepath.Clean(string(filepath.Separator) + name)
	if p == string(filepath.Separator) {
		return nil
	}
	return strings.Split(p[1:], string(filepath.Separator))
}

// baseName is the name Stat reports for name.
func baseName(name string) string {
	parts := split(name)
	if len(parts) == 0 {
		return string(filepath.Separator)
	}
	return parts[len(parts)-1]
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// walkDirs follows parts from the root and returns the directories met,
// root first; it fails if one is missing or not a directory. Callers hold
// fs.mu.
func (fs *CrashFS) walkDirs(op, name string, parts []string) ([]*inode, error) {
	dirs := []*inode{fs.root}
	for _, c := range parts {
		child, ok := dirs[len(dirs)-1].entries[c]
		if !ok {
			return nil, pathErr(op, name, syscall.ENOENT)
		}
		if !child.dir {
			return nil, pathErr(op, name, syscall.ENOTDIR)
		}
		dirs = append(dirs, child)
	}
	return dirs, nil
}

// parent returns the directory holding name and name's last component. For
// the root it returns a nil directory. Callers hold fs.mu.
func (fs *CrashFS) parent(op, name string) (*inode, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", nil
	}
	dirs, err := fs.walkDirs(op, name, parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	return dirs[len(dirs)-1], parts[len(parts)-1], nil
}

// lookup returns the inode at name. Callers hold fs.mu.
func (fs *CrashFS) lookup(op, name string) (*inode, error) {
	dir, base, err := fs.parent(op, name)
	if err != nil {
		return nil, err
	}
	if dir == nil {
		return fs.root, nil
	}
	n, ok := dir.entries[base]
	if !ok {
		return nil, pathErr(op, name, syscall.ENOENT)
	}
	return n, nil
}

// Name returns "CrashFS".
func (fs *CrashFS) Name() string { return "CrashFS" }

// Create creates or truncates name and opens it for reading and writing.
func (fs *CrashFS) Create(name string) (afero.File, error) {
	return fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Open opens name for reading. Syncing a directory opened this way makes its
// current entries durable.
func (fs *CrashFS) Open(name string) (afero.File, error) {
	return fs.OpenFile(name, os.O_RDONLY, 0)
}

// OpenFile opens name honouring O_RDONLY, O_WRONLY, O_RDWR, O_CREATE,
// O_EXCL, O_TRUNC and O_APPEND; perm applies to a created file.
func (fs *CrashFS) OpenFile(name string, flag int, perm os.FileMode) (afero.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	dir, base, err := fs.parent("open", name)
	if err != nil {
		return nil, err
	}
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	n := fs.root
	if dir != nil {
		n = dir.entries[base]
	}
	switch {
	case n == nil:
		if flag&os.O_CREATE == 0 {
			return nil, pathErr("open", name, syscall.ENOENT)
		}
		n = newFileInode(perm)
		dir.entries[base] = n
		dir.modTime = n.modTime
	case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, pathErr("open", name, syscall.EEXIST)
	case n.dir && (acc != os.O_RDONLY || flag&os.O_TRUNC != 0):
		return nil, pathErr("open", name, syscall.EISDIR)
	case flag&os.O_TRUNC != 0 && len(n.data) > 0:
		n.data = nil
		n.modTime = time.Now()
	}
	return &crashFile{
		fs:     fs,
		name:   name,
		n:      n,
		read:   acc != os.O_WRONLY,
		write:  acc != os.O_RDONLY,
		append: flag&os.O_APPEND != 0,
	}, nil
}

// Mkdir creates directory name; its parent must exist.
func (fs *CrashFS) Mkdir(name string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	dir, base, err := fs.parent("mkdir", name)
	if err != nil {
		return err
	}
	if dir == nil {
		return pathErr("mkdir", name, syscall.EEXIST)
	}
	if _, ok := dir.entries[base]; ok {
		return pathErr("mkdir", name, syscall.EEXIST)
	}
	n := newDirInode(perm)
	dir.entries[base] = n
	dir.modTime = n.modTime
	return nil
}

// MkdirAll creates directory path and any missing parents. It succeeds if
// path is already a directory.
func (fs *CrashFS) MkdirAll(path string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	dir := fs.root
	for _, c := range split(path) {
		child, ok := dir.entries[c]
		if !ok {
			child = newDirInode(perm)
			dir.entries[c] = child
			dir.modTime = child.modTime
		}
		if !child.dir {
			return pathErr("mkdir", path, syscall.ENOTDIR)
		}
		dir = child
	}
	return nil
}

// Remove removes file or empty directory name.
func (fs *CrashFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	dir, base, err := fs.parent("remove", name)
	if err != nil {
		return err
	}
	if dir == nil {
		return pathErr("remove", name, syscall.EBUSY)
	}
	n, ok := dir.entries[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir && len(n.entries) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.entries, base)
	dir.modTime = time.Now()
	return nil
}

// RemoveAll removes path and everything below it. A missing path is not an
// error. Only the entry in path's parent changes, so syncing that parent
// makes the whole removal durable.
func (fs *CrashFS) RemoveAll(path string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	dir, base, err := fs.parent("unlinkat", path)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok && pe.Err == syscall.ENOENT {
			return nil
		}
		return err
	}
	if dir == nil {
		return pathErr("unlinkat", path, syscall.EBUSY)
	}
	if _, ok := dir.entries[base]; ok {
		delete(dir.entries, base)
		dir.modTime = time.Now()
	}
	return nil
}

// Rename moves oldname to newname, replacing a file at newname. Directories
// may be renamed too. Like os.Rename it fails with EEXIST if newname is a
// directory.
func (fs *CrashFS) Rename(oldname, newname string) error {
	return fs.rename(oldname, newname, false)
}

// RenameNoReplace is Rename that fails with EEXIST if newname exists, as
// renameat2(RENAME_NOREPLACE) does, atomically.
func (fs *CrashFS) RenameNoReplace(oldname, newname string) error {
	return fs.rename(oldname, newname, true)
}

func (fs *CrashFS) rename(oldname, newname string, noReplace bool) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	linkErr := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	unwrap := func(err error) error {
		if pe, ok := err.(*os.PathError); ok {
			return linkErr(pe.Err)
		}
		return linkErr(err)
	}
	srcDir, srcBase, err := fs.parent("rename", oldname)
	if err != nil {
		return unwrap(err)
	}
	if srcDir == nil {
		return linkErr(syscall.EBUSY)
	}
	src, ok := srcDir.entries[srcBase]
	if !ok {
		return linkErr(syscall.ENOENT)
	}
	newParts := split(newname)
	if len(newParts) == 0 {
		return linkErr(syscall.EBUSY)
	}
	dirs, err := fs.walkDirs("rename", newname, newParts[:len(newParts)-1])
	if err != nil {
		return unwrap(err)
	}
	dstDir, dstBase := dirs[len(dirs)-1], newParts[len(newParts)-1]
	if dst, ok := dstDir.entries[dstBase]; ok {
		switch {
		case noReplace:
			return linkErr(syscall.EEXIST)
		case dst == src:
			return nil
		case dst.dir:
			return linkErr(syscall.EEXIST)
		case src.dir:
			return linkErr(syscall.ENOTDIR)
		}
	}
	if src.dir && slices.Contains(dirs, src) {
		return linkErr(syscall.EINVAL)
	}
	delete(srcDir.entries, srcBase)
	dstDir.entries[dstBase] = src
	now := time.Now()
	srcDir.modTime, dstDir.modTime = now, now
	return nil
}

// Stat describes name.
func (fs *CrashFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	n, err := fs.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return n.info(baseName(name)), nil
}

// Chmod sets the permission bits of name. Modes are not tracked for
// durability.
func (fs *CrashFS) Chmod(name string, mode os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	n, err := fs.lookup("chmod", name)
	if err != nil {
		return err
	}
	n.perm = mode & os.ModePerm
	return nil
}

// Chown checks that name exists and otherwise does nothing: CrashFS has no
// owners.
func (fs *CrashFS) Chown(name string, uid, gid int) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	_, err := fs.lookup("chown", name)
	return err
}

// Chtimes sets the modification time of name; the access time is not kept.
func (fs *CrashFS) Chtimes(name string, atime, mtime time.Time) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()

	n, err := fs.lookup("chtimes", name)
	if err != nil {
		return err
	}
	n.modTime = mtime
	return nil
}

// info describes n under name. Callers hold fs.mu.
func (n *inode) info(name string) os.FileInfo {
	return &fileInfo{name: name, size: int64(len(n.data)), mode: n.mode(), modTime: n.modTime}
}

// fileInfo is a snapshot of an inode's metadata.
type fileInfo struct {
	name    string
	size    int64
	mode    os.FileMode
	modTime time.Time
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.size }
func (fi *fileInfo) Mode() os.FileMode  { return fi.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.modTime }
func (fi *fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return nil }
