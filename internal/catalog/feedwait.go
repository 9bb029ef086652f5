package catalog

// This file is the feed's long poll: waiting, at a bounded cost, until a
// commit passes a cursor. This node's commits wake waiters at once
// (Notify, the engine's commit hook); other nodes' are found by a poll of
// every node's newest manifests that all waiters share, at most one per
// FeedPoll interval.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultFeedPoll is how often waiters look for other nodes' commits.
const DefaultFeedPoll = 2 * time.Second

// feedWatch is what waiters share: the newest manifest id known of each
// node, and a channel closed when it grows.
type feedWatch struct {
	mu       sync.Mutex
	tips     map[string]uint64
	changed  chan struct{}
	polledAt time.Time
	polling  chan struct{} // non-nil while a poll runs; closed at its end
	nodes    []string      // the nodes with manifests, as listed at nodesAt
	nodesAt  time.Time
}

func newFeedWatch() *feedWatch {
	return &feedWatch{tips: map[string]uint64{}, changed: make(chan struct{})}
}

// raise notes node's manifest id and wakes the waiters if it is new; the
// lock is held.
func (w *feedWatch) raiseLocked(node string, id uint64) {
	if id <= w.tips[node] {
		return
	}
	if _, ok := w.tips[node]; !ok && w.nodes != nil && !slices.Contains(w.nodes, node) {
		// A node's first manifest: followed now, not from the next
		// listing of the nodes.
		w.nodes = append(w.nodes, node)
		slices.Sort(w.nodes)
	}
	w.tips[node] = id
	close(w.changed)
	w.changed = make(chan struct{})
}

// Notify tells the feed's waiters that node committed checkpoint id, its
// manifest published: the engine calls it on every commit. Safe for
// concurrent use; it does not wait.
func (c *Catalog) Notify(node string, id uint64) {
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	c.watch.raiseLocked(node, id)
}

// WaitCommits waits until a commit may have passed cur: this node's
// (Notify) or one a shared poll finds. It returns nil then, ctx's error
// when it ends first.
func (c *Catalog) WaitCommits(ctx context.Context, cur Cursor) error {
	for {
		c.watch.mu.Lock()
		changed := c.watch.changed
		beyond := false
		for node, id := range c.watch.tips {
			if id > cur.At(node) {
				beyond = true
				break
			}
		}
		c.watch.mu.Unlock()
		if beyond {
			return nil
		}
		t := time.NewTimer(c.feedPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-changed:
			t.Stop()
		case <-t.C:
			if err := c.pollTips(ctx, cur); err != nil {
				return err
			}
		}
	}
}

// pollTips reads every node's manifests past what is known (or past cur)
// into the tips, unless a poll ran within the interval; a poll under way
// is waited for, not repeated. It costs two listing calls per node.
func (c *Catalog) pollTips(ctx context.Context, cur Cursor) error {
	w := c.watch
	w.mu.Lock()
	if running := w.polling; running != nil {
		w.mu.Unlock()
		select {
		case <-running:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if time.Since(w.polledAt) < c.feedPoll/2 {
		w.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	w.polling = done
	from := make(map[string]uint64, len(w.tips))
	for n, id := range w.tips {
		from[n] = id
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.polling, w.polledAt = nil, time.Now()
		close(done)
		w.mu.Unlock()
	}()
	nodes, err := c.listNodes(ctx, true)
	if err != nil {
		return fmt.Errorf("poll feed: %w", err)
	}
	for _, n := range nodes {
		after := max(from[n], cur.At(n))
		top := uint64(0)
		for {
			ids, err := c.manifestIDs(ctx, n, after, ListChunk)
			if err != nil {
				return fmt.Errorf("poll feed: %w", err)
			}
			ids, cut, err := c.withinReserved(ctx, n, ids) // feedbound.go
			if err != nil {
				return fmt.Errorf("poll feed: %w", err)
			}
			if len(ids) == 0 {
				break
			}
			top, after = ids[len(ids)-1], ids[len(ids)-1]
			if cut || len(ids) < ListChunk {
				break
			}
		}
		if top > 0 {
			w.mu.Lock()
			w.raiseLocked(n, top)
			w.mu.Unlock()
		}
	}
	return nil
}

// FeedTip returns a cursor at (or near) the end of the feed: the newest
// manifest known of each node. The tips are polled again only when the
// last poll is older than tipAge polls (this node's commits keep them
// fresh through Notify): a page that shows the feed from now on (the UI)
// must not read every node's manifest folder on each load. The first call
// lists every node's manifests once. For a display, not for a consumer:
// a manifest published while a poll listed may be passed over, and a
// cursor a little behind shows a few commits of just before.
func (c *Catalog) FeedTip(ctx context.Context) (Cursor, error) {
	c.watch.mu.Lock()
	stale := time.Since(c.watch.polledAt) > tipAge*c.feedPoll
	c.watch.mu.Unlock()
	if stale {
		if err := c.pollTips(ctx, Cursor{}); err != nil {
			return Cursor{}, err
		}
	}
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	var cur Cursor
	for node, id := range c.watch.tips {
		if len(cur.nodes) == MaxFeedNodes {
			break
		}
		cur = cur.With(node, id)
	}
	return cur, nil
}

// tipAge is how many poll intervals FeedTip uses the tips without a poll.
const tipAge = 10
