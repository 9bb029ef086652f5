package catalog

// This file answers "where did my batch go": which committed file holds a
// producer's batch, from the manifests' exact sequence ranges.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/eosink/eosink/internal/layout"
)

// DefaultSeqScan bounds the manifests one LocateSeq reads.
const DefaultSeqScan = 10000

// SeqLocation is one committed file holding a producer's batch.
type SeqLocation struct {
	Node        string
	Checkpoint  uint64
	CommittedAt time.Time
	Manifest    string
	Path        string
	// First and Last bound the range of the producer's sequence numbers
	// in the file that holds the batch.
	First, Last int64
	// Epoch and Incarnation are the producer's as of the checkpoint
	// (HasEpoch false in manifests written before they were kept). A
	// producer deleted and created again is a new incarnation: its
	// sequence numbers start again at 0.
	Epoch, Incarnation int64
	HasEpoch           bool
}

// LocateSeq returns every committed file that holds batch seq of producer
// on stream, newest incarnation first (then newest checkpoint): one per
// incarnation and node that committed such a batch. It reads every
// node's manifests newest first, at most budget of them in all (split
// among the nodes; DefaultSeqScan when <= 0), through the manifest
// cache; complete is false when it stopped at that bound before the
// oldest manifest.
func (c *Catalog) LocateSeq(ctx context.Context, producer, stream string, seq int64, budget int) (locs []SeqLocation, complete bool, err error) {
	if budget <= 0 {
		budget = DefaultSeqScan
	}
	nodes, err := c.listNodes(ctx, true) // a question asked now: the nodes now
	if err != nil {
		return nil, false, err
	}
	complete = true
	for _, node := range nodes {
		per := max(budget/len(nodes), 100)
		var ids []uint64
		for after := uint64(0); ; {
			page, err := c.manifestIDs(ctx, node, after, ListChunk)
			if err != nil {
				return nil, false, err
			}
			ids = append(ids, page...)
			if len(page) < ListChunk {
				break
			}
			after = page[len(page)-1]
		}
		if len(ids) > per {
			ids, complete = ids[len(ids)-per:], false
		}
		for _, id := range slices.Backward(ids) {
			m, err := c.manifests.get(ctx, layout.ManifestName(node, id))
			switch {
			case errors.Is(err, layout.ErrBadManifest), errors.Is(err, ErrManifestTooLarge):
				complete = complete && !errors.Is(err, ErrManifestTooLarge)
				continue
			case err != nil:
				return nil, false, fmt.Errorf("locate seq: %w", err)
			case m == nil:
				continue
			}
			for _, p := range m.Paths {
				f := m.Files[p]
				if f.Stream != stream {
					continue
				}
				for _, r := range f.Producers[producer] {
					if seq < r[0] || seq > r[1] {
						continue
					}
					ep, has := f.Epochs[producer]
					locs = append(locs, SeqLocation{Node: node, Checkpoint: id, CommittedAt: m.CommittedAt, Manifest: layout.ManifestName(node, id),
						Path: f.Path, First: r[0], Last: r[1], Epoch: ep.Epoch, Incarnation: ep.Incarnation, HasEpoch: has})
				}
			}
		}
	}
	slices.SortStableFunc(locs, func(a, b SeqLocation) int {
		if a.Incarnation != b.Incarnation {
			return cmp.Compare(b.Incarnation, a.Incarnation)
		}
		return b.CommittedAt.Compare(a.CommittedAt)
	})
	return locs, complete, nil
}
