package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// MaxNodes bounds the nodes Nodes reports.
const MaxNodes = 1000

// NodeStatus is one node of the destination: one that holds or held a
// lease, or whose manifests are there.
type NodeStatus struct {
	ID           string
	Self         bool // this process's node
	HasLease     bool
	Holder       string // the lease's incarnation: the process holding it
	Listen       string // the holder's listen address
	RenewedAt    time.Time
	ExpiresAt    time.Time
	Live         bool   // the lease has not expired
	LeaseErr     string // the lease could not be read or decoded
	HasManifests bool   // it committed at least one checkpoint
}

// Nodes returns the destination's nodes by id (at most MaxNodes, and
// whether more exist): those with a lease under _nodes/ and those with
// manifests under _manifests/<node>/. A lease is live until its expiry.
// It costs one listing call per node with manifests, plus one read per
// lease.
func (c *Catalog) Nodes(ctx context.Context) ([]NodeStatus, bool, error) {
	by := map[string]*NodeStatus{}
	more := false
	get := func(id string) *NodeStatus {
		if n := by[id]; n != nil {
			return n
		}
		if len(by) == MaxNodes {
			more = true
			return nil
		}
		n := &NodeStatus{ID: id, Self: id == c.node}
		by[id] = n
		return n
	}
	if err := c.leases(ctx, get); err != nil {
		return nil, false, err
	}
	err := c.Walk(ctx, layout.ManifestDir+"/", "", 1, func(e committer.Entry) (string, bool) {
		id, _, ok := strings.Cut(strings.TrimPrefix(e.Path, layout.ManifestDir+"/"), "/")
		if !ok {
			return "", false
		}
		n := get(id)
		if n == nil {
			return "", true
		}
		n.HasManifests = true
		return AfterPast(layout.ManifestDir + "/" + id + "/"), false // one call per node
	})
	if err != nil {
		return nil, false, err
	}
	out := make([]NodeStatus, 0, len(by))
	for _, n := range by {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return out, more, nil
}

// leases reads every lease under _nodes/ into the node get returns (nil
// once there are too many).
func (c *Catalog) leases(ctx context.Context, get func(id string) *NodeStatus) error {
	now := c.now()
	return c.Walk(ctx, layout.LeaseDir+"/", "", ListChunk, func(e committer.Entry) (string, bool) {
		doc, err := c.readLease(ctx, e.Path)
		id := doc.Node
		if err == nil && layout.LeaseName(id) == e.Path {
			// Bounded like every document read from the destination: a
			// planted lease is shown as such, never as a live holder.
			err = layout.CheckLease(e.Path, doc, now)
		}
		if err != nil || layout.LeaseName(id) != e.Path {
			// Not a lease eosink wrote for this name: shown by its name.
			id = strings.TrimSuffix(strings.TrimPrefix(e.Path, layout.LeaseDir+"/"), ".json")
			if err == nil {
				err = fmt.Errorf("lease names node %q", doc.Node)
			}
		}
		n := get(id)
		if n == nil {
			return "", true
		}
		n.HasLease = true
		if err != nil {
			n.LeaseErr = err.Error()
			return "", false
		}
		n.Holder, n.Listen, n.RenewedAt, n.ExpiresAt = doc.Incarnation, doc.Listen, doc.RenewedAt, doc.ExpiresAt
		n.Live = now.Before(doc.ExpiresAt)
		return "", false
	})
}

func (c *Catalog) readLease(ctx context.Context, name string) (layout.Lease, error) {
	rc, _, err := c.files.Open(ctx, name)
	if err != nil {
		return layout.Lease{}, fmt.Errorf("open lease: %w", err)
	}
	defer rc.Close()
	return layout.ReadLease(rc)
}
