// Package local commits staging files into a directory on the same
// filesystem: rename, then fsync of the destination directory. All I/O goes
// through an injected afero.Fs.
package local

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

var (
	_ committer.Committer       = (*Local)(nil)
	_ committer.BatchCommitter  = (*Local)(nil)
	_ committer.Publisher       = (*Local)(nil)
	_ committer.StagedPublisher = (*Local)(nil)
	_ committer.Reader          = (*Local)(nil)
	_ committer.Pager           = (*Local)(nil)
	_ committer.Limiter         = (*Local)(nil)
	_ committer.Mover           = (*Local)(nil)
	_ committer.Remover         = (*Local)(nil)
)

// Local commits into Dest on FS. Temp files for published objects go to
// Staging, which must be on the same filesystem and outside Dest.
type Local struct {
	FS      afero.Fs
	Dest    string
	Staging string
	// StaleLock is how old a lease lock file must be before a writer
	// breaks it (0: 10 s, see lockLease).
	StaleLock time.Duration
	dirs      durable.Dirs // directories made durable by this process

	// leaseMu serializes this Local's lease writes, so a lock file naming
	// its own owner while it takes the lock is one it left (see
	// SetLockOwner); it also guards owner and dead.
	leaseMu sync.Mutex
	owner   string
	dead    []string
	names   *nameCache // sorted directory listings for ListPage
}

// New returns a local committer.
func New(fsys afero.Fs, dest, staging string) *Local {
	return &Local{FS: fsys, Dest: path.Clean(dest), Staging: path.Clean(staging), names: newNameCache(defaultCachedNames)}
}

func (l *Local) abs(name string) string { return path.Join(l.Dest, name) }

// Path limits of Linux (and most Unix) file systems: PATH_MAX counts the
// terminating NUL, NAME_MAX does not.
const (
	maxPath = 4096 - 1
	maxElem = 255
)

// Limits bounds final names so that Dest/<name> stays within PATH_MAX and
// every element within NAME_MAX.
func (l *Local) Limits() committer.Limits {
	return committer.Limits{MaxName: maxPath - len(l.Dest) - 1, MaxElem: maxElem}
}

// Prepare does nothing: the synced staging file is already what Commit renames.
func (l *Local) Prepare(_ context.Context, f committer.File) (committer.File, error) {
	if f.Temp == "" || f.Final == "" {
		return f, fmt.Errorf("prepare %s: temp and final names required", f.Final)
	}
	return f, nil
}

// Commit renames f.Temp to its final name and fsyncs the directory.
//
//   - temp present, final absent: rename + dir fsync.
//   - temp absent, final present with f's size: done (the dir is fsynced
//     again: the rename may not have been durable yet).
//   - both present: if final holds the same bytes, the rename was durable in
//     the destination but the removal of temp was not; temp is deleted.
//     Otherwise ErrConflict.
//   - neither: ErrLost.
//
// The rename never replaces a file (durable.Rename): one that appears at
// the final name after the check is handled as "both present".
func (l *Local) Commit(ctx context.Context, f committer.File) error {
	dir, err := l.CommitUnsynced(ctx, f)
	if err != nil || dir == "" {
		return err
	}
	return l.SyncCommits(ctx, dir)
}

