package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
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
	// buildTimeout bounds one listing of the destination.
	buildTimeout = 2 * time.Minute
	// maxDirViews bounds the folder views kept per listing.
	maxDirViews = 64
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
	}
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

// fileEntry is one file of the destination.
type fileEntry struct {
	Path     string
	Bytes    int64
	Modified time.Time
	Node     string // from the name; "" for files not named by eosink
	Ckpt     uint64
	HasCkpt  bool
	Records  int64 // -1 when its manifest is missing or unreadable
}

// snapshot is one listing of the whole destination, with record counts
// from the manifests. It is immutable but for its lazily built views.
type snapshot struct {
	at    time.Time   // when the destination was listed
	files []fileEntry // sorted by path

	streamsOnce sync.Once
	streams     []streamStat

	mu   sync.Mutex
	dirs map[string]*dirView
}

// listingCache keeps the newest snapshot, the destination as of the
// engine's last finished checkpoint (its key).
//
// Listing a large destination is slow (100,000 S3 objects take a hundred
// list calls), so a new key does not list again: the checkpoints since the
// snapshot's key are read from the state store and their files (and
// manifests) merged in; empty and aborted checkpoints change nothing. Only
// a snapshot older than maxAge is listed again, in the background while
// the old one keeps serving, since other nodes may share the destination.
// A page asking for a path the snapshot lacks lists again at once when the
// snapshot is older than a moment (relistAfter).
type listingCache struct {
	files     committer.Reader
	store     Store
	manifests *manifestCache
	maxAge    time.Duration
	now       func() time.Time
	log       *slog.Logger

	build sync.Mutex // one listing or merge at a time; key changes under it
	mu    sync.Mutex // guards what follows
	cur   *snapshot
	key   uint64 // every checkpoint up to key is in cur
	bg    bool   // a background listing runs
}

// maxMerge bounds the checkpoints merged into a snapshot; beyond it the
// destination is listed again.
const maxMerge = 256

// errRelist means a snapshot cannot be brought forward from the store.
var errRelist = errors.New("list the destination again")

func newListingCache(files committer.Reader, store Store, m *manifestCache, maxAge time.Duration, now func() time.Time, log *slog.Logger) *listingCache {
	return &listingCache{files: files, store: store, manifests: m, maxAge: maxAge, now: now, log: log}
}

// get returns a snapshot holding every checkpoint up to key. With minAge >
// 0 (a page asking for a path the snapshot lacks), a snapshot listed
// minAge ago or earlier is listed again first.
func (c *listingCache) get(ctx context.Context, key uint64, minAge time.Duration) (*snapshot, error) {
	current := func() (*snapshot, bool) {
		c.mu.Lock()
		s, k := c.cur, c.key
		c.mu.Unlock()
		if s == nil || k < key {
			return s, false
		}
		if minAge > 0 && c.now().Sub(s.at) >= minAge {
			return s, false
		}
		return s, true
	}
	if s, ok := current(); ok {
		if minAge == 0 && c.now().Sub(s.at) >= c.maxAge {
			c.relistInBackground()
		}
		return s, nil
	}
	c.build.Lock()
	defer c.build.Unlock()
	s, ok := current()
	if ok {
		return s, nil
	}
	// The work serves every waiting request: a client that goes away must
	// not cancel it for the others.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	defer cancel()
	if s != nil && minAge == 0 {
		c.mu.Lock()
		from := c.key
		c.mu.Unlock()
		next, err := c.merge(bctx, s, from, key)
		if err == nil {
			c.set(next, key)
			return next, nil
		}
		if !errors.Is(err, errRelist) {
			c.log.Warn("merge checkpoints into the listing", "op", "list destination", "checkpoint", key, "err", err)
		}
	}
	next, err := c.take(bctx)
	if err != nil {
		return nil, err
	}
	c.set(next, key)
	return next, nil
}

func (c *listingCache) set(s *snapshot, key uint64) {
	c.mu.Lock()
	c.cur, c.key = s, max(key, c.key)
	c.mu.Unlock()
}

