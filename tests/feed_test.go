package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// envFeedKills overrides the SIGKILLs of TestFeedCrashLoop.
const envFeedKills = "EOSINK_E2E_FEED_KILLS"

// feedPage is GET /v1/commits's answer.
type feedPage struct {
	Commits []struct {
		Node       string `json:"node"`
		Checkpoint uint64 `json:"checkpoint"`
		Manifest   string `json:"manifest"`
		Files      []struct {
			Path    string `json:"path"`
			Stream  string `json:"stream"`
			Records int64  `json:"records"`
		} `json:"files"`
		FilesTruncated bool `json:"files_truncated"`
	} `json:"commits"`
	Next string `json:"next"`
	More bool   `json:"more"`
}

// feedConsumer follows the commit feed of the services behind urls (one
// at a time, the next after an error, as a client of a load balancer
// would) and reads every file of every commit: the downstream half of
// exactly once. Its output (the records read) and its cursor change
// together under one lock, as a consumer stores its cursor with its
// output.
type feedConsumer struct {
	urls []string
	hc   *http.Client

	mu      sync.Mutex
	cursor  string
	commits map[string]int      // node/checkpoint -> times seen
	order   []string            // commits as seen
	records map[record]int      // (p, s, q, i) -> times read
	batches map[batchKey]int    // batch -> records read
	errs    []error             // broken promises (a commit twice, a record twice)
	marks   map[string][]string // cursor -> commits seen after it (Mark)
	marked  []string            // the marked cursors
	polls   int
	failed  []string // failed steps (a node down), the first few
	fails   int

	stop func() // ends what start runs and waits for it; again is a no-op
}

func newFeedConsumer(hc *http.Client, urls ...string) *feedConsumer {
	return &feedConsumer{urls: urls, hc: hc, commits: map[string]int{}, records: map[record]int{}, batches: map[batchKey]int{}, marks: map[string][]string{}}
}

// page reads one page after cursor from base.
func (fc *feedConsumer) page(ctx context.Context, base, cursor, wait string) (feedPage, error) {
	var p feedPage
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/commits?wait="+wait+"&after="+url.QueryEscape(cursor), nil)
	if err != nil {
		return p, err
	}
	data, err := doRequest(fc.hc, req)
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(data, &p)
}

// step reads one page and its files, then takes them and the new cursor
// in at once. It reports whether the page was empty and not more.
func (fc *feedConsumer) step(ctx context.Context, base, wait string) (bool, error) {
	fc.mu.Lock()
	cursor := fc.cursor
	fc.mu.Unlock()
	p, err := fc.page(ctx, base, cursor, wait)
	if err != nil {
		return false, err
	}
	var recs []record
	var seen []string
	for _, c := range p.Commits {
		if c.FilesTruncated {
			return false, fmt.Errorf("commit %s/%d truncated", c.Node, c.Checkpoint)
		}
		seen = append(seen, fmt.Sprintf("%s/%d", c.Node, c.Checkpoint))
		for _, f := range c.Files {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/files/"+f.Path, nil)
			if err != nil {
				return false, err
			}
			data, err := doRequest(fc.hc, req)
			if err != nil {
				return false, fmt.Errorf("download %s: %w", f.Path, err)
			}
			n := int64(0)
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var r record
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					return false, fmt.Errorf("%s: %w", f.Path, err)
				}
				r.X = ""
				recs = append(recs, r)
				n++
			}
			if n != f.Records {
				return false, fmt.Errorf("%s: %d records, the feed says %d", f.Path, n, f.Records)
			}
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.cursor != cursor {
		return false, errors.New("two steps at once")
	}
	fc.polls++
	for _, s := range seen {
		if fc.commits[s]++; fc.commits[s] == 2 {
			fc.errs = append(fc.errs, fmt.Errorf("commit %s twice (cursor %s)", s, cursor))
		}
		for _, m := range fc.marked {
			fc.marks[m] = append(fc.marks[m], s)
		}
	}
	fc.order = append(fc.order, seen...)
	for _, r := range recs {
		if fc.records[r]++; fc.records[r] == 2 {
			fc.errs = append(fc.errs, fmt.Errorf("record %+v twice", r))
		}
		fc.batches[batchKey{P: r.P, S: r.S, Q: r.Q}]++
	}
	fc.cursor = p.Next
	return len(p.Commits) == 0 && !p.More, nil
}

// mark remembers the cursor now: check replays the feed from it later.
func (fc *feedConsumer) mark() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.cursor != "" && !slices.Contains(fc.marked, fc.cursor) {
		fc.marked = append(fc.marked, fc.cursor)
		fc.marks[fc.cursor] = []string{}
	}
}

// run follows the feed until ctx ends, each page through the next URL
// in turn (so a cursor of one node goes to the next), waiting a moment
// after an error (a killed service).
func (fc *feedConsumer) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		if _, err := fc.step(ctx, fc.urls[i%len(fc.urls)], "2"); err != nil && ctx.Err() == nil {
			fc.mu.Lock()
			if fc.fails++; len(fc.failed) < 2 {
				msg := err.Error()
				fc.failed = append(fc.failed, msg[:min(len(msg), 120)])
			}
			fc.mu.Unlock()
			_ = ctxsleep.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

// start runs the consumer (run) until ctx ends or stop is called.
func (fc *feedConsumer) start(ctx context.Context) {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fc.run(rctx) }()
	fc.stop = func() { cancel(); <-done }
}

