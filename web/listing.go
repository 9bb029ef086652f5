package web

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

const (
	// manifestDir is the destination folder of manifests.
	manifestDir = "_manifests/"
	// nodesDir is the destination folder of node leases, not shown.
	nodesDir = "_nodes/"
	// listChunk is how many entries one destination listing call reads.
	listChunk = 1000
	// skipAfter is how many files of one sub-folder a folder page or the
	// streams page reads before it jumps past the rest of that sub-folder
	// with a new listing call: a folder of a few files costs no extra
	// call, a large one costs one call instead of its files.
	skipAfter = 64
)

var (
	// manifestName matches _manifests/<node>/<checkpoint:020d>.json.
	manifestName = regexp.MustCompile(`^_manifests/([^/]+)/([0-9]{20})\.json$`)
	// streamName is DESIGN.md's stream name.
	streamName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
)

// parsePart returns the node and checkpoint in a data file's name,
// part-<node>-<checkpoint:020d>-<index:04d>.<ext>: the regular expression
// partName (in the tests), written out, as listings run it on every file.
// The node may hold '-' and '.', so the last split that fits wins.
func parsePart(p string) (node string, ckpt uint64, ok bool) {
	rest, found := strings.CutPrefix(p[strings.LastIndexByte(p, '/')+1:], "part-")
	if !found {
		return "", 0, false
	}
	for d := strings.LastIndexByte(rest, '.'); d > 0; d = strings.LastIndexByte(rest[:d], '.') {
		if !extChars(rest[d+1:]) {
			return "", 0, false // a longer extension holds the same bad byte
		}
		if d == len(rest)-1 {
			continue
		}
		head := rest[:d] // <node>-<checkpoint:020d>-<index>
		i := strings.LastIndexByte(head, '-')
		if i < 0 || len(head)-i-1 < 4 || !allDigits(head[i+1:]) {
			continue
		}
		head = head[:i]
		if len(head) < 22 || head[len(head)-21] != '-' || !allDigits(head[len(head)-20:]) {
			continue
		}
		id, err := strconv.ParseUint(head[len(head)-20:], 10, 64)
		if err != nil {
			continue
		}
		return head[:len(head)-21], id, true
	}
	return "", 0, false
}

func extChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isDigit(c) && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && c != '.' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// validStream reports whether name is a stream name.
func validStream(name string) bool { return name != ".." && streamName.MatchString(name) }

// manifest is one parsed manifest, its files by path.
type manifest struct {
	Node        string
	Checkpoint  uint64
	CommittedAt time.Time
	Files       map[string]*recovery.ManifestFile
	Paths       []string // the files' paths, sorted
}

// manifestCache holds parsed manifests. Manifests are immutable, so entries
// never go stale; absent manifests are not cached (a file is renamed into
// place a moment before its manifest is published). When full, an
// arbitrary entry is evicted.
type manifestCache struct {
	files committer.Reader
	max   int

	mu sync.Mutex
	m  map[string]*manifest
}

func newManifestCache(files committer.Reader, max int) *manifestCache {
	return &manifestCache{files: files, max: max, m: map[string]*manifest{}}
}

