package catalog

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// ManifestDoc is one parsed manifest, its files by path.
type ManifestDoc struct {
	Node        string
	Checkpoint  uint64
	CommittedAt time.Time
	Files       map[string]*layout.ManifestFile
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
func manifestCost(m *layout.Manifest) int64 {
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

// ErrManifestTooLarge: a manifest is larger than the manifest cache, as a
// file or once parsed. Its files' record counts are unknown to listings.
var ErrManifestTooLarge = errors.New("manifest too large for the manifest cache")

// maxTooLarge bounds the names of too-large manifests remembered.
const maxTooLarge = 4096

// manifestCache holds parsed manifests, least recently used evicted first
// once their estimated bytes pass max. A manifest larger than max, as a
// file or parsed, is refused with ErrManifestTooLarge and remembered so
// (manifests never change, I7): a listing that counts its files would
// otherwise read and parse it again for each of them.
type manifestCache struct {
	files Reader
	max   int64
	log   *slog.Logger

	mu       sync.Mutex
	bytes    int64
	lru      *list.List               // of *ManifestDoc, most recent at the front
	m        map[string]*list.Element // manifest path -> element
	tooLarge map[string]struct{}      // manifest paths over max
}

func newManifestCache(files Reader, max int64, log *slog.Logger) *manifestCache {
	return &manifestCache{files: files, max: max, log: log, lru: list.New(), m: map[string]*list.Element{}, tooLarge: map[string]struct{}{}}
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
	if _, ok := c.tooLarge[name]; ok {
		c.mu.Unlock()
		return nil, fmt.Errorf("read manifest %s: %w (%d bytes)", name, ErrManifestTooLarge, c.max)
	}
	c.mu.Unlock()
	m, err := c.load(ctx, name)
	if err == nil && m != nil && m.Bytes > c.max {
		err = fmt.Errorf("read manifest %s: %w: it takes %d bytes parsed, the cache %d", name, ErrManifestTooLarge, m.Bytes, c.max)
	}
	if errors.Is(err, ErrManifestTooLarge) {
		c.markTooLarge(name, err)
		return nil, err
	}
	if m == nil || err != nil {
		return nil, err
	}
	c.put(name, m)
	return m, nil
}

// markTooLarge remembers that manifest name is over the cache, and says so
// once.
func (c *manifestCache) markTooLarge(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.tooLarge[name]; ok {
		return
	}
	if len(c.tooLarge) >= maxTooLarge {
		for k := range c.tooLarge { // any one: it is only read again
			delete(c.tooLarge, k)
			break
		}
	}
	c.tooLarge[name] = struct{}{}
	c.log.Warn("manifest not cached: its files' records are unknown to listings", "path", name, "err", err)
}

// load reads and parses manifest name without caching it; nil if absent.
// A file over the cache's bytes is not parsed at all.
func (c *manifestCache) load(ctx context.Context, name string) (*ManifestDoc, error) {
	rc, ent, err := c.files.Open(ctx, name)
	if errors.Is(err, committer.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: open manifest: %w", name, err)
	}
	defer rc.Close()
	if ent.Bytes > c.max {
		return nil, fmt.Errorf("read manifest %s: %w: %d bytes, the cache %d", name, ErrManifestTooLarge, ent.Bytes, c.max)
	}
	doc, err := layout.DecodeManifest(name, rc)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m := &ManifestDoc{Node: doc.Node, Checkpoint: doc.Checkpoint, CommittedAt: doc.CommittedAt,
		Files: make(map[string]*layout.ManifestFile, len(doc.Files)), Paths: make([]string, 0, len(doc.Files)),
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
		delete(c.m, layout.ManifestName(old.Node, old.Checkpoint))
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
	return c.manifests.get(ctx, layout.ManifestName(node, id))
}

// Records returns a committed data file's record count from its manifest;
// false if p is not a part file or its manifest does not name it. An
// unreadable manifest is logged: a listing still answers without counts.
func (c *Catalog) Records(ctx context.Context, p string) (int64, bool) {
	n := layout.ParsePath(p)
	if n.Kind != layout.PartPath {
		return 0, false
	}
	m, err := c.Manifest(ctx, n.Node, n.Checkpoint)
	if errors.Is(err, ErrManifestTooLarge) {
		return 0, false // said once, by the cache
	}
	if err != nil {
		c.log.Warn("records unknown", "path", p, "op", "read manifest", "err", err)
		return 0, false
	}
	return m.Records(p)
}
