package catalog

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

// ManifestDoc is one parsed manifest, its files by path.
type ManifestDoc struct {
	Node        string
	Checkpoint  uint64
	CommittedAt time.Time
	Files       map[string]*recovery.ManifestFile
	Paths       []string // the files' paths, sorted
	Bytes       int64    // the estimated memory it holds (its cache cost)
}

// Records returns the record count of file p, false if the manifest does
// not name it.
func (m *ManifestDoc) Records(p string) (int64, bool) {
	if m == nil {
		return 0, false
	}
	f := m.Files[p]
	if f == nil {
		return 0, false
	}
	return f.Records, true
}

// Estimated memory of a parsed manifest: a map entry, a pointer and the
// struct per file, plus its strings and producer ranges.
const (
	manifestOverhead = 256
	fileOverhead     = 160
	producerOverhead = 64
	rangeBytes       = 16
)

// manifestCost estimates the bytes m holds in memory.
func manifestCost(m *recovery.Manifest) int64 {
	n := int64(manifestOverhead + len(m.Node))
	for i := range m.Files {
		f := &m.Files[i]
		// The path is held twice: the map key shares it, Paths shares it,
		// but the slice header and map slot are extra.
		n += fileOverhead + int64(len(f.Path)+len(f.Stream)+len(f.CRC32C))
		for id, rs := range f.Producers {
			n += producerOverhead + int64(len(id)+rangeBytes*len(rs))
		}
	}
	return n
}

// manifestCache holds parsed manifests, least recently used evicted first
// once their estimated bytes pass max. A manifest larger than max is
// returned but not kept.
type manifestCache struct {
	files Reader
	max   int64

	mu    sync.Mutex
	bytes int64
	lru   *list.List               // of *ManifestDoc, most recent at the front
	m     map[string]*list.Element // manifest path -> element
}

func newManifestCache(files Reader, max int64) *manifestCache {
	return &manifestCache{files: files, max: max, lru: list.New(), m: map[string]*list.Element{}}
}

// get returns manifest name, nil if it does not exist (yet): a file is
// renamed into place a moment before its manifest is published, so an
// absent manifest is not cached.
func (c *manifestCache) get(ctx context.Context, name string) (*ManifestDoc, error) {
	c.mu.Lock()
	if el, ok := c.m[name]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*ManifestDoc), nil
	}
	c.mu.Unlock()
	m, err := c.load(ctx, name)
	if m == nil || err != nil {
		return nil, err
	}
	c.put(name, m)
	return m, nil
}

// load reads and parses manifest name without caching it; nil if absent.
func (c *manifestCache) load(ctx context.Context, name string) (*ManifestDoc, error) {
	doc, err := recovery.ReadManifest(ctx, c.files, name)
	if errors.Is(err, committer.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m := &ManifestDoc{Node: doc.Node, Checkpoint: doc.Checkpoint, CommittedAt: doc.CommittedAt,
		Files: make(map[string]*recovery.ManifestFile, len(doc.Files)), Paths: make([]string, 0, len(doc.Files)),
		Bytes: manifestCost(doc)}
	for i := range doc.Files {
		m.Files[doc.Files[i].Path] = &doc.Files[i]
		m.Paths = append(m.Paths, doc.Files[i].Path)
	}
	slices.Sort(m.Paths)
	return m, nil
}

func (c *manifestCache) put(name string, m *ManifestDoc) {
	if m.Bytes > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[name]; ok {
		return // a concurrent get loaded it too
	}
	c.m[name] = c.lru.PushFront(m)
	c.bytes += m.Bytes
	for c.bytes > c.max {
		el := c.lru.Back()
		old := el.Value.(*ManifestDoc)
		c.lru.Remove(el)
		delete(c.m, recovery.ManifestPath(old.Node, old.Checkpoint))
		c.bytes -= old.Bytes
	}
}

// stats returns how many manifests the cache holds and their bytes.
func (c *manifestCache) stats() (n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}

// Manifest returns node's manifest of checkpoint id, through the cache;
// nil if it does not exist (yet).
func (c *Catalog) Manifest(ctx context.Context, node string, id uint64) (*ManifestDoc, error) {
	return c.manifests.get(ctx, recovery.ManifestPath(node, id))
}

// Records returns a committed data file's record count from its manifest;
// false if p is not a part file or its manifest does not name it. An
// unreadable manifest is logged: a listing still answers without counts.
func (c *Catalog) Records(ctx context.Context, p string) (int64, bool) {
	n := ParsePath(p)
	if n.Kind != Part {
		return 0, false
	}
	m, err := c.Manifest(ctx, n.Node, n.Checkpoint)
	if err != nil {
		c.log.Warn("records unknown", "path", p, "op", "read manifest", "err", err)
		return 0, false
	}
	return m.Records(p)
}