// finish stops the consumer started by start, reads what is left of the
// feed (drain) and checks the replays of the marked cursors.
func (fc *feedConsumer) finish(t *testing.T, ctx context.Context) {
	t.Helper()
	fc.stop()
	if err := fc.drain(ctx); err != nil {
		t.Fatalf("drain the commit feed: %v", err)
	}
	fc.checkReplays(t, ctx)
}

// drain reads until a page is empty and not more, through urls[0].
func (fc *feedConsumer) drain(ctx context.Context) error {
	for {
		end, err := fc.step(ctx, fc.urls[0], "0")
		if err != nil || end {
			return err
		}
	}
}

// checkReplays fails t unless each marked cursor (taken before a kill)
// gives now exactly the commits the consumer saw after it. The services
// must be running.
func (fc *feedConsumer) checkReplays(t *testing.T, ctx context.Context) {
	t.Helper()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, m := range fc.marked {
		var again []string
		cursor := m
		for {
			p, err := fc.page(ctx, fc.urls[len(fc.urls)-1], cursor, "0")
			if err != nil {
				t.Fatalf("replay from a cursor of before the restarts: %v", err)
			}
			for _, c := range p.Commits {
				again = append(again, fmt.Sprintf("%s/%d", c.Node, c.Checkpoint))
			}
			cursor = p.Next
			if len(p.Commits) == 0 && !p.More {
				break
			}
		}
		if !sameSet(again, fc.marks[m]) {
			t.Errorf("the feed from cursor %s gives %d commits now, %d when the consumer passed it", m, len(again), len(fc.marks[m]))
		}
	}
}

// check fails t unless the consumer read every batch of want exactly once
// and nothing else, and saw every manifest of the destination exactly
// once.
func (fc *feedConsumer) check(t *testing.T, want map[batchKey]int, rep *invariant.Report) {
	t.Helper()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for i, err := range fc.errs {
		if i == 10 {
			break
		}
		t.Error(err)
	}
	for k, n := range want {
		if got := fc.batches[k]; got != n {
			t.Errorf("batch %s: consumer read %d records, %d committed", k, got, n)
		}
	}
	for k, n := range fc.batches {
		if _, ok := want[k]; !ok {
			t.Errorf("batch %s: consumer read %d records of a batch never kept", k, n)
		}
	}
	if rep != nil && len(fc.commits) != rep.Manifests {
		t.Errorf("consumer saw %d commits, the destination holds %d manifests", len(fc.commits), rep.Manifests)
	}
}

// summary says what the consumer did.
func (fc *feedConsumer) summary() string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	nodes := map[string]bool{}
	for c := range fc.commits {
		n, _, _ := strings.Cut(c, "/")
		nodes[n] = true
	}
	return fmt.Sprintf("commit feed: %d commits of %d nodes, %d records read exactly once over %d pages through %d addresses (%d failed while a node was down, e.g. %q); %d cursors of before a kill replayed",
		len(fc.commits), len(nodes), len(fc.records), fc.polls, len(fc.urls), fc.fails, fc.failed, len(fc.marked))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestFeedCrashLoop follows the commit feed while the service is killed
// and restarted: the consumer sees every commit once and reads every
// committed record once, and cursors taken before restarts still work.
func TestFeedCrashLoop(t *testing.T) {
	cl := localCrashLoop(t, envInt(t, envFeedKills, 12), envInt(t, envProducers, 3))
	cl.feed = true
	cl.run(t)
}

// TestFeedWaitEndsOnStop: a SIGTERM answers a waiting GET /v1/commits at
// once (an empty page), and the service stops cleanly well within its
// shutdown timeout instead of waiting out the wait.
func TestFeedWaitEndsOnStop(t *testing.T) {
	dir := workDir(t)
	p := newProc(t, dir, procConfig{Args: []string{"--dest", "file://" + dir + "/dest", "--node", "stop", "--checkpoint-interval", "0"},
		ShutdownTimeout: 50 * time.Second})
	p.StartReady()
	fc := newFeedConsumer(p.hc, p.URL)
	got := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := fc.page(t.Context(), p.URL, "", "60")
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if code := p.Term(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting request: %v", err)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Fatalf("the stop took %s: it waited out the long poll", d)
	}
}

// TestDeployTimeoutsCoverFeedWait: the proxies of deploy/ wait for an
// answer longer than the commit feed's longest ?wait=, so a long poll is
// answered by eosink, not cut off as a 504.
func TestDeployTimeoutsCoverFeedWait(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct{ file, re string }{
		{"nginx.conf", `proxy_read_timeout\s+(\d+)s;`},
		{"haproxy.cfg", `timeout server\s+(\d+)s`},
		{"haproxy.cfg", `timeout client\s+(\d+)s`},
	} {
		conf, err := os.ReadFile(filepath.Join(root, "deploy", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(tc.re).FindSubmatch(conf)
		if m == nil {
			t.Fatalf("deploy/%s: no %s", tc.file, tc.re)
		}
		secs, _ := strconv.Atoi(string(m[1]))
		if time.Duration(secs)*time.Second < api.MaxFeedWait+5*time.Second {
			t.Errorf("deploy/%s: %s is %ds, not beyond the feed's longest wait %s", tc.file, tc.re, secs, api.MaxFeedWait)
		}
	}
}
