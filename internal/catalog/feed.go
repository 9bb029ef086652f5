package catalog

// This file is the commit feed (DESIGN.md "Commit feed"): every committed
// checkpoint of every node, from the manifests under _manifests/<node>/,
// each exactly once along a chain of cursors (cursor.go).
//
// A page, step by step:
//
//  1. Nodes: one listing call per node under _manifests/; a node of the
//     cursor must be there, with the manifest the cursor names.
//  2. Trusted ids, per node: list the ids after the cursor's (L1), then
//     list again (L2) and keep L2's ids up to L1's highest, h. A node
//     publishes in id order, so every id up to h was published before L1
//     ended and L2, which starts after, holds them all: a listing that
//     runs while a manifest is published (a directory read in several
//     steps) can show id n+1 without n, and the cursor would pass n.
//  3. Merge: the nodes' ids, each node in id order, oldest commit first
//     across nodes, reading one manifest per node ahead (through the
//     manifest cache).
//  4. Bound: at most limit manifests looked at, and the page's files
//     within MaxFiles and MaxBytes; a commit is never split between pages,
//     but the first commit of a page that alone is over the bounds is
//     given with as many files as fit and Truncated set (its manifest
//     names them all).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// Bounds of a feed page's files, when FeedQuery leaves them zero.
const (
	DefaultFeedFiles = 10000
	DefaultFeedBytes = 4 << 20
)

// Estimated answer bytes of a commit and of one of its files, beside
// their strings.
const (
	feedCommitBytes = 192
	feedFileBytes   = 80
)

// FeedQuery selects a page of the commit feed.
type FeedQuery struct {
	After Cursor
	// Limit bounds the commits of the page and the manifests it looks at
	// (at least 1).
	Limit int
	// Stream keeps only the commits with files of this stream, and of
	// them only those files; "" keeps all. The cursor passes the others.
	Stream string
	// MaxFiles and MaxBytes bound the files of a page, by count and by
	// their estimated answer bytes; defaults DefaultFeedFiles and
	// DefaultFeedBytes.
	MaxFiles int
	MaxBytes int
}

// FeedFile is one file of a commit.
type FeedFile struct {
	Path    string
	Stream  string
	Records int64
	Bytes   int64
}

// FeedCommit is one committed checkpoint of one node.
type FeedCommit struct {
	Node        string
	Checkpoint  uint64
	CommittedAt time.Time
	Manifest    string // the manifest's path
	Files       []FeedFile
	// FileCount is how many files the commit has (of Stream, when set);
	// -1 when its manifest is too large to read (Truncated is then set).
	FileCount int
	// Truncated: Files holds only the first files by path; the manifest
	// names them all.
	Truncated bool
}

// FeedPage is one page of the feed.
type FeedPage struct {
	Commits []FeedCommit
	Next    Cursor // the position after this page
	// More: the page stopped at a bound, and more commits are there now.
	More bool
}

// feedNode is one node's trusted ids past the cursor, read in order.
type feedNode struct {
	node string
	ids  []uint64
	full bool // the listing stopped at the limit: more may follow
	doc  *ManifestDoc
	err  error  // ErrManifestTooLarge for the head
	skip uint64 // the last id passed over as no manifest (loadHead)
}

// Commits returns a page of the commit feed after q.After. Errors wrap
// ErrBadCursor when the cursor names a node or manifest the destination
// lacks, ErrTooManyNodes past MaxFeedNodes.
func (c *Catalog) Commits(ctx context.Context, q FeedQuery) (FeedPage, error) {
	limit := max(q.Limit, 1)
	maxFiles := cmp.Or(q.MaxFiles, DefaultFeedFiles)
	maxBytes := cmp.Or(q.MaxBytes, DefaultFeedBytes)
	// 1. Nodes.
	nodes, err := c.feedNodes(ctx, q.After)
	if err != nil {
		return FeedPage{}, err
	}
	// 2. Trusted ids past the cursor.
	heads := make([]*feedNode, 0, len(nodes))
	for _, n := range nodes {
		ids, full, err := c.trustedIDs(ctx, n, q.After.At(n), limit)
		if err != nil {
			return FeedPage{}, err
		}
		if len(ids) > 0 {
			heads = append(heads, &feedNode{node: n, ids: ids, full: full})
		}
	}
	// 3. Merge, 4. bound.
	page := FeedPage{Commits: []FeedCommit{}, Next: q.After}
	files, bytes := 0, 0
	for scanned := 0; scanned < limit; scanned++ {
		h, err := c.nextHead(ctx, heads)
		if err != nil {
			return FeedPage{}, err
		}
		if h == nil {
			break
		}
		fc, ok := feedCommit(h, q.Stream)
		if ok {
			cost := feedCommitBytes + len(fc.Manifest)
			for _, f := range fc.Files {
				cost += feedFileBytes + len(f.Path) + len(f.Stream)
			}
			if files+len(fc.Files) > maxFiles || bytes+cost > maxBytes {
				if len(page.Commits) > 0 {
					page.More = true
					break
				}
				fc = truncate(fc, maxFiles, maxBytes)
			}
			files += len(fc.Files)
			bytes += cost
			page.Commits = append(page.Commits, fc)
		}
		page.Next = page.Next.With(h.node, h.ids[0])
		h.ids, h.doc, h.err = h.ids[1:], nil, nil
	}
	for _, h := range heads {
		if h.skip > page.Next.At(h.node) {
			page.Next = page.Next.With(h.node, h.skip)
		}
		if len(h.ids) > 0 || h.full {
			page.More = true
		}
	}
	return page, nil
}