// CommitUnsynced is Commit up to the fsync of the final directory, which it
// returns for SyncCommits ("" when it synced already: a final found beside
// its temp file is made durable before the temp file goes).
func (l *Local) CommitUnsynced(_ context.Context, f committer.File) (string, error) {
	final := l.abs(f.Final)
	// The common case first, in one rename: temp present, final absent.
	// Anything else (a replay, a conflict) fails the rename without a
	// change, since it never replaces, and is sorted out below.
	if dir, err := durable.RenameUnsynced(l.FS, &l.dirs, f.Temp, final); err == nil {
		return dir, nil
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("commit %s: %w", f.Final, err)
	}
	_, terr := l.FS.Stat(f.Temp)
	fi, ferr := l.FS.Stat(final)
	tempOK, finalOK := terr == nil, ferr == nil
	if terr != nil && !errors.Is(terr, os.ErrNotExist) {
		return "", fmt.Errorf("commit %s: stat temp: %w", f.Final, terr)
	}
	if ferr != nil && !errors.Is(ferr, os.ErrNotExist) {
		return "", fmt.Errorf("commit %s: stat final: %w", f.Final, ferr)
	}
	switch {
	case tempOK && !finalOK:
		dir, err := durable.RenameUnsynced(l.FS, &l.dirs, f.Temp, final)
		if errors.Is(err, fs.ErrExist) {
			return "", l.commitOver(f, final)
		}
		if err != nil {
			return "", fmt.Errorf("commit %s: %w", f.Final, err)
		}
		return dir, nil
	case !tempOK && finalOK:
		if fi.Size() != f.Bytes {
			return "", fmt.Errorf("commit %s: %w: %d bytes, expected %d", f.Final, committer.ErrConflict, fi.Size(), f.Bytes)
		}
		if f.CRC32C != "" {
			sum, err := crcOf(l.FS, final)
			if err != nil {
				return "", fmt.Errorf("commit %s: %w", f.Final, err)
			}
			if sum != f.CRC32C {
				return "", fmt.Errorf("commit %s: %w: crc32c %s, expected %s", f.Final, committer.ErrConflict, sum, f.CRC32C)
			}
		}
		// The rename may not be durable yet: its directory is synced again.
		dir := path.Dir(final)
		if err := l.dirs.MkdirAll(l.FS, dir); err != nil {
			return "", fmt.Errorf("commit %s: %w", f.Final, err)
		}
		return dir, nil
	case tempOK && finalOK:
		return "", l.commitOver(f, final)
	default:
		return "", fmt.Errorf("commit %s: %w", f.Final, committer.ErrLost)
	}
}

// SyncCommits fsyncs dir, a final directory CommitUnsynced returned, making
// the renames into it durable, and the ancestors this process has not
// made durable yet (CommitUnsynced creates directories without a sync, so
// that none is synced between a checkpoint's renames). A failure wraps
// durable.ErrSync.
func (l *Local) SyncCommits(_ context.Context, dir string) error {
	if err := l.dirs.Sync(l.FS, dir); err != nil {
		return fmt.Errorf("commit into %s: %w", dir, err)
	}
	return nil
}

// commitOver handles a final file present with the temp file: the same
// bytes mean an earlier rename landed (temp is deleted), others a conflict.
func (l *Local) commitOver(f committer.File, final string) error {
	tf, err := l.FS.Open(f.Temp)
	if err != nil {
		return fmt.Errorf("commit %s: open temp: %w", f.Final, err)
	}
	same, err := durable.SameContent(l.FS, final, tf)
	_ = tf.Close()
	if err != nil {
		return fmt.Errorf("commit %s: compare: %w", f.Final, err)
	}
	if !same {
		return fmt.Errorf("commit %s: %w", f.Final, committer.ErrConflict)
	}
	if err := l.syncPath(path.Dir(final)); err != nil {
		return fmt.Errorf("commit %s: %w", f.Final, err)
	}
	if err := l.FS.Remove(f.Temp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("commit %s: remove temp: %w", f.Final, err)
	}
	return nil
}

// Abort deletes the temp file. The final name is never touched (I7).
func (l *Local) Abort(_ context.Context, f committer.File) error {
	if err := l.FS.Remove(f.Temp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("abort %s: %w", f.Final, err)
	}
	return nil
}