// relistInBackground lists the destination again unless a listing runs;
// requests go on with the current snapshot meanwhile.
func (c *listingCache) relistInBackground() {
	c.mu.Lock()
	if c.bg {
		c.mu.Unlock()
		return
	}
	c.bg = true
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.bg = false
			c.mu.Unlock()
		}()
		c.build.Lock()
		defer c.build.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		s, err := c.take(ctx)
		if err != nil {
			c.log.Warn("list destination", "op", "refresh listing", "err", err)
			return
		}
		// The key cannot move while the build lock is held, and a listing
		// taken now holds everything up to it.
		c.mu.Lock()
		c.cur = s
		c.mu.Unlock()
	}()
}

// merge returns s with the files of checkpoints (from, to] added, read
// from the state store, and their manifests. It returns errRelist when the
// store cannot tell (too many checkpoints, details pruned, one missing).
func (c *listingCache) merge(ctx context.Context, s *snapshot, from, to uint64) (*snapshot, error) {
	if to-from > maxMerge {
		return nil, errRelist
	}
	var add []fileEntry
	for id := from + 1; id <= to; id++ {
		ck, err := c.store.Get(id)
		if errors.Is(err, recovery.ErrNotFound) {
			// Not recorded: a checkpoint with nothing to commit, or an id
			// skipped at a restart. Files reach the destination only after
			// their checkpoint's "prepared" record, so none of it is there.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", id, err)
		}
		if ck.State != recovery.Committed || max(ck.FileCount, len(ck.Files)) == 0 {
			continue // nothing reached the destination
		}
		if len(ck.Files) == 0 {
			return nil, errRelist // details pruned
		}
		at := ck.CommittedAt
		if at.IsZero() {
			at = ck.PreparedAt
		}
		node := ""
		for _, f := range ck.Files {
			fe := fileEntry{Path: f.Final, Bytes: f.Bytes, Modified: at.UTC(), Records: f.Records}
			if n, id, ok := parsePart(f.Final); ok {
				fe.Node, fe.Ckpt, fe.HasCkpt, node = n, id, true, n
			}
			add = append(add, fe)
		}
		if node == "" {
			continue
		}
		name := recovery.ManifestPath(node, id)
		rc, ent, err := c.files.Open(ctx, name)
		if err != nil {
			if errors.Is(err, committer.ErrNotFound) {
				return nil, errRelist
			}
			return nil, fmt.Errorf("open manifest %s: %w", name, err)
		}
		_ = rc.Close()
		add = append(add, fileEntry{Path: name, Bytes: ent.Bytes, Modified: ent.Modified, Node: node, Ckpt: id, HasCkpt: true, Records: -1})
	}
	if len(add) == 0 {
		return s, nil
	}
	return s.with(add), nil
}

// with returns a new snapshot of s's files and add, add replacing files of
// the same path.
func (s *snapshot) with(add []fileEntry) *snapshot {
	byPath := func(a, b fileEntry) int { return strings.Compare(a.Path, b.Path) }
	slices.SortStableFunc(add, byPath)
	add = slices.CompactFunc(add, func(a, b fileEntry) bool { return a.Path == b.Path })
	files := make([]fileEntry, 0, len(s.files)+len(add))
	i, j := 0, 0
	for i < len(s.files) || j < len(add) {
		switch {
		case j == len(add) || i < len(s.files) && s.files[i].Path < add[j].Path:
			files = append(files, s.files[i])
			i++
		case i == len(s.files) || add[j].Path < s.files[i].Path:
			files = append(files, add[j])
			j++
		default: // the same path: the store's word wins
			files = append(files, add[j])
			i, j = i+1, j+1
		}
	}
	return &snapshot{at: s.at, files: files, dirs: map[string]*dirView{}}
}

