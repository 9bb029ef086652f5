package catalog

import (
	"encoding/json"

	"context"
	"errors"
	"fmt"
	"github.com/eosink/eosink/internal/layout"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTwoNodes: one destination holding two nodes' checkpoints, as two
// nodes behind a load balancer leave it. Every read covers both nodes.
func TestTwoNodes(t *testing.T) {
	d := newDest(t)
	a1 := d.commit("node-a", 1, 3, "clicks", "logs")
	b1 := d.commit("node-b", 1, 2, "clicks")
	a2 := d.commit("node-a", 2, 1, "clicks")
	b7 := d.commit("node-b", 7, 4, "orders")
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	d.lease("node-a", "inc-a", "10.0.0.1:8080", now.Add(20*time.Second))
	d.lease("node-b", "inc-b", "10.0.0.2:8080", now.Add(-time.Minute))
	c := d.catalog(Config{Node: "node-a", Now: func() time.Time { return now }})
	ctx := t.Context()

	t.Run("files", func(t *testing.T) {
		files, next, err := c.Files(ctx, FileQuery{Limit: 100})
		if err != nil || next != "" {
			t.Fatalf("files: next %q, %v", next, err)
		}
		want := slices.Sorted(slices.Values(slices.Concat(a1, b1, a2, b7)))
		var got []string
		for _, f := range files {
			got = append(got, f.Path)
			n := layout.ParsePath(f.Path)
			if f.Name != n || n.Kind != layout.PartPath || !f.HasRecords {
				t.Errorf("%s: name %+v records %d %v", f.Path, f.Name, f.Records, f.HasRecords)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("files %v, want %v (manifests and leases not listed)", got, want)
		}
		// Node b's records come from node b's manifests.
		for _, f := range files {
			if f.Path == b7[0] && f.Records != 4 || f.Path == b1[0] && f.Records != 2 {
				t.Errorf("%s: %d records", f.Path, f.Records)
			}
		}
		only, _, err := c.Files(ctx, FileQuery{Limit: 100, Node: "node-b"})
		if err != nil || len(only) != 2 || only[0].Path != b1[0] || only[1].Path != b7[0] {
			t.Fatalf("node-b's files: %+v, %v", only, err)
		}
		man, _, err := c.Files(ctx, FileQuery{Prefix: "_manifests/", Limit: 100})
		if err != nil || len(man) != 4 || man[2].Name != (layout.PathName{Kind: layout.ManifestPath, Node: "node-b", Checkpoint: 1}) {
			t.Fatalf("manifests: %+v, %v", man, err)
		}
	})
	t.Run("paging", func(t *testing.T) {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			files, next, err := c.Files(ctx, FileQuery{After: after, Limit: 2})
			if err != nil || pages > 10 || len(files) > 2 {
				t.Fatalf("page %d: %d files, %v", pages, len(files), err)
			}
			for _, f := range files {
				got = append(got, f.Path)
			}
			if next == "" {
				break
			}
			after = next
		}
		if len(got) != 5 || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != 5 {
			t.Fatalf("paged %v, want each of 5 files once", got)
		}
	})
	t.Run("streams", func(t *testing.T) {
		st, more, err := c.Streams(ctx, "", 10, 0)
		if err != nil || more || len(st) != 3 {
			t.Fatalf("streams %+v more %v: %v", st, more, err)
		}
		if clicks := st[0]; clicks.Name != "clicks" || clicks.Files != 3 || clicks.Records != 3+2+1 || clicks.Unknown != 0 {
			t.Errorf("clicks: %+v", clicks)
		}
	})
	t.Run("nodes", func(t *testing.T) {
		ns, more, err := c.Nodes(ctx)
		if err != nil || more || len(ns) != 2 {
			t.Fatalf("nodes %+v: %v", ns, err)
		}
		a, b := ns[0], ns[1]
		if a.ID != "node-a" || !a.Self || !a.HasLease || !a.Live || a.Holder != "inc-a" || a.Listen != "10.0.0.1:8080" || !a.HasManifests {
			t.Errorf("node-a: %+v", a)
		}
		if b.ID != "node-b" || b.Self || !b.HasLease || b.Live || b.Holder != "inc-b" || !b.HasManifests {
			t.Errorf("node-b (expired): %+v", b)
		}
	})
	t.Run("node checkpoints", func(t *testing.T) {
		cs, more, err := c.NodeCheckpoints(ctx, "node-b", 0, 1)
		if err != nil || !more || len(cs) != 1 || cs[0].ID != 1 || cs[0].Files != 1 || cs[0].Records != 2 {
			t.Fatalf("first page %+v more %v: %v", cs, more, err)
		}
		cs, more, err = c.NodeCheckpoints(ctx, "node-b", cs[0].ID, 1)
		if err != nil || more || len(cs) != 1 || cs[0].ID != 7 || cs[0].Records != 4 {
			t.Fatalf("second page %+v more %v: %v", cs, more, err)
		}
	})
	t.Run("verify", func(t *testing.T) {
		rep, err := c.Verify(ctx, nil)
		if err != nil || len(rep.Problems) != 0 || rep.Manifests != 4 || rep.Files != 5 {
			t.Fatalf("report %+v: %v", rep, err)
		}
		// A bad file of the other node is found: verify covers every node.
		d.write(b7[0], []byte("{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":9}\n"))
		rep, err = c.Verify(ctx, nil)
		if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Path != b7[0] || !strings.Contains(rep.Problems[0].What, "crc32c") {
			t.Fatalf("report %+v: %v", rep, err)
		}
	})
}

// TestVerifyProblems: each kind of problem is reported, as `eosink
// verify` always did.
func TestVerifyProblems(t *testing.T) {
	d := newDest(t)
	p := d.commit("n1", 1, 2, "a", "b", "c")
	d.commit("n2", 3, 1, "d")
	d.write(p[0], []byte("{\"n\":0}\n{\"n\":1}\n{\"x\":1}\n")) // size differs
	if err := d.fs.Remove(tDest + "/" + p[1]); err != nil {    // missing
		t.Fatal(err)
	}
	d.write("a/stray.ndjson", []byte("{}\n"))                                     // in no manifest
	d.write("a/part-x.ndjson.inprogress", []byte("{}\n"))                         // temp file
	d.write(layout.ManifestName("n3", 4), []byte("{"))                            // not JSON
	d.write(layout.ManifestName("n4", 5), []byte(`{"checkpoint":6,"node":"n4"}`)) // misplaced
	d.write("_nodes/n1.json", []byte("{}"))                                       // a lease: not data
	d.write("_streams/a.json", []byte("{}"))                                      // a stream's configuration: not data
	rep, err := d.catalog(Config{}).Verify(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		p[0]:                         "bytes, manifest says",
		p[1]:                         "missing (named by _manifests/n1/",
		"a/stray.ndjson":             "in no manifest",
		"a/part-x.ndjson.inprogress": "temp file in the destination",
		layout.ManifestName("n3", 4): "not valid JSON",
		layout.ManifestName("n4", 5): "belongs at",
	}
	if len(rep.Problems) != len(want) {
		t.Errorf("%d problems, want %d: %+v", len(rep.Problems), len(want), rep.Problems)
	}
	for _, pr := range rep.Problems {
		if w, ok := want[pr.Path]; !ok || !strings.Contains(pr.What, w) {
			t.Errorf("problem %s: %q, want it to say %q", pr.Path, pr.What, w)
		}
	}
	if rep.Files != 2 || rep.Manifests != 4 {
		t.Errorf("verified %d files of %d manifests, want 2 of 4", rep.Files, rep.Manifests)
	}
}

// TestManifestCacheBoundedByBytes: the cache holds manifests up to a byte
// budget, not a count: many large manifests do not hold more than it,
// the most recently used stay, and one larger than the budget is read but
// not kept.
func TestManifestCacheBoundedByBytes(t *testing.T) {
	d := newDest(t)
	streams := make([]string, 50)
	for i := range streams {
		streams[i] = fmt.Sprintf("stream-%02d", i)
	}
	for id := uint64(1); id <= 40; id++ {
		d.commit("n1", id, 1, streams...)
	}
	one, err := newManifestCache(d.local, 1<<40, slog.New(slog.DiscardHandler)).load(t.Context(), layout.ManifestName("n1", 1))
	if err != nil || one == nil || one.Bytes < 50*fileOverhead {
		t.Fatalf("one manifest: %+v, %v", one, err)
	}
	budget := 10*one.Bytes + one.Bytes/2 // room for 10 of them
	c := d.catalog(Config{ManifestBytes: budget})
	ctx := context.Background()
	for id := uint64(1); id <= 40; id++ {
		m, err := c.Manifest(ctx, "n1", id)
		if err != nil || m == nil || len(m.Paths) != 50 {
			t.Fatalf("manifest %d: %v", id, err)
		}
		if _, err := c.Manifest(ctx, "n1", 35); id > 35 && err != nil { // keep 35 in use
			t.Fatal(err)
		}
		if n, b := c.manifests.stats(); b > budget || n > 10 {
			t.Fatalf("after %d manifests the cache holds %d of %d bytes (%d manifests), over its budget", id, b, budget, n)
		}
	}
	if n, _ := c.manifests.stats(); n != 10 {
		t.Errorf("the cache holds %d manifests, want 10", n)
	}
	c.manifests.mu.Lock()
	_, has35 := c.manifests.m[layout.ManifestName("n1", 35)]
	_, has1 := c.manifests.m[layout.ManifestName("n1", 1)]
	c.manifests.mu.Unlock()
	if !has35 || has1 {
		t.Errorf("recently used 35 kept: %v; oldest 1 evicted: %v", has35, !has1)
	}
	// A manifest over the budget is refused (TestManifestTooLargeReadOnce).
	small := d.catalog(Config{ManifestBytes: one.Bytes / 2})
	if m, err := small.Manifest(ctx, "n1", 1); !errors.Is(err, ErrManifestTooLarge) || m != nil {
		t.Fatalf("a manifest over the budget: %v %v, want ErrManifestTooLarge", m, err)
	}
	if n, b := small.manifests.stats(); n != 0 || b != 0 {
		t.Errorf("a manifest over the budget is kept: %d, %d bytes", n, b)
	}
	// An absent manifest is not cached: it may be published a moment later.
	if m, err := c.Manifest(ctx, "n1", 99); m != nil || err != nil {
		t.Fatalf("absent manifest: %v %v", m, err)
	}
	d.commit("n1", 99, 1, "late")
	if m, err := c.Manifest(ctx, "n1", 99); m == nil || err != nil {
		t.Fatalf("manifest published later: %v %v", m, err)
	}
}

// A lease planted by another writer of the bucket (an expiry in 9999,
// ids near 2^64) is shown as not valid, never as a live holder. Failed
// before: the node showed live until 9999.
func TestPlantedLeaseIsNotLive(t *testing.T) {
	d := newDest(t)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	b, err := json.Marshal(map[string]any{"node": "n9", "incarnation": "x", "renewed_at": now.Add(-time.Second),
		"expires_at": time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "reserved_checkpoint": uint64(1<<64 - 1)})
	if err != nil {
		t.Fatal(err)
	}
	d.write(layout.LeaseName("n9"), b)
	c := d.catalog(Config{Node: "n1", Now: func() time.Time { return now }})
	ns, _, err := c.Nodes(t.Context())
	if err != nil || len(ns) != 1 {
		t.Fatalf("nodes %+v: %v", ns, err)
	}
	if n := ns[0]; n.Live || !strings.Contains(n.LeaseErr, "not a valid lease") {
		t.Fatalf("planted lease: %+v, want not live, with the reason", n)
	}
}
