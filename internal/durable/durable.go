// Package durable holds the one recipe eosink uses to make local files
// final: write, flush, Sync, check Close, Rename, then Sync the directory.
// Every local write that must survive a power cut goes through here, over an
// injected afero.Fs, so the crash tests see every step.
//
// A failed Sync is never retried here: the kernel may have dropped the dirty
// pages and a second Sync could report success for data that is gone. Sync
// failures are wrapped with ErrSync so callers can stop and let recovery
// decide.
package durable

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/afero"
)

// Errors classes. Callers test them with errors.Is.
var (
	// ErrSync marks a failed fsync of a file or directory. It must not be
	// retried: the process should stop and recovery decide.
	ErrSync = errors.New("fsync failed")
	// ErrDiskFull marks a write that failed because the device is full.
	ErrDiskFull = errors.New("disk full")
)

// Classify wraps err with ErrDiskFull when it is ENOSPC or EDQUOT.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// SyncDir opens dir and fsyncs it, making the creates, renames and removes
// of its entries durable.
func SyncDir(fs afero.Fs, dir string) error {
	d, err := fs.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("%w: sync directory %s: %w", ErrSync, dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and any missing parents, then fsyncs dir and every
// ancestor up to the root, so the whole path survives a power cut. It syncs
// existing directories too: a directory that exists may have been created
// by a run that failed before syncing it, and only a sync makes it certain.
// Callers that create many files in one directory remember which
// directories they have made durable (see Dirs).
func MkdirAll(fs afero.Fs, dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := fs.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create directory %s: %w", dir, syscall.ENOTDIR)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stat directory %s: %w", dir, err)
	} else if err := fs.MkdirAll(dir, 0o755); err != nil {
		return Classify(fmt.Errorf("create directory %s: %w", dir, err))
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := SyncDir(fs, d); err != nil {
			return err
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// DefaultMaxDirs is how many directories a Dirs remembers when its Max is 0.
const DefaultMaxDirs = 4096

// Dirs remembers directories made durable by MkdirAll in this process, so
// each is synced once. It remembers at most Max of them (DefaultMaxDirs
// when 0), forgetting the least recently used: a forgotten directory costs
// only a redundant fsync, and memory stays bounded however many partitions
// a long-lived process writes to (I11). Safe for concurrent use.
type Dirs struct {
	Max int

	mu   sync.Mutex
	done map[string]*list.Element // directory -> its element in lru
	lru  list.List                // of string, most recently used first
}

// known reports whether dir is remembered, marking it recently used.
func (d *Dirs) known(dir string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.touchLocked(dir)
}

// touchLocked is known with d.mu held.
func (d *Dirs) touchLocked(dir string) bool {
	el, ok := d.done[dir]
	if ok {
		d.lru.MoveToFront(el)
	}
	return ok
}

// remember records dir as durable, forgetting the least recently used
// directory beyond the bound.
func (d *Dirs) remember(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.touchLocked(dir) {
		return
	}
	if d.done == nil {
		d.done = map[string]*list.Element{}
	}
	d.done[dir] = d.lru.PushFront(dir)
	limit := d.Max
	if limit <= 0 {
		limit = DefaultMaxDirs
	}
	for d.lru.Len() > limit {
		old := d.lru.Back()
		d.lru.Remove(old)
		delete(d.done, old.Value.(string))
	}
}

// MkdirAll is MkdirAll, skipped for a directory already made durable.
func (d *Dirs) MkdirAll(fs afero.Fs, dir string) error {
	dir = filepath.Clean(dir)
	if d.known(dir) {
		return nil
	}
	if err := MkdirAll(fs, dir); err != nil {
		return err
	}
	d.remember(dir)
	return nil
}

// MkdirAllUnsynced creates dir and any missing parents, unless dir is
// remembered durable, and syncs nothing: the caller must Sync dir before
// an entry made in it counts as durable. It is for callers that make many
// entries in several directories and sync each directory once, after all
// of them (a checkpoint's commit), never a directory between its entries.
func (d *Dirs) MkdirAllUnsynced(fs afero.Fs, dir string) error {
	dir = filepath.Clean(dir)
	if d.known(dir) {
		return nil
	}
	if fi, err := fs.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create directory %s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stat directory %s: %w", dir, err)
	}
	// The directories about to be made may be remembered: made durable
	// earlier, then removed by someone else (a retention job). Made
	// again, their entries are new: Sync must not stop at them.
	d.forget(dir)
	for a := filepath.Dir(dir); a != filepath.Dir(a); a = filepath.Dir(a) {
		if _, err := fs.Stat(a); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		d.forget(a)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return Classify(fmt.Errorf("create directory %s: %w", dir, err))
	}
	return nil
}

// forget drops dir from the directories remembered durable.
func (d *Dirs) forget(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.done[dir]; ok {
		d.lru.Remove(el)
		delete(d.done, dir)
	}
}

// Sync makes dir's entries durable: a directory remembered durable is
// synced alone; another (made by MkdirAllUnsynced, or by an earlier run)
// with every ancestor up to and including the first one remembered (its
// entry for the child may be new), or the root, after which all of them
// are remembered. A failure wraps ErrSync when an fsync failed, and
// remembers nothing.
func (d *Dirs) Sync(fs afero.Fs, dir string) error {
	dir = filepath.Clean(dir)
	if d.known(dir) {
		return SyncDir(fs, dir)
	}
	var synced []string
	for a := dir; ; a = filepath.Dir(a) {
		if err := SyncDir(fs, a); err != nil {
			return err
		}
		if a != dir && d.known(a) {
			break
		}
		synced = append(synced, a)
		if filepath.Dir(a) == a {
			break
		}
	}
	for _, a := range synced {
		d.remember(a)
	}
	return nil
}

// SyncClose flushes f to stable storage and closes it, checking both errors.
// f is closed whatever happens.
func SyncClose(f afero.File) error {
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("%w: sync %s: %w", ErrSync, f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}

// Rename moves the synced file tmp to final, creating final's directory if
// needed (durably, through dirs), and fsyncs final's directory so the new
// name is durable. It never replaces a file at final: it fails with an
// error wrapping fs.ErrExist instead (see RenameNoReplace).
func Rename(fs afero.Fs, dirs *Dirs, tmp, final string) error {
	dir, err := RenameUnsynced(fs, dirs, tmp, final)
	if err != nil {
		return err
	}
	return dirs.Sync(fs, dir)
}

// RenameUnsynced is Rename without its last step: it returns final's
// directory, which the caller must dirs.Sync before the new name counts
// as durable (a directory it created, and its ancestors, are synced there
// too, not here). It is for callers that rename many files and sync each
// directory once, after all of its renames (a checkpoint's commit): no
// directory is synced between them.
func RenameUnsynced(fs afero.Fs, dirs *Dirs, tmp, final string) (dir string, err error) {
	dir = filepath.Dir(final)
	if err := dirs.MkdirAllUnsynced(fs, dir); err != nil {
		return "", err
	}
	err = RenameNoReplace(fs, tmp, final)
	if errors.Is(err, os.ErrNotExist) {
		// A directory remembered durable is skipped unseen by
		// MkdirAllUnsynced: removed since by someone else, it is made
		// again (and synced with its ancestors by Sync).
		if _, serr := fs.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			dirs.forget(dir)
			if err := dirs.MkdirAllUnsynced(fs, dir); err != nil {
				return "", err
			}
			err = RenameNoReplace(fs, tmp, final)
		}
	}
	if err != nil {
		return "", fmt.Errorf("rename %s: %w", tmp, err)
	}
	return dir, nil
}

// WriteFile writes data to tmp (created exclusively), syncs and closes it,
// then renames it to final and syncs final's directory. The caller chooses a
// tmp outside any directory readers list. If final exists, it is left as it
// is and the error wraps fs.ErrExist; tmp stays for the caller.
func WriteFile(fs afero.Fs, dirs *Dirs, tmp, final string, data []byte) error {
	if err := WriteTemp(fs, tmp, data); err != nil {
		return err
	}
	return Rename(fs, dirs, tmp, final)
}

// ReplaceFile writes data to tmp, syncs and closes it, renames it over
// final and syncs final's directory, whose existence is the caller's: a
// reader sees the old content or the new, never part of either. It is for
// eosink's own small documents (a lease, a memo), never for committed data
// (I7). On failure tmp is removed and final is unchanged or replaced whole.
func ReplaceFile(fs afero.Fs, tmp, final string, data []byte) error {
	if err := WriteTemp(fs, tmp, data); err != nil {
		return err
	}
	if err := fs.Rename(tmp, final); err != nil {
		_ = fs.Remove(tmp)
		return Classify(fmt.Errorf("rename %s: %w", tmp, err))
	}
	return SyncDir(fs, filepath.Dir(final))
}

// WriteTemp creates tmp with data (truncating a former one), synced and
// closed; on failure tmp is removed. WriteFile's first half, for callers
// that write the temp file early and Rename it later.
func WriteTemp(fs afero.Fs, tmp string, data []byte) error {
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return Classify(fmt.Errorf("create %s: %w", tmp, err))
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = fs.Remove(tmp)
		return Classify(fmt.Errorf("write %s: %w", tmp, err))
	}
	if err := SyncClose(f); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return nil
}

// SameContent reports whether the file at path holds exactly want.
func SameContent(fs afero.Fs, path string, want io.Reader) (bool, error) {
	f, err := fs.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	const chunk = 64 << 10
	a, b := make([]byte, chunk), make([]byte, chunk)
	for {
		na, ea := io.ReadFull(f, a)
		nb, eb := io.ReadFull(want, b)
		if na != nb || string(a[:na]) != string(b[:nb]) {
			return false, nil
		}
		aDone := ea == io.EOF || ea == io.ErrUnexpectedEOF
		bDone := eb == io.EOF || eb == io.ErrUnexpectedEOF
		if ea != nil && !aDone {
			return false, ea
		}
		if eb != nil && !bDone {
			return false, eb
		}
		if aDone || bDone {
			return aDone && bDone, nil
		}
	}
}