// take lists the destination and reads the manifests it needs.
func (c *listingCache) take(ctx context.Context) (*snapshot, error) {
	at := c.now()
	entries, err := c.files.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list destination: %w", err)
	}
	s := &snapshot{at: at, files: make([]fileEntry, 0, len(entries)), dirs: map[string]*dirView{}}
	var (
		lastNode string
		lastCkpt uint64
		last     *manifest
		warned   bool
	)
	for _, e := range entries {
		if strings.HasPrefix(e.Path, "_nodes/") {
			continue // node leases: not data
		}
		f := fileEntry{Path: e.Path, Bytes: e.Bytes, Modified: e.Modified, Records: -1}
		if m := manifestName.FindStringSubmatch(e.Path); m != nil {
			f.Node = m[1]
			f.Ckpt, _ = strconv.ParseUint(m[2], 10, 64)
			f.HasCkpt = true
		} else if node, id, ok := parsePart(e.Path); ok && !strings.HasPrefix(e.Path, manifestDir) {
			f.Node, f.Ckpt, f.HasCkpt = node, id, true
			if node != lastNode || id != lastCkpt || last == nil && lastNode == "" {
				name := recovery.ManifestPath(node, id)
				last, err = c.manifests.get(ctx, name)
				if err != nil {
					if ctx.Err() != nil {
						return nil, fmt.Errorf("list destination: %w", ctx.Err())
					}
					if !warned {
						c.log.Warn("records unknown", "path", e.Path, "op", "read manifest", "err", err)
						warned = true
					}
					last = nil
				}
				lastNode, lastCkpt = node, id
			}
			if last != nil {
				if mf := last.Files[e.Path]; mf != nil {
					f.Records = mf.Records
				}
			}
		}
		s.files = append(s.files, f)
	}
	// Readers sort by path already; do not trust it for binary search.
	if !slices.IsSortedFunc(s.files, func(a, b fileEntry) int { return strings.Compare(a.Path, b.Path) }) {
		slices.SortFunc(s.files, func(a, b fileEntry) int { return strings.Compare(a.Path, b.Path) })
	}
	return s, nil
}

// find returns the file at p.
func (s *snapshot) find(p string) (*fileEntry, bool) {
	i, ok := slices.BinarySearchFunc(s.files, p, func(f fileEntry, p string) int { return strings.Compare(f.Path, p) })
	if !ok {
		return nil, false
	}
	return &s.files[i], true
}

// hasDir reports whether some file lies under folder p ("" is the root).
func (s *snapshot) hasDir(p string) bool {
	if p == "" {
		return true
	}
	prefix := p + "/"
	i := sort.Search(len(s.files), func(i int) bool { return s.files[i].Path >= prefix })
	return i < len(s.files) && strings.HasPrefix(s.files[i].Path, prefix)
}

// streamStat is one stream with its committed files.
type streamStat struct {
	Name     string
	Files    int
	Bytes    int64
	Records  int64
	Unknown  int // files whose records are unknown
	Last     time.Time
	RatePerS float64 // records per second recently, set by the overview
	HasRate  bool
}

// URL is the stream's folder.
func (s streamStat) URL() string { return browseURL(s.Name, true) }

// streamStats returns the destination's streams, sorted by name.
func (s *snapshot) streamStats() []streamStat {
	s.streamsOnce.Do(func() {
		by := map[string]*streamStat{}
		var names []string
		for i := range s.files {
			f := &s.files[i]
			name, _, ok := strings.Cut(f.Path, "/")
			if !ok || !validStream(name) {
				continue
			}
			st := by[name]
			if st == nil {
				st = &streamStat{Name: name}
				by[name] = st
				names = append(names, name)
			}
			st.Files++
			st.Bytes += f.Bytes
			if f.Records >= 0 {
				st.Records += f.Records
			} else {
				st.Unknown++
			}
			if f.Modified.After(st.Last) {
				st.Last = f.Modified
			}
		}
		slices.Sort(names)
		for _, n := range names {
			s.streams = append(s.streams, *by[n])
		}
	})
	return slices.Clone(s.streams)
}

