package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// The feed's bound on a node's manifest ids (I13). A cursor passes every
// id it has given or passed over, and never comes back below it, so a
// document planted at a manifest name far above a node's ids (a garbage
// one passed over, or one that checks as a manifest) would move every
// follower's cursor past the node's later commits for good. A node
// records the ids it reserved in its lease before it uses them (I8), so
// the feed takes a node's ids up to its lease's reserved_checkpoint only:
// one above it is left for later (a delay, never a loss), and no cursor
// passes it. The lease is read only when a listing goes beyond the
// reserved id last read. A node without a lease that checks (a
// destination that keeps none, a lease of an older version without the
// field) is not bounded, unless an earlier read found one.

// reservedIDs remembers, per node, the reserved id of its lease as last
// read.
type reservedIDs struct {
	mu sync.Mutex
	m  map[string]uint64
}

// withinReserved returns ids (ascending) up to node's reserved id, and
// whether any was dropped.
func (c *Catalog) withinReserved(ctx context.Context, node string, ids []uint64) ([]uint64, bool, error) {
	if len(ids) == 0 {
		return ids, false, nil
	}
	c.reserved.mu.Lock()
	r := c.reserved.m[node]
	c.reserved.mu.Unlock()
	if top := ids[len(ids)-1]; r == 0 || top > r {
		read, err := c.leaseReserved(ctx, node)
		if err != nil {
			return nil, false, err
		}
		if read > r {
			r = read
			c.reserved.mu.Lock()
			if c.reserved.m == nil {
				c.reserved.m = map[string]uint64{}
			}
			c.reserved.m[node] = max(c.reserved.m[node], r)
			c.reserved.mu.Unlock()
		}
	}
	if r == 0 {
		return ids, false, nil // no bound known
	}
	i := len(ids)
	for i > 0 && ids[i-1] > r {
		i--
	}
	return ids[:i], i < len(ids), nil
}

// leaseReserved reads node's lease and returns its reserved id; 0 when
// there is no lease or it does not check. An error is the destination's.
func (c *Catalog) leaseReserved(ctx context.Context, node string) (uint64, error) {
	name := layout.LeaseName(node)
	rc, _, err := c.files.Open(ctx, name)
	if errors.Is(err, committer.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open lease of node %s: %w", node, err)
	}
	defer rc.Close()
	l, err := layout.ReadLease(rc)
	if err == nil {
		err = layout.CheckLease(name, l, c.now())
	}
	if err != nil {
		return 0, nil // not a lease that checks: no bound from it
	}
	return l.Reserved, nil
}
