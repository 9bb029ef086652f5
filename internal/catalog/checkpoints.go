package catalog

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
	"github.com/eosink/eosink/recovery"
)

// RateWindow is the least time an ingest rate is measured over.
const RateWindow = time.Minute

// ActiveQuery bounds Active.
type ActiveQuery struct {
	Checkpoints int // newest committed checkpoints with files read at most
	Files       int // stop once about this many files are read
}

// Active returns the streams of the files of the newest committed
// checkpoints in cs (this node's, newest first, without files, as
// Checkpoints returns them), reading at most q.Checkpoints rows and about
// q.Files files from the state. They come most recently committed first,
// with their committed records per second over the checkpoints of the
// last RateWindow or more: the files of those checkpoints, over the time
// between their barriers.
func (c *Catalog) Active(cs []Checkpoint, q ActiveQuery) ([]StreamStat, error) {
	rateIDs, span := rateCheckpoints(cs)
	by := map[string]*StreamStat{}
	var out []*StreamStat
	read, files := 0, 0
	for i := range cs {
		ck := &cs[i]
		if ck.State != Committed || ck.FileCount == 0 {
			continue
		}
		if read == q.Checkpoints || files >= q.Files {
			break
		}
		full, err := c.state.CheckpointRecord(ck.ID)
		if errors.Is(err, recovery.ErrNotFound) {
			continue // pruned since the list was taken
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", ck.ID, err)
		}
		read++
		at := full.CommittedAt
		if at.IsZero() {
			at = full.PreparedAt
		}
		_, inRate := slices.BinarySearch(rateIDs, ck.ID)
		for _, f := range full.Files {
			files++
			st := by[f.Stream]
			if st == nil {
				st = &StreamStat{Name: f.Stream, HasRate: span > 0}
				by[f.Stream] = st
				out = append(out, st)
			}
			st.Files++
			st.Bytes += f.Bytes
			st.Records += f.Records
			if at.After(st.Last) {
				st.Last = at
			}
			if inRate && span > 0 {
				st.RatePerS += float64(f.Records) / span
			}
		}
	}
	res := make([]StreamStat, 0, len(out))
	for _, st := range out {
		res = append(res, *st)
	}
	// Newest checkpoint first, so the order is the last commit's, then the
	// busier stream, then the name.
	slices.SortStableFunc(res, func(a, b StreamStat) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Records, a.Records); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return res, nil
}

// rateCheckpoints returns the committed checkpoints (ids, sorted) whose
// files make the per-stream rates, and the seconds they span: those of the
// last RateWindow or more of barriers, the oldest barrier bounding the
// window (its own files came before it).
func rateCheckpoints(cs []Checkpoint) ([]uint64, float64) {
	var ids []uint64
	var first, last time.Time
	for i := range cs {
		c := &cs[i]
		if c.StartedAt.IsZero() {
			continue
		}
		if last.IsZero() {
			last = c.StartedAt
		}
		first = c.StartedAt
		if last.Sub(c.StartedAt) >= RateWindow {
			break
		}
		if c.State == Committed && c.FileCount > 0 {
			ids = append(ids, c.ID)
		}
	}
	span := last.Sub(first).Seconds()
	if span <= 0 {
		return nil, 0
	}
	if n := len(ids); n > 0 && cs[len(cs)-1].StartedAt.Equal(first) && ids[n-1] == cs[len(cs)-1].ID {
		ids = ids[:n-1]
	}
	slices.Sort(ids)
	return ids, span
}

// NodeCheckpoint is one checkpoint of a node as its manifest tells it.
type NodeCheckpoint struct {
	Node        string
	ID          uint64
	Path        string // the manifest's path
	Bytes       int64  // the manifest's own size
	CommittedAt time.Time
	Files       int
	Records     int64
	DataBytes   int64 // the bytes of its files
	Err         string
}

// NodeCheckpoints returns up to limit checkpoints of node from its
// manifests under _manifests/<node>/, by id, those after the id after
// (0: from the first), and whether more follow: the checkpoints of any
// node, this one's included, read from the destination. Each manifest is
// read through the cache.
func (c *Catalog) NodeCheckpoints(ctx context.Context, node string, after uint64, limit int) ([]NodeCheckpoint, bool, error) {
	prefix := layout.ManifestDir + "/" + node + "/"
	start := ""
	if after > 0 {
		start = layout.ManifestName(node, after)
	}
	limit = max(limit, 1)
	var out []NodeCheckpoint
	more := false
	err := c.Walk(ctx, prefix, start, limit+1, func(e committer.Entry) (string, bool) {
		n := layout.ParsePath(e.Path)
		if n.Kind != layout.ManifestPath || n.Node != node {
			return "", false
		}
		if len(out) == limit {
			more = true
			return "", true
		}
		nc := NodeCheckpoint{Node: node, ID: n.Checkpoint, Path: e.Path, Bytes: e.Bytes}
		m, err := c.manifests.get(ctx, e.Path)
		switch {
		case err != nil:
			nc.Err = err.Error()
		case m != nil:
			nc.CommittedAt, nc.Files = m.CommittedAt, len(m.Paths)
			for _, f := range m.Files {
				nc.Records += f.Records
				nc.DataBytes += f.Bytes
			}
		}
		out = append(out, nc)
		return "", false
	})
	return out, more, err
}
