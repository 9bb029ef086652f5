package catalog

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
)

// TestFeedPlantedHighIDKeepsLaterCommits: a document planted at a
// manifest name far above a live node's ids (anyone who can write the
// destination; I13) — one that does not parse, names another node, or
// checks as a manifest of no files — must not move a follower's cursor
// past the node's later real commits: a consumer that follows the cursor
// would never read them (the downstream half of exactly-once). The node's
// lease says which ids it reserved (I8): ids above are not the node's
// yet. Failed before: the cursor went to 2^40 and commit a/2 never came.
func TestFeedPlantedHighIDKeepsLaterCommits(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":       `not json`,
		"another node's": `{"checkpoint": 1099511627776, "node": "b", "files": []}`,
		"no files":       `{"checkpoint": 1099511627776, "node": "a", "committed_at": "2026-12-01T00:00:00Z", "files": []}`,
	} {
		t.Run(name, func(t *testing.T) {
			d := newDest(t)
			now := time.Now()
			b, err := json.Marshal(layout.Lease{Node: "a", Incarnation: "i1", RenewedAt: now, ExpiresAt: now.Add(30 * time.Second), Reserved: 64})
			if err != nil {
				t.Fatal(err)
			}
			d.write(layout.LeaseName("a"), b)
			d.commit("a", 1, 1, "clicks")
			d.write(layout.ManifestName("a", 1<<40), []byte(doc))
			c := newFeedCatalog(t, d)
			got, cur := follow(t, c, Cursor{}, FeedQuery{Limit: 10})
			checkOnce(t, got, map[string]bool{"a/1": true})
			d.commit("a", 2, 1, "clicks")
			wctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			err = c.WaitCommits(wctx, cur) // the poll finds a/2 within a poll interval
			cancel()
			if err != nil {
				t.Errorf("a waiter after a/2 was committed: %v", err)
			}
			got, cur = follow(t, c, cur, FeedQuery{Limit: 1})
			if len(got) != 1 || got[0] != "a/2" {
				t.Fatalf("after the planted document (cursor %v), the feed gives %v; want a/2, committed since", cur.Nodes(), got)
			}
			if tip, err := c.FeedTip(t.Context()); err != nil || tip.At("a") != 2 {
				t.Fatalf("feed tip %v, %v; want node a at 2", tip.Nodes(), err)
			}
		})
	}
}
