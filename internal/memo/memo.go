// Package memo keeps answers derived from the state store until the store
// changes: a list or page polled in a loop is computed once per change of
// the state it reads, not once per poll, so readers cost the ingest path
// (the CPU it shares with them, the garbage it collects after them) about
// what a probe costs.
//
// A cache is told the store's version with every lookup (the version is
// taken before the state is read, so an answer is never older than the
// version it is kept under); a new version empties it. It is bounded by an
// estimate of its bytes. Concurrent lookups of the same missing key compute
// it once.
package memo

import (
	"strconv"
	"sync"

	"golang.org/x/sync/singleflight"
)

// Cache keeps values of type V by key for one version at a time.
type Cache[V any] struct {
	maxBytes int
	group    singleflight.Group

	mu      sync.Mutex
	version uint64
	bytes   int
	m       map[string]entry[V]
}

type entry[V any] struct {
	v    V
	size int
}

// New returns a cache holding at most about maxBytes (by the sizes its
// compute functions report).
func New[V any](maxBytes int) *Cache[V] {
	return &Cache[V]{maxBytes: maxBytes, m: map[string]entry[V]{}}
}

// Get returns the value of key at version: the kept one, or the one
// compute returns with its size in bytes. A value computed with an error
// is returned with it and not kept; nor is one larger than the cache.
func (c *Cache[V]) Get(version uint64, key string, compute func() (V, int, error)) (V, error) {
	c.mu.Lock()
	if version != c.version {
		c.reset(version)
	}
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return e.v, nil
	}
	type result struct {
		v   V
		err error
	}
	// The version is part of the flight's key: a lookup at a newer version
	// never waits for, nor gets, an answer computed at an older one.
	r, _, _ := c.group.Do(strconv.FormatUint(version, 10)+"\x00"+key, func() (any, error) {
		v, size, err := compute()
		if err == nil && size <= c.maxBytes {
			c.put(version, key, entry[V]{v: v, size: size})
		}
		return result{v, err}, nil
	})
	res := r.(result)
	return res.v, res.err
}

func (c *Cache[V]) put(version uint64, key string, e entry[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case version < c.version:
		return // the store changed meanwhile: the value is already old
	case version > c.version:
		c.reset(version)
	}
	if old, ok := c.m[key]; ok {
		c.bytes -= old.size
	}
	for k, old := range c.m { // make room: any entry will do
		if c.bytes+e.size <= c.maxBytes {
			break
		}
		delete(c.m, k)
		c.bytes -= old.size
	}
	c.m[key] = e
	c.bytes += e.size
}

// reset empties the cache for version; c.mu is held.
func (c *Cache[V]) reset(version uint64) {
	if version < c.version {
		return // a lookup that read the version before a newer one arrived
	}
	clear(c.m)
	c.bytes, c.version = 0, version
}