// Publish writes data to name atomically and create-only.
func (l *Local) Publish(_ context.Context, name string, data []byte) error {
	final := l.abs(name)
	if _, err := l.FS.Stat(final); err == nil {
		// An earlier try may have renamed it without its directory being
		// synced; make the name durable before calling it done.
		if err := l.syncPath(path.Dir(final)); err != nil {
			return fmt.Errorf("publish %s: %w", name, err)
		}
		return fmt.Errorf("publish %s: %w", name, committer.ErrExists)
	}
	tmp := l.publishTemp(name)
	if err := l.dirs.MkdirAll(l.FS, l.Staging); err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	err := durable.WriteFile(l.FS, &l.dirs, tmp, final, data)
	if errors.Is(err, fs.ErrExist) {
		// Published meanwhile; never replaced. As above, its name is made
		// durable before it counts as there.
		if rerr := l.FS.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("publish %s: remove temp: %w", name, rerr)
		}
		if serr := l.syncPath(path.Dir(final)); serr != nil {
			return fmt.Errorf("publish %s: %w", name, serr)
		}
		return fmt.Errorf("publish %s: %w: %w", name, committer.ErrExists, err)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	return nil
}

// Stage writes data to name's publish temp file in the staging directory
// and syncs it: Publish without its rename and directory fsync, which the
// result's Publish does. A crash leaves the temp file, which the replay
// deletes with the other staging files nothing names.
//
// Stage syncs no directory, and so needs the staging directory to exist
// (the engine makes it at start): it runs while a checkpoint's files are
// renamed out of that directory, and a sync of it then would make their
// removal from it durable before their new names are (a power cut would
// lose them, where the file system keeps directories apart).
func (l *Local) Stage(_ context.Context, name string, data []byte) (committer.Staged, error) {
	tmp := l.publishTemp(name)
	if err := durable.WriteTemp(l.FS, tmp, data); err != nil {
		return nil, fmt.Errorf("publish %s: %w", name, err)
	}
	return &staged{l: l, name: name, tmp: tmp}, nil
}

// staged is a publish Stage wrote.
type staged struct {
	l         *Local
	name, tmp string
}

// Publish renames the temp file to the name, never over a file, and syncs
// its directory. A name that exists is ErrExists, as for Local.Publish.
func (s *staged) Publish(_ context.Context) error {
	final := s.l.abs(s.name)
	err := durable.Rename(s.l.FS, &s.l.dirs, s.tmp, final)
	if errors.Is(err, fs.ErrExist) {
		if rerr := s.Discard(); rerr != nil {
			return fmt.Errorf("publish %s: %w", s.name, rerr)
		}
		// Made durable before it counts as there, as in Local.Publish.
		if serr := s.l.syncPath(path.Dir(final)); serr != nil {
			return fmt.Errorf("publish %s: %w", s.name, serr)
		}
		return fmt.Errorf("publish %s: %w: %w", s.name, committer.ErrExists, err)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", s.name, err)
	}
	return nil
}

// Discard removes the temp file; gone already (published) is fine.
func (s *staged) Discard() error {
	if err := s.l.FS.Remove(s.tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("publish %s: remove temp: %w", s.name, err)
	}
	return nil
}

// publishTemp is where Publish and Stage write name before it is renamed.
func (l *Local) publishTemp(name string) string {
	return path.Join(l.Staging, strings.ReplaceAll(name, "/", "_")+".publish"+layout.TempSuffix)
}

