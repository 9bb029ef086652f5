package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

func newFeedCatalog(t *testing.T, d *dest) *Catalog {
	t.Helper()
	c, err := New(Config{Files: d.local, FeedPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// follow reads the whole feed from cur, limit commits a page, and returns
// its commits as "node/id" and the last cursor.
func follow(t *testing.T, c *Catalog, cur Cursor, q FeedQuery) ([]string, Cursor) {
	t.Helper()
	var got []string
	for range 10000 {
		q.After = cur
		page, err := c.Commits(t.Context(), q)
		if err != nil {
			t.Fatalf("commits after %q: %v", cur, err)
		}
		for _, fc := range page.Commits {
			got = append(got, fmt.Sprintf("%s/%d", fc.Node, fc.Checkpoint))
		}
		// The cursor round-trips as the API gives it.
		next, err := ParseCursor(page.Next.String())
		if err != nil {
			t.Fatalf("parse next %q: %v", page.Next, err)
		}
		cur = next
		if !page.More && len(page.Commits) == 0 {
			return got, cur
		}
	}
	t.Fatal("the feed does not end")
	return nil, cur
}

func TestFeedEveryCommitOnce(t *testing.T) {
	d := newDest(t)
	want := map[string]bool{}
	// Ids with gaps (empty checkpoints, a 2^40 jump after a lost store).
	for _, id := range []uint64{1, 2, 5, 9, 1<<40 + 3} {
		d.commit("a", id, 2, "clicks")
		want[fmt.Sprintf("a/%d", id)] = true
	}
	for id := uint64(1); id <= 7; id++ {
		d.commit("node-b", id, 1, "clicks", "views")
		want[fmt.Sprintf("node-b/%d", id)] = true
	}
	c := newFeedCatalog(t, d)
	for _, limit := range []int{1, 2, 3, 100} {
		got, cur := follow(t, c, Cursor{}, FeedQuery{Limit: limit})
		checkOnce(t, got, want)
		if cur.At("a") != 1<<40+3 || cur.At("node-b") != 7 {
			t.Fatalf("limit %d: last cursor %v", limit, cur.Nodes())
		}
		// Per node, in id order.
		last := map[string]int{}
		for i, s := range got {
			node, _, _ := strings.Cut(s, "/")
			if j, ok := last[node]; ok && j > i {
				t.Fatalf("out of order: %v", got)
			}
			last[node] = i
		}
	}
	// New commits after the end are the next page, and only they.
	_, cur := follow(t, c, Cursor{}, FeedQuery{Limit: 1000})
	d.commit("a", 1<<40+4, 1, "clicks")
	d.commit("c", 3, 1, "clicks")
	// A new node is listed within the poll interval (20 ms here).
	time.Sleep(30 * time.Millisecond)
	got, _ := follow(t, c, cur, FeedQuery{Limit: 1000})
	checkOnce(t, got, map[string]bool{fmt.Sprintf("a/%d", uint64(1<<40+4)): true, "c/3": true})
}

func checkOnce(t *testing.T, got []string, want map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range got {
		if seen[s] {
			t.Fatalf("%s twice in %v", s, got)
		}
		if !want[s] {
			t.Fatalf("%s not committed, in %v", s, got)
		}
		seen[s] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("got %d commits %v, want %d", len(seen), got, len(want))
	}
}

func TestFeedStreamFilterAndFiles(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 3, "clicks")
	d.commit("a", 2, 4, "views")
	d.commit("a", 3, 5, "clicks", "views")
	c := newFeedCatalog(t, d)
	page, err := c.Commits(t.Context(), FeedQuery{Limit: 10, Stream: "views"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Commits) != 2 || page.Commits[0].Checkpoint != 2 || page.Commits[1].Checkpoint != 3 {
		t.Fatalf("commits %+v", page.Commits)
	}
	fc := page.Commits[1]
	if fc.FileCount != 1 || len(fc.Files) != 1 || fc.Files[0].Stream != "views" || fc.Files[0].Records != 5 ||
		fc.Manifest != layout.ManifestName("a", 3) || fc.CommittedAt.IsZero() {
		t.Fatalf("commit %+v", fc)
	}
	if page.Next.At("a") != 3 || page.More {
		t.Fatalf("next %v more %v", page.Next.Nodes(), page.More)
	}
	// A page that looks at one manifest of no match still moves on.
	page, err = c.Commits(t.Context(), FeedQuery{Limit: 1, Stream: "views"})
	if err != nil || len(page.Commits) != 0 || page.Next.At("a") != 1 || !page.More {
		t.Fatalf("page %+v, %v", page, err)
	}
}

func TestFeedBoundsFiles(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 1, "s0", "s1", "s2", "s3", "s4")
	d.commit("a", 2, 1, "s0", "s1")
	d.commit("a", 3, 1, "s0", "s1")
	c := newFeedCatalog(t, d)
	// The first commit alone is over: truncated, said so.
	page, err := c.Commits(t.Context(), FeedQuery{Limit: 10, MaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Commits) != 1 || !page.Commits[0].Truncated || len(page.Commits[0].Files) != 3 || page.Commits[0].FileCount != 5 || !page.More {
		t.Fatalf("page %+v", page)
	}
	// Whole commits otherwise, never split.
	page, err = c.Commits(t.Context(), FeedQuery{After: page.Next, Limit: 10, MaxFiles: 3})
	if err != nil || len(page.Commits) != 1 || page.Commits[0].Checkpoint != 2 || page.Commits[0].Truncated || !page.More {
		t.Fatalf("page %+v, %v", page, err)
	}
	// By bytes too.
	page, err = c.Commits(t.Context(), FeedQuery{Limit: 10, MaxBytes: 600})
	if err != nil || len(page.Commits) != 1 || !page.Commits[0].Truncated || len(page.Commits[0].Files) == 0 || len(page.Commits[0].Files) == 5 {
		t.Fatalf("page %+v, %v", page, err)
	}
}

// A document planted at a manifest name is passed over, never carried, and
// the cursor moves past it.
func TestFeedPassesOverPlantedManifest(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 1, "clicks")
	d.write(layout.ManifestName("a", 2), []byte(`{"checkpoint": 2, "node": "b", "files": []}`))
	d.write(layout.ManifestName("a", 3), []byte(`not json`))
	d.commit("a", 4, 1, "clicks")
	d.write(layout.ManifestName("a", 5), []byte(`{}`))
	d.write("_manifests/a/stray.json", []byte(`{}`))
	d.write("_manifests/not a node/00000000000000000001.json", []byte(`{}`))
	c := newFeedCatalog(t, d)
	got, cur := follow(t, c, Cursor{}, FeedQuery{Limit: 1})
	checkOnce(t, got, map[string]bool{"a/1": true, "a/4": true})
	if cur.At("a") != 5 {
		t.Fatalf("cursor %v: want past the planted 5", cur.Nodes())
	}
}

func TestFeedStaleCursor(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 1, "clicks")
	d.commit("a", 3, 1, "clicks")
	c := newFeedCatalog(t, d)
	for _, cur := range []Cursor{Cursor{}.With("a", 2), Cursor{}.With("a", 9), Cursor{}.With("zz", 1)} {
		_, err := c.Commits(t.Context(), FeedQuery{After: cur, Limit: 10})
		if !errors.Is(err, ErrBadCursor) {
			t.Errorf("cursor %v: %v, want ErrBadCursor", cur.Nodes(), err)
		}
	}
}

func TestFeedTooManyNodes(t *testing.T) {
	d := newDest(t)
	for i := range MaxFeedNodes + 1 {
		d.commit(fmt.Sprintf("n%03d", i), 1, 1, "clicks")
	}
	c := newFeedCatalog(t, d)
	if _, err := c.Commits(t.Context(), FeedQuery{Limit: 10}); !errors.Is(err, ErrTooManyNodes) {
		t.Fatalf("err %v, want ErrTooManyNodes", err)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c Cursor
	if s := c.String(); s != "AQ" {
		t.Fatalf("empty cursor %q", s)
	}
	for i := range MaxFeedNodes {
		c = c.With(fmt.Sprintf("node-%02d.%s", rng.IntN(100), strings.Repeat("x", i%50)), rng.Uint64N(layout.MaxCheckpoint)+1)
	}
	s := c.String()
	if len(s) > 8000 {
		t.Fatalf("cursor of %d nodes is %d bytes", len(c.nodes), len(s))
	}
	back, err := ParseCursor(s)
	if err != nil || back.String() != s {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"AA", "Ag", "AQ=", "AQ==", "!!", "AQFhAA", "AQFhAQFhAQ", "AQFiAQFhAQ", "AQEuAQ", "AQFhgQA"} {
		if _, err := ParseCursor(bad); !errors.Is(err, ErrBadCursor) {
			t.Errorf("ParseCursor(%q) = %v, want ErrBadCursor", bad, err)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add("AQ")
	f.Add(Cursor{}.With("a", 1).With("b", 1<<40).String())
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		if s != "" && c.String() != s {
			t.Fatalf("%q parsed, gives back %q", s, c.String())
		}
		for _, n := range c.nodes {
			if !layout.Node(n.Node) || n.ID == 0 || n.ID > layout.MaxCheckpoint {
				t.Fatalf("%q holds %+v", s, n)
			}
		}
	})
}

func TestWaitCommits(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 1, "clicks")
	c := newFeedCatalog(t, d)
	cur := Cursor{}.With("a", 1)
	// Nothing new: the wait ends with ctx.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitCommits(ctx, cur); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	// This node's commit wakes at once.
	done := make(chan error, 1)
	go func() { done <- c.WaitCommits(t.Context(), cur) }()
	time.Sleep(10 * time.Millisecond)
	c.Notify("a", 2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Another node's commit is found by the poll.
	cur = cur.With("a", 2)
	d.commit("a", 2, 1, "clicks")
	go func() { done <- c.WaitCommits(t.Context(), cur) }()
	time.Sleep(50 * time.Millisecond)
	d.commit("b", 7, 1, "clicks")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the poll did not find node b's commit")
	}
}

// racyLister is a destination whose first listing of a folder misses one
// manifest: what a directory read in several steps can show while that
// manifest is published and the next one after it.
type racyLister struct {
	*local.Local
	hide string
	hid  bool
}

func (r *racyLister) ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	page, err := r.Local.ListPage(ctx, prefix, after, limit)
	if r.hid || err != nil {
		return page, err
	}
	out := page[:0:0]
	for _, e := range page {
		if e.Path == r.hide {
			r.hid = true
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// A listing that shows manifest 3 without 2 (2 being published while the
// folder was read) must not move the cursor past 2.
func TestFeedRacyListingSkipsNothing(t *testing.T) {
	d := newDest(t)
	for id := uint64(1); id <= 3; id++ {
		d.commit("a", id, 1, "clicks")
	}
	c, err := New(Config{Files: &racyLister{Local: d.local, hide: layout.ManifestName("a", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := follow(t, c, Cursor{}, FeedQuery{Limit: 10})
	checkOnce(t, got, map[string]bool{"a/1": true, "a/2": true, "a/3": true})
}

// The node list is kept for the poll interval, yet a node's first commit is
// followed at once when the engine tells of it (Notify), and LocateSeq
// always looks at the nodes there are now.
func TestFeedNewNodeNotKeptOut(t *testing.T) {
	d := newDest(t)
	c := d.catalog(Config{FeedPoll: time.Hour})
	page, err := c.Commits(t.Context(), FeedQuery{Limit: 10})
	if err != nil || len(page.Commits) != 0 {
		t.Fatalf("empty destination: %+v %v", page, err)
	}
	if locs, _, err := c.LocateSeq(t.Context(), "p1", "clicks", 0, 0); err != nil || len(locs) != 0 {
		t.Fatalf("empty destination: %v %v", locs, err)
	}
	d.commit("a", 1, 1, "clicks")
	c.Notify("a", 1)
	page, err = c.Commits(t.Context(), FeedQuery{Limit: 10})
	if err != nil || len(page.Commits) != 1 {
		t.Fatalf("after node a's first commit: %+v %v", page, err)
	}
	d.commitSeqs("b", 1, "clicks", "p1", 0, committer.SeqRanges{{0, 0}})
	if locs, _, err := c.LocateSeq(t.Context(), "p1", "clicks", 0, 0); err != nil || len(locs) != 1 {
		t.Fatalf("after node b's first commit: %v %v", locs, err)
	}
}

// FeedTip is the feed's end; it reads the destination again only when its
// last poll is old, and this node's commits (Notify) move it at once.
func TestFeedTip(t *testing.T) {
	d := newDest(t)
	d.commit("a", 1, 1, "clicks")
	d.commit("b", 4, 1, "clicks")
	c := d.catalog(Config{FeedPoll: time.Hour})
	cur, err := c.FeedTip(t.Context())
	if err != nil || cur.At("a") != 1 || cur.At("b") != 4 {
		t.Fatalf("tip %v %v", cur.Nodes(), err)
	}
	d.commit("a", 2, 1, "clicks")
	c.Notify("a", 2)
	d.commit("b", 5, 1, "clicks") // another node's: seen at the next poll
	cur, err = c.FeedTip(t.Context())
	if err != nil || cur.At("a") != 2 || cur.At("b") != 4 {
		t.Fatalf("tip %v %v", cur.Nodes(), err)
	}
	// From there the feed gives what came since, nothing before.
	page, err := c.Commits(t.Context(), FeedQuery{After: cur, Limit: 10})
	if err != nil || len(page.Commits) != 1 || page.Commits[0].Node != "b" || page.Commits[0].Checkpoint != 5 {
		t.Fatalf("page %+v %v", page, err)
	}
}

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

// envFeedBench sets how many manifests BenchmarkFeed writes (default
// 100,000: about 40 MB in memory).
const envFeedBench = "EOSINK_FEED_BENCH_MANIFESTS"

// envFeedBenchFS=os writes them to a temp folder on disk instead of
// afero's MemMapFs.
const envFeedBenchFS = "EOSINK_FEED_BENCH_FS"

// BenchmarkFeed measures a page of the commit feed over a destination of
// many manifests (three nodes, two files each) on the local committer
// (afero MemMapFs, which the committer does not cache folder names of:
// every listing reads the folder, as on a live node's folder that changes
// with each commit; EOSINK_FEED_BENCH_FS=os for a disk): the
// first page from the start, a page from the middle with a warm cache
// and with a cold one, and a caught-up page (nothing new). It reports
// the answer's JSON bytes per page.
func BenchmarkFeed(b *testing.B) {
	n := 100000
	if v := os.Getenv(envFeedBench); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 3 {
			b.Fatalf("%s=%q", envFeedBench, v)
		}
	}
	d := newDest(b)
	if os.Getenv(envFeedBenchFS) == "os" {
		// Under a BasePathFs the committer keeps no folder names either.
		dir := b.TempDir()
		d.fs = afero.NewBasePathFs(afero.NewOsFs(), dir)
		for _, p := range []string{tDest, tStaging} {
			if err := d.fs.MkdirAll(p, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		d.local = local.New(d.fs, tDest, tStaging)
	}
	nodes := []string{"eosink-0", "eosink-1", "eosink-2"}
	began := time.Now()
	end, mid := Cursor{}, Cursor{}
	for i := range n {
		id := uint64(i/3 + 1)
		d.commit(nodes[i%3], id, 10, "clicks", "views")
		end = end.With(nodes[i%3], id)
		if i < n/2 {
			mid = mid.With(nodes[i%3], id)
		}
	}
	b.Logf("%d manifests written in %s", n, time.Since(began).Round(time.Millisecond))
	run := func(name string, cur Cursor, cold bool) {
		b.Run(name, func(b *testing.B) {
			c := d.catalog(Config{})
			var page FeedPage
			var err error
			for b.Loop() {
				if cold {
					b.StopTimer()
					c = d.catalog(Config{})
					b.StartTimer()
				}
				page, err = c.Commits(b.Context(), FeedQuery{After: cur, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
			}
			body, _ := json.Marshal(page.Commits)
			b.ReportMetric(float64(len(body)+len(page.Next.String())), "answer-bytes")
			b.ReportMetric(float64(len(page.Commits)), "commits")
		})
	}
	run("first-1000", Cursor{}, false)
	run("middle-1000-warm", mid, false)
	run("middle-1000-cold", mid, true)
	run("caught-up", end, false)
}