// dirEntry is one row of a folder: a sub-folder or a file.
type dirEntry struct {
	Name     string
	Dir      bool
	Files    int   // files beneath, for a folder
	Bytes    int64 // total beneath, for a folder
	Records  int64 // total known beneath, for a folder; -1 unknown for a file
	Modified time.Time
	file     int // index in snapshot.files; -1 for folders
	lower    string
}

// dirView is one folder's rows: folders first, then files, each by name;
// orders by other keys are built on first use.
type dirView struct {
	entries []dirEntry
	folders int

	mu     sync.Mutex
	orders map[string][]int32
}

// dir returns the view of folder p ("" is the root), nil if it is empty.
func (s *snapshot) dir(p string) *dirView {
	prefix := ""
	if p != "" {
		prefix = p + "/"
	}
	s.mu.Lock()
	d, ok := s.dirs[prefix]
	s.mu.Unlock()
	if ok {
		return d
	}
	lo := sort.Search(len(s.files), func(i int) bool { return s.files[i].Path >= prefix })
	hi := lo + sort.Search(len(s.files)-lo, func(i int) bool { return !strings.HasPrefix(s.files[lo+i].Path, prefix) })
	var dirs []dirEntry
	files := make([]dirEntry, 0, hi-lo)
	for i := lo; i < hi; i++ {
		f := &s.files[i]
		rest := f.Path[len(prefix):]
		name, _, sub := strings.Cut(rest, "/")
		if !sub {
			files = append(files, dirEntry{Name: name, Files: 1, Bytes: f.Bytes, Records: f.Records, Modified: f.Modified, file: i, lower: strings.ToLower(name)})
			continue
		}
		if n := len(dirs); n == 0 || dirs[n-1].Name != name {
			dirs = append(dirs, dirEntry{Name: name, Dir: true, file: -1, lower: strings.ToLower(name)})
		}
		e := &dirs[len(dirs)-1]
		e.Files++
		e.Bytes += f.Bytes
		if f.Records > 0 {
			e.Records += f.Records
		}
		if f.Modified.After(e.Modified) {
			e.Modified = f.Modified
		}
	}
	if len(dirs)+len(files) == 0 {
		return nil
	}
	entries := files
	if len(dirs) > 0 {
		entries = append(dirs, files...)
	}
	d = &dirView{entries: entries, folders: len(dirs), orders: map[string][]int32{}}
	s.mu.Lock()
	if len(s.dirs) >= maxDirViews {
		for k := range s.dirs {
			delete(s.dirs, k)
			break
		}
	}
	s.dirs[prefix] = d
	s.mu.Unlock()
	return d
}

// Sort keys of a folder.
const (
	sortName = "name"
	sortSize = "size"
	sortTime = "time"
)

// order returns the rows' indexes sorted by key, folders first.
func (d *dirView) order(key string, desc bool) []int32 {
	id := key
	if desc {
		id += "-"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if o, ok := d.orders[id]; ok {
		return o
	}
	o := make([]int32, len(d.entries))
	for i := range o {
		o[i] = int32(i)
	}
	byKey := func(a, b int32) int {
		x, y := &d.entries[a], &d.entries[b]
		var c int
		switch key {
		case sortSize:
			c = cmp.Compare(x.Bytes, y.Bytes)
		case sortTime:
			c = x.Modified.Compare(y.Modified)
		}
		if c == 0 {
			c = cmp.Compare(a, b) // name order
		}
		if desc {
			c = -c
		}
		return c
	}
	slices.SortFunc(o[:d.folders], byKey)
	slices.SortFunc(o[d.folders:], byKey)
	d.orders[id] = o
	return o
}

// window returns the rows at [off, off+n) of the rows whose name holds
// filter (lower case), in order, and how many rows match in all.
func (d *dirView) window(order []int32, filter string, off, n int) (rows []*dirEntry, total int) {
	for _, i := range order {
		e := &d.entries[i]
		if filter != "" && !strings.Contains(e.lower, filter) {
			continue
		}
		if total >= off && len(rows) < n {
			rows = append(rows, e)
		}
		total++
	}
	return rows, total
}