// List walks the destination for files under prefix.
func (l *Local) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	prefix = strings.TrimPrefix(prefix, "/")
	root := l.Dest
	// Walk only the deepest directory the prefix names.
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		root = path.Join(l.Dest, prefix[:i])
	}
	var out []committer.Entry
	err := afero.Walk(l.FS, root, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, l.Dest), "/")
		if info.IsDir() {
			if rel != "" && !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !info.Mode().IsRegular() || !strings.HasPrefix(rel, prefix) {
			return nil
		}
		out = append(out, committer.Entry{Path: rel, Bytes: info.Size(), Modified: info.ModTime().UTC()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Remove removes the document name under _forgotten/; gone already is
// done. Its directory is not synced (committer.Remover).
func (l *Local) Remove(_ context.Context, name string) error {
	if !fs.ValidPath(name) || !strings.HasPrefix(name, layout.ForgottenDir+"/") {
		return fmt.Errorf("remove %q: not a document under %s/: %w", name, layout.ForgottenDir, committer.ErrConflict)
	}
	if err := l.noSymlinks(name); errors.Is(err, committer.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := l.FS.Remove(l.abs(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// Open opens a committed file. name must be a clean relative path.
func (l *Local) Open(_ context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, committer.Entry{}, fmt.Errorf("open %q: %w", name, committer.ErrNotFound)
	}
	p := l.abs(name)
	if err := l.noSymlinks(name); err != nil {
		return nil, committer.Entry{}, err
	}
	fi, err := l.FS.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, committer.ErrNotFound)
		}
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, committer.ErrNotFound)
	}
	f, err := l.FS.Open(p)
	if err != nil {
		return nil, committer.Entry{}, fmt.Errorf("open %s: %w", name, err)
	}
	return f, committer.Entry{Path: name, Bytes: fi.Size(), Modified: fi.ModTime().UTC()}, nil
}

// noSymlinks refuses a name any component of which is a symbolic link, so
// a link placed in the destination cannot serve files from outside it.
func (l *Local) noSymlinks(name string) error {
	ls, ok := l.FS.(afero.Lstater)
	if !ok {
		return nil
	}
	p := l.Dest
	for _, part := range strings.Split(name, "/") {
		p = path.Join(p, part)
		fi, _, err := ls.LstatIfPossible(p)
		if err != nil {
			// ENOTDIR: a file where the name needs a directory, so
			// nothing is there.
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("open %s: %w", name, committer.ErrNotFound)
			}
			return fmt.Errorf("open %s: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("open %s: symbolic link refused: %w", name, committer.ErrNotFound)
		}
	}
	return nil
}

// crcOf returns the hex CRC-32C of a file's content.
func crcOf(fsys afero.Fs, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return fmt.Sprintf("%08x", h.Sum32()), nil
}

// syncPath makes an existing final name's directory entry durable: the
// directory itself and, once per process, every ancestor.
func (l *Local) syncPath(dir string) error {
	if err := l.dirs.MkdirAll(l.FS, dir); err != nil {
		return err
	}
	return durable.SyncDir(l.FS, dir)
}

// Move renames the file from to to, never over a file: the rename and
// both directory entries are made durable (to's directory by
// durable.Rename, from's by a sync of its directory). From gone and to
// present is an earlier move: done. Both present with the same bytes is an
// earlier move cut short before from was removed: from is removed.
func (l *Local) Move(_ context.Context, from, to string) error {
	src, dst := l.abs(from), l.abs(to)
	_, serr := l.FS.Stat(src)
	_, derr := l.FS.Stat(dst)
	for _, err := range []error{serr, derr} {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move %s: stat: %w", from, err)
		}
	}
	var err error
	switch {
	case serr == nil && derr != nil:
		err = durable.Rename(l.FS, &l.dirs, src, dst)
		if errors.Is(err, fs.ErrExist) {
			err = l.moveOver(src, dst) // appeared meanwhile
		}
	case serr == nil:
		err = l.moveOver(src, dst)
	case derr != nil:
		err = committer.ErrNotFound
	}
	if err == nil {
		err = durable.SyncDir(l.FS, path.Dir(src))
	}
	if err != nil {
		return fmt.Errorf("move %s: %w", from, err)
	}
	return nil
}

// moveOver finishes a move that finds dst present with src: the same
// bytes mean an earlier rename landed a copy (src is removed), others a
// conflict.
func (l *Local) moveOver(src, dst string) error {
	f, err := l.FS.Open(src)
	if err != nil {
		return err
	}
	same, err := durable.SameContent(l.FS, dst, f)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	if !same {
		return fmt.Errorf("%w: %s holds other content", committer.ErrConflict, dst)
	}
	if err := l.syncPath(path.Dir(dst)); err != nil {
		return err
	}
	if err := l.FS.Remove(src); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}