// feedNodes returns the nodes with manifests, by id: those a listing
// found within the poll interval (listNodes), and every node of cur,
// which must hold the manifest cur names. A node that appears between
// listings is in the next page's: its commits come later, none is passed.
func (c *Catalog) feedNodes(ctx context.Context, cur Cursor) ([]string, error) {
	nodes, err := c.listNodes(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, n := range cur.nodes {
		m, err := c.manifests.get(ctx, layout.ManifestName(n.Node, n.ID))
		switch {
		case m == nil && err == nil:
			return nil, fmt.Errorf("%w: it names checkpoint %d of node %s, whose manifest is not in this destination", ErrBadCursor, n.ID, n.Node)
		case err != nil && !errors.Is(err, layout.ErrBadManifest) && !errors.Is(err, ErrManifestTooLarge):
			return nil, fmt.Errorf("check cursor: %w", err)
		}
		if !slices.Contains(nodes, n.Node) {
			nodes = append(nodes, n.Node)
		}
	}
	if len(nodes) > MaxFeedNodes {
		return nil, fmt.Errorf("%w: manifests of more than %d nodes", ErrTooManyNodes, MaxFeedNodes)
	}
	slices.Sort(nodes)
	return nodes, nil
}

// listNodes returns the nodes with manifests, one listing call each, kept
// for the poll interval unless fresh: a node's folder is read whole by
// some destinations to find its first name.
func (c *Catalog) listNodes(ctx context.Context, fresh bool) ([]string, error) {
	w := c.watch
	w.mu.Lock()
	if !fresh && w.nodes != nil && time.Since(w.nodesAt) < c.feedPoll {
		nodes := slices.Clone(w.nodes)
		w.mu.Unlock()
		return nodes, nil
	}
	w.mu.Unlock()
	nodes := []string{}
	err := c.Walk(ctx, layout.ManifestDir+"/", "", 1, func(e committer.Entry) (string, bool) {
		id, _, ok := strings.Cut(strings.TrimPrefix(e.Path, layout.ManifestDir+"/"), "/")
		if !ok || !layout.Node(id) {
			return "", false // not eosink's: no node writes there
		}
		nodes = append(nodes, id)
		if len(nodes) > MaxFeedNodes {
			return "", true
		}
		return AfterPast(layout.ManifestDir + "/" + id + "/"), false
	})
	if err != nil {
		return nil, fmt.Errorf("list feed nodes: %w", err)
	}
	if len(nodes) > MaxFeedNodes {
		return nil, fmt.Errorf("%w: manifests of more than %d nodes", ErrTooManyNodes, MaxFeedNodes)
	}
	w.mu.Lock()
	w.nodes, w.nodesAt = nodes, time.Now()
	w.mu.Unlock()
	return slices.Clone(nodes), nil
}

// trustedIDs returns up to limit ids of node's manifests after after, in
// order, that every later listing will show too (step 2), and whether the
// listing stopped at limit.
func (c *Catalog) trustedIDs(ctx context.Context, node string, after uint64, limit int) ([]uint64, bool, error) {
	first, err := c.manifestIDs(ctx, node, after, limit)
	if err != nil || len(first) == 0 {
		return nil, false, err
	}
	full := len(first) == limit
	first, cut, err := c.withinReserved(ctx, node, first) // feedbound.go
	if err != nil || len(first) == 0 {
		return nil, false, err
	}
	full = full && !cut // beyond the bound: nothing more now
	h := first[len(first)-1]
	second, err := c.manifestIDs(ctx, node, after, limit)
	if err != nil {
		return nil, false, err
	}
	i := len(second)
	for i > 0 && second[i-1] > h {
		i--
	}
	return second[:i], full, nil
}

// manifestIDs lists up to limit ids of node's manifests after after.
func (c *Catalog) manifestIDs(ctx context.Context, node string, after uint64, limit int) ([]uint64, error) {
	start := ""
	if after > 0 {
		start = layout.ManifestName(node, after)
	}
	var ids []uint64
	err := c.Walk(ctx, layout.ManifestDir+"/"+node+"/", start, limit, func(e committer.Entry) (string, bool) {
		n, id, ok := layout.ParseManifestName(e.Path)
		if !ok || n != node || id <= after {
			return "", false
		}
		ids = append(ids, id)
		return "", len(ids) == limit
	})
	if err != nil {
		return nil, fmt.Errorf("list manifests of node %s: %w", node, err)
	}
	return ids, nil
}

// nextHead reads the manifest at the head of every node that lacks it,
// passing over documents that are not manifests, and returns the node
// whose head committed first (then by node id); nil when none is left.
func (c *Catalog) nextHead(ctx context.Context, heads []*feedNode) (*feedNode, error) {
	var best *feedNode
	for _, h := range heads {
		for h.doc == nil && h.err == nil && len(h.ids) > 0 {
			if err := c.loadHead(ctx, h); err != nil {
				return nil, err
			}
		}
		if len(h.ids) == 0 {
			continue
		}
		if best == nil || headAt(h).Before(headAt(best)) || (headAt(h).Equal(headAt(best)) && h.node < best.node) {
			best = h
		}
	}
	return best, nil
}

func headAt(h *feedNode) time.Time {
	if h.doc == nil {
		return time.Time{} // unreadable: its time is unknown
	}
	return h.doc.CommittedAt
}

// loadHead reads h's head manifest into h.doc (or h.err, when it is too
// large to read), or drops the head when no manifest is there: a document
// that is not a manifest (read twice, so that a read cut short is not
// taken for one) or, against I7, one gone since the listing.
func (c *Catalog) loadHead(ctx context.Context, h *feedNode) error {
	name := layout.ManifestName(h.node, h.ids[0])
	m, err := c.manifests.get(ctx, name)
	if errors.Is(err, layout.ErrBadManifest) {
		_, err = c.manifests.load(ctx, name)
	}
	switch {
	case errors.Is(err, ErrManifestTooLarge):
		h.err = err
	case errors.Is(err, layout.ErrBadManifest), err == nil && m == nil:
		c.log.Warn("commit feed passes over a document that is not a manifest", "path", name, "err", err)
		h.skip, h.ids = h.ids[0], h.ids[1:]
	case err != nil:
		return fmt.Errorf("read feed manifest: %w", err)
	default:
		h.doc = m
	}
	return nil
}

// feedCommit returns h's head as a commit, its files those of stream (all
// when ""); false when it has no file of stream.
func feedCommit(h *feedNode, stream string) (FeedCommit, bool) {
	fc := FeedCommit{Node: h.node, Checkpoint: h.ids[0], Manifest: layout.ManifestName(h.node, h.ids[0]), Files: []FeedFile{}}
	if h.doc == nil {
		fc.FileCount, fc.Truncated = -1, true
		return fc, true // too large to read: whether it holds stream is unknown
	}
	fc.CommittedAt = h.doc.CommittedAt
	for _, p := range h.doc.Paths {
		f := h.doc.Files[p]
		if stream != "" && f.Stream != stream {
			continue
		}
		fc.Files = append(fc.Files, FeedFile{Path: f.Path, Stream: f.Stream, Records: f.Records, Bytes: f.Bytes})
	}
	fc.FileCount = len(fc.Files)
	return fc, stream == "" || len(fc.Files) > 0
}

// truncate keeps the first files of fc that fit the bounds.
func truncate(fc FeedCommit, maxFiles, maxBytes int) FeedCommit {
	bytes := feedCommitBytes + len(fc.Manifest)
	n := 0
	for n < len(fc.Files) && n < maxFiles {
		f := fc.Files[n]
		if bytes+feedFileBytes+len(f.Path)+len(f.Stream) > maxBytes {
			break
		}
		bytes += feedFileBytes + len(f.Path) + len(f.Stream)
		n++
	}
	fc.Files, fc.Truncated = fc.Files[:n], true
	return fc
}