// get returns manifest name, nil if it does not exist (yet).
func (c *manifestCache) get(ctx context.Context, name string) (*manifest, error) {
	c.mu.Lock()
	m, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	doc, err := recovery.ReadManifest(ctx, c.files, name)
	if errors.Is(err, committer.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m = &manifest{Node: doc.Node, Checkpoint: doc.Checkpoint, CommittedAt: doc.CommittedAt, Files: make(map[string]*recovery.ManifestFile, len(doc.Files))}
	for i := range doc.Files {
		m.Files[doc.Files[i].Path] = &doc.Files[i]
		m.Paths = append(m.Paths, doc.Files[i].Path)
	}
	slices.Sort(m.Paths)
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[name] = m
	c.mu.Unlock()
	return m, nil
}

// afterPast returns the smallest cursor that sorts after every path under
// the folder dir ("x/"): '0' is the byte after '/'.
func afterPast(dir string) string { return strings.TrimSuffix(dir, "/") + "0" }

// walk calls fn for each file under prefix that sorts after after, in path
// order, reading the destination chunk entries at a time (at most
// listChunk), until fn says stop. fn may return skip, a cursor to go on from (to pass over a
// folder without reading it). With a committer.Pager a walk costs the
// entries it reads; without, the prefix is listed whole, once.
func walk(ctx context.Context, files committer.Reader, prefix, after string, chunk int,
	fn func(e committer.Entry) (skip string, stop bool)) error {
	chunk = min(max(chunk, 1), listChunk)
	pager, ok := files.(committer.Pager)
	if !ok {
		all, err := files.List(ctx, prefix)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, e := range all {
			if e.Path <= after {
				continue
			}
			skip, stop := fn(e)
			if stop {
				return nil
			}
			after = max(after, skip)
		}
		return nil
	}
	for {
		page, err := pager.ListPage(ctx, prefix, after, chunk)
		if err != nil {
			return fmt.Errorf("list %s after %s: %w", prefix, after, err)
		}
		jumped := false
		for _, e := range page {
			after = e.Path
			skip, stop := fn(e)
			if stop {
				return nil
			}
			if skip > after {
				after, jumped = skip, true
				break
			}
		}
		if !jumped && len(page) < chunk {
			return nil
		}
	}
}

// dirEntry is one row of a folder: a sub-folder or a file.
type dirEntry struct {
	Name     string // without the folder's prefix; no trailing '/'
	Dir      bool
	Bytes    int64 // files only
	Modified time.Time
	Path     string // the full path of a file
}

// cursor is the row's position for the next page's ?after=: a file's name,
// or a folder's name with '/' appended.
func (e dirEntry) cursor() string {
	if e.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// listDir returns up to n rows of folder prefix ("" or ending in '/') whose
// names start with namePrefix and sort after the cursor after (a row's
// cursor; "" for the first page), in path order, and whether more follow.
// Sub-folders come as one row each, however many files they hold; their
// contents are not read beyond skipAfter files.
func listDir(ctx context.Context, files committer.Reader, prefix, namePrefix, after string, n int) (rows []dirEntry, more bool, err error) {
	start := ""
	switch {
	case strings.HasSuffix(after, "/"):
		start = afterPast(prefix + after)
	case after != "":
		start = prefix + after
	}
	seen := 0 // files read of the last sub-folder
	err = walk(ctx, files, prefix+namePrefix, start, n+1, func(e committer.Entry) (string, bool) {
		if strings.HasPrefix(e.Path, nodesDir) {
			return afterPast(nodesDir), false // node leases: not data
		}
		name, _, sub := strings.Cut(e.Path[len(prefix):], "/")
		if sub {
			if k := len(rows); k > 0 && rows[k-1].Dir && rows[k-1].Name == name {
				if seen++; seen >= skipAfter {
					return afterPast(prefix + name + "/"), false
				}
				return "", false
			}
		}
		if len(rows) == n {
			more = true
			return "", true
		}
		if sub {
			rows = append(rows, dirEntry{Name: name, Dir: true})
			seen = 1
			return "", false
		}
		rows = append(rows, dirEntry{Name: name, Bytes: e.Bytes, Modified: e.Modified, Path: e.Path})
		return "", false
	})
	return rows, more, err
}

// streamStat is one stream with its committed files.
type streamStat struct {
	Name     string
	Files    int
	Bytes    int64
	Records  int64
	Unknown  int  // files whose records are unknown
	Capped   bool // the stream holds more files than were counted
	Last     time.Time
	RatePerS float64 // records per second recently
	HasRate  bool
}

// URL is the stream's folder.
func (s streamStat) URL() string { return browseURL(s.Name, true) }

// streamCountCap is how many files of one stream the streams page counts;
// a stream with more shows "at least".
const streamCountCap = 1000

// listStreams returns up to n streams (top-level folders with a stream's
// name) after the stream after, by name, with their files counted up to
// streamCountCap, and whether more follow.
func listStreams(ctx context.Context, files committer.Reader, manifests *manifestCache, after string, n int) (out []streamStat, more bool, err error) {
	start := ""
	if after != "" {
		start = afterPast(after + "/")
	}
	err = walk(ctx, files, "", start, n+1, func(e committer.Entry) (string, bool) {
		name, _, ok := strings.Cut(e.Path, "/")
		if !ok {
			return "", false // nothing eosink wrote
		}
		if !validStream(name) {
			return afterPast(name + "/"), false // manifests, leases, strays
		}
		k := len(out)
		if k == 0 || out[k-1].Name != name {
			if k == n {
				more = true
				return "", true
			}
			out = append(out, streamStat{Name: name})
			k++
		}
		st := &out[k-1]
		if st.Files == streamCountCap {
			st.Capped = true
			return afterPast(name + "/"), false
		}
		st.Files++
		st.Bytes += e.Bytes
		if e.Modified.After(st.Last) {
			st.Last = e.Modified
		}
		if rec, ok := manifests.records(ctx, e.Path); ok {
			st.Records += rec
		} else {
			st.Unknown++
		}
		return "", false
	})
	return out, more, err
}

// records returns a data file's record count from its manifest.
func (c *manifestCache) records(ctx context.Context, p string) (int64, bool) {
	node, ckpt, ok := parsePart(p)
	if !ok || strings.HasPrefix(p, manifestDir) {
		return 0, false
	}
	m, err := c.get(ctx, recovery.ManifestPath(node, ckpt))
	if err != nil || m == nil {
		return 0, false
	}
	mf := m.Files[p]
	if mf == nil {
		return 0, false
	}
	return mf.Records, true
}

// hasDir reports whether the destination holds a file under the folder p
// ("" is the root): one listing call.
func hasDir(ctx context.Context, files committer.Reader, p string) (bool, error) {
	if p == "" {
		return true, nil
	}
	found := false
	err := walk(ctx, files, p+"/", "", 1, func(committer.Entry) (string, bool) {
		found = true
		return "", true
	})
	return found, err
}
