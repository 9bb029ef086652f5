package local

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/spf13/afero"
)

// ListPage walks the destination in path order, entering only the
// directories that can hold a path under prefix and after after, and stops
// at limit files. A directory's names are read (without a stat each) and
// sorted once, then kept while its modification time stays the same; a
// page seeks to after in them and stats only the files it returns. So a
// page costs its files, plus one stat per directory on its way, once the
// directories are cached.
func (l *Local) ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	prefix = strings.TrimPrefix(prefix, "/")
	if limit <= 0 {
		return nil, nil
	}
	var out []committer.Entry
	if err := l.walkPage(ctx, "", prefix, after, limit, &out); err != nil && !errors.Is(err, errPageFull) {
		return nil, fmt.Errorf("list page %s after %s: %w", prefix, after, err)
	}
	return out, nil
}

// errPageFull stops walkPage once the page holds limit files.
var errPageFull = errors.New("page full")

// walkPage appends to out the files under dir (relative, "" or ending in
// "/") in path order. A directory d's paths all start with "d/", so its
// entries are visited in the order of name+"/" for directories and name for
// files: that is the byte order of the full paths.
func (l *Local) walkPage(ctx context.Context, dir, prefix, after string, limit int, out *[]committer.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	keys, err := l.sortedNames(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Every key before the name of after's entry in dir sorts before
	// after and holds nothing past it: seek.
	start := 0
	if rest, ok := strings.CutPrefix(after, dir); ok && rest != "" {
		name, _, _ := strings.Cut(rest, "/")
		start = sort.SearchStrings(keys, dir+name)
	}
	for _, key := range keys[start:] {
		if strings.HasSuffix(key, "/") {
			// Enter only a directory that can hold a path under prefix
			// and past after.
			if !strings.HasPrefix(key, prefix) && !strings.HasPrefix(prefix, key) {
				continue
			}
			if key < after && !strings.HasPrefix(after, key) {
				continue
			}
			if err := l.walkPage(ctx, key, prefix, after, limit, out); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(key, prefix) || key <= after {
			continue
		}
		fi, err := lstat(l.FS, l.abs(key))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the directory was read
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		*out = append(*out, committer.Entry{Path: key, Bytes: fi.Size(), Modified: fi.ModTime().UTC()})
		if len(*out) >= limit {
			return errPageFull
		}
	}
	return nil
}

func lstat(fsys afero.Fs, name string) (fs.FileInfo, error) {
	if ls, ok := fsys.(afero.Lstater); ok {
		fi, _, err := ls.LstatIfPossible(name)
		return fi, err
	}
	return fsys.Stat(name)
}

// sortedNames returns the entries of directory dir (relative, "" or ending
// in "/") as destination paths, a directory's with "/" appended, sorted:
// from the cache while the directory's modification time is the one it
// was read at, else read (names and types, no stat per entry) and cached.
// Only the OS file system is cached: it moves a directory's modification
// time when an entry is added or removed, which afero's MemMapFs does not.
func (l *Local) sortedNames(dir string) ([]string, error) {
	abs := path.Join(l.Dest, dir)
	if l.FS.Name() != "OsFs" {
		return readNames(l.FS, abs, dir)
	}
	fi, err := l.FS.Stat(abs)
	if err != nil {
		return nil, err
	}
	if keys, ok := l.names.get(abs, fi.ModTime()); ok {
		return keys, nil
	}
	keys, err := readNames(l.FS, abs, dir)
	if err != nil {
		return nil, err
	}
	// A directory changed within the clock's resolution of its listing
	// may change again with the same time (racy git's rule): not cached.
	if time.Since(fi.ModTime()) > racyWindow {
		l.names.put(abs, fi.ModTime(), keys)
	}
	return keys, nil
}

// racyWindow is how old a directory's modification time must be for its
// listing to be cached: coarser than any filesystem's timestamps.
const racyWindow = 2 * time.Second

// readDirer is an afero.File that reads entries with their types and no
// stat each (*os.File).
type readDirer interface {
	ReadDir(n int) ([]fs.DirEntry, error)
}

// readNames reads directory abs whose destination path is dir, sorted.
func readNames(fsys afero.Fs, abs, dir string) ([]string, error) {
	f, err := fsys.Open(abs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	if rd, ok := f.(readDirer); ok {
		ents, err := rd.ReadDir(-1)
		if err != nil {
			return nil, err
		}
		keys = keysOf(dir, ents)
	} else {
		infos, err := f.Readdir(-1)
		if err != nil {
			return nil, err
		}
		keys = keysOf(dir, infos)
	}
	sort.Strings(keys)
	return keys, nil
}

// keysOf returns the keys of directory dir's entries, whether read as
// fs.DirEntry or as fs.FileInfo.
func keysOf[E interface {
	Name() string
	IsDir() bool
}](dir string, ents []E) []string {
	keys := make([]string, 0, len(ents))
	for _, e := range ents {
		keys = append(keys, key(dir, e.Name(), e.IsDir()))
	}
	return keys
}

func key(dir, name string, isDir bool) string {
	if isDir {
		return dir + name + "/"
	}
	return dir + name
}

// defaultCachedNames bounds the names the directory cache holds, about
// 100 bytes each.
const defaultCachedNames = 1 << 20

// nameCache holds sorted directory listings, least recently used evicted
// first once they hold more than max names. Safe for concurrent use.
type nameCache struct {
	max int

	mu    sync.Mutex
	names int
	lru   *list.List // of *dirNames, most recent first
	m     map[string]*list.Element
}

type dirNames struct {
	abs  string
	mod  time.Time
	keys []string
}

func newNameCache(max int) *nameCache {
	return &nameCache{max: max, lru: list.New(), m: map[string]*list.Element{}}
}

func (c *nameCache) get(abs string, mod time.Time) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[abs]
	if !ok {
		return nil, false
	}
	d := el.Value.(*dirNames)
	if !d.mod.Equal(mod) {
		c.removeLocked(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return d.keys, true
}

func (c *nameCache) put(abs string, mod time.Time, keys []string) {
	if len(keys) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[abs]; ok {
		c.removeLocked(el)
	}
	c.m[abs] = c.lru.PushFront(&dirNames{abs: abs, mod: mod, keys: keys})
	c.names += len(keys)
	for c.names > c.max {
		c.removeLocked(c.lru.Back())
	}
}

func (c *nameCache) removeLocked(el *list.Element) {
	d := el.Value.(*dirNames)
	c.lru.Remove(el)
	delete(c.m, d.abs)
	c.names -= len(d.keys)
}
