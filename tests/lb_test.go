package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
)

// envLBKills sets the SIGKILLs of TestLBCrashLoop (default 4).
const envLBKills = "EOSINK_LB_KILLS"

// lbCluster is three eosink nodes on one MinIO bucket and prefix, and a
// load balancer in front of them: nginx with deploy/nginx.conf or HAProxy
// with deploy/haproxy.cfg.
type lbCluster struct {
	nodes  []*proc
	ids    []string
	URL    string     // the load balancer's
	nginx  *nginxProc // nil behind HAProxy
	dest   invariant.S3Dest
	flags  []string // --dest and the S3 flags, for `eosink verify`
	env    []string
	prefix string
	minio  *testsrv.MinIO
}

// lbFront is the load balancer of an lbCluster: nginx with
// deploy/nginx.conf, or HAProxy with deploy/haproxy.cfg (HAProxy true);
// Edit, if set, changes the configuration.
type lbFront struct {
	HAProxy bool
	Edit    func(string) string
}

// newLBCluster starts the nodes n0, n1, n2 (each with its own data dir)
// and the load balancer. nodeArgs are added to every node's flags;
// perStart, if set, is called for each start of each node.
func newLBCluster(t testing.TB, dir string, front lbFront, nodeArgs []string, perStart func() []string) *lbCluster {
	t.Helper()
	// Skip or fail before starting anything.
	if front.HAProxy {
		haproxyBinary(t)
	} else {
		nginxBinary(t)
	}
	srv := sharedMinIO(t)
	b := newS3Bucket(t, srv, "lb")
	cl := &lbCluster{
		dest:   b.dest(),
		flags:  b.destFlags(),
		env:    b.env(),
		prefix: b.prefix,
		minio:  srv,
	}
	var addrs []string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		p := newProc(t, dir, procConfig{Name: id, Env: cl.env, PerStart: perStart,
			Args: append(append([]string{"--node", id}, cl.flags...), nodeArgs...)})
		cl.nodes, cl.ids = append(cl.nodes, p), append(cl.ids, id)
		addrs = append(addrs, p.Addr)
	}
	var wg sync.WaitGroup
	for _, p := range cl.nodes {
		p.Start()
		wg.Go(func() { _, _ = p.waitReady(p.cfg.ReadyTimeout) })
	}
	wg.Wait()
	for _, p := range cl.nodes {
		if ok, why := p.Ready(t.Context()); !ok {
			t.Fatalf("%s not ready: %s; log:\n%s", p.cfg.Name, why, p.logTail(20))
		}
	}
	listen := freeAddr(t)
	if front.HAProxy {
		startHAProxy(t, dir, listen, deployHAProxyConf(t, addrs, listen, front.Edit))
	} else {
		cl.nginx = startNginx(t, dir, listen, deployNginxConf(t, addrs, listen, front.Edit))
	}
	cl.URL = "http://" + listen
	return cl
}

// home returns the index of the one node that knows producer id (asked
// directly, not through nginx), failing the test unless exactly one does.
func (cl *lbCluster) home(t testing.TB, id string) int {
	t.Helper()
	home := -1
	for i, p := range cl.nodes {
		if !p.Running() {
			continue
		}
		_, err := p.Producer(t.Context(), id)
		var he *httpError
		switch {
		case err == nil && home >= 0:
			t.Fatalf("producer %s known to nodes %s and %s", id, cl.ids[home], cl.ids[i])
		case err == nil:
			home = i
		case errors.As(err, &he) && he.Status == http.StatusNotFound:
		default:
			t.Fatalf("GET /v1/producers/%s on %s: %v", id, cl.ids[i], err)
		}
	}
	if home < 0 {
		t.Fatalf("producer %s known to no running node", id)
	}
	return home
}

// spreadProducers returns n producer ids (prefix and a number) chosen so
// that the load balancer's hash ring puts them on the nodes evenly: ids
// are tried (an init through the load balancer, then asking the nodes
// which one knows it) and kept while their node has fewer than its share. A small ring
// is uneven: without this, one node may get none.
func (cl *lbCluster) spreadProducers(t testing.TB, prefix string, n int) []string {
	t.Helper()
	share := (n + len(cl.nodes) - 1) / len(cl.nodes)
	per := make([]int, len(cl.nodes))
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if i > 20*n {
			t.Fatalf("no spread of %d producers over %d nodes after %d tries: %v", n, len(cl.nodes), i, per)
		}
		id := fmt.Sprintf("%s%d", prefix, i)
		c, err := client.New(cl.URL, client.WithProducer(id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Init(t.Context()); err != nil {
			t.Fatalf("init %s: %v", id, err)
		}
		if h := cl.home(t, id); per[h] < share {
			per[h]++
			ids = append(ids, id)
		}
	}
	return ids
}

// term stops every running node with SIGTERM and fails the test unless
// each exits 0.
func (cl *lbCluster) term(t testing.TB) {
	t.Helper()
	termAll(t, cl.nodes)
}

// producerNodes reads every data file of the destination and returns, per
// producer (records with a "p" that is not a shipper's), the nodes whose
// files hold its records.
func producerNodes(t *testing.T, d destReader) map[string][]string {
	t.Helper()
	objs, err := d.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, o := range objs {
		_, node, _, ok := dataFile(o.Path)
		if !ok {
			continue
		}
		data, err := d.Read(t.Context(), o.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			p := recordProducer(line)
			if p == "" || strings.HasPrefix(p, anonSender) || slices.Contains(out[p], node) {
				continue
			}
			out[p] = append(out[p], node)
		}
	}
	for _, ns := range out {
		sort.Strings(ns)
	}
	return out
}

// recordProducer returns the "p" of a test record, "" if it has none.
func recordProducer(line string) string {
	const key = `"p":"`
	i := strings.Index(line, key)
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// TestDeployConfigsInDocs: docs/nodes.md quotes deploy/nginx.conf and
// deploy/haproxy.cfg, the configurations the load-balancer tests run, word
// for word.
func TestDeployConfigsInDocs(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "nodes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ file, lang string }{{"nginx.conf", "nginx"}, {"haproxy.cfg", "haproxy"}} {
		conf, err := os.ReadFile(filepath.Join(root, "deploy", f.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```"+f.lang+"\n"+string(conf)+"```\n") {
			t.Errorf("docs/nodes.md does not quote deploy/%s in a ```%s block word for word: copy the file into the doc", f.file, f.lang)
		}
	}
}

// TestLBRouting: through nginx with deploy/nginx.conf, and HAProxy with
// deploy/haproxy.cfg, in front of three nodes, (1) each producer's init (a path with the producer, no
// Producer-Id header) and its writes (Producer-Id, no producer in the
// path) reach the same node, and (2) a shipper's retries of one
// Idempotency-Key all reach one node, so the batch is written once.
func TestLBRouting(t *testing.T) {
	for _, front := range []struct {
		name string
		lbFront
	}{{"nginx", lbFront{}}, {"haproxy", lbFront{HAProxy: true}}} {
		t.Run(front.name, func(t *testing.T) { testLBRouting(t, front.lbFront) })
	}
}

func testLBRouting(t *testing.T, front lbFront) {
	dir := workDir(t)
	cl := newLBCluster(t, dir, front, []string{"--checkpoint-interval", "0"}, nil)
	ctx := t.Context()
	rng, _ := testRand(t)
	want := map[batchKey]int{}

	// (1) 12 producers: with init and writes routed by different keys,
	// each would have a 2 in 3 chance to write where it is unknown.
	used := map[int]int{}
	for i := range 12 {
		id := fmt.Sprintf("route-%d", i)
		c, err := client.New(cl.URL, client.WithProducer(id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Init(ctx); err != nil {
			t.Fatalf("init %s through the load balancer: %v", id, err)
		}
		k := batchKey{P: id, S: "events", Q: 0}
		recs := makeRecords(rng, k, 3, 16)
		if _, err := c.Send(ctx, "events", recs); err != nil {
			t.Fatalf("producer %s: write through the load balancer after its init: %v", id, err)
		}
		want[k] = len(recs)
		used[cl.home(t, id)]++
	}

	// (2) One batch under one key, sent again and again as a shipper
	// retries it: one write, the others duplicates.
	k := batchKey{P: anonSender + "route", S: "logs", Q: 0}
	recs := makeRecords(rng, k, 5, 16)
	want[k] = len(recs)
	hc := &http.Client{}
	dups := 0
	for i := range 9 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.URL+"/v1/streams/logs/records", strings.NewReader(string(ndjson(recs))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Idempotency-Key", "route-key-1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("keyed write %d: %d %s", i, resp.StatusCode, body)
		}
		if strings.Contains(string(body), `"duplicate":true`) {
			dups++
		}
	}
	if dups != 8 {
		t.Errorf("one Idempotency-Key sent 9 times through the load balancer: %d answered as duplicates, want 8", dups)
	}
	for _, p := range cl.nodes {
		mustCommit(t, p)
	}
	cl.term(t)
	requireDest(t, cl.dest, want, true)
	for p, ns := range producerNodes(t, cl.dest) {
		if len(ns) != 1 {
			t.Errorf("producer %s has records on nodes %v, want one", p, ns)
		}
	}
	requireVerify(t, cl.env, cl.flags...)
	report(t, "12 producers through the load balancer, each on one node (n0: %d, n1: %d, n2: %d); one Idempotency-Key sent 9 times: written once", used[0], used[1], used[2])
}

// withFailover turns deploy/nginx.conf back into nginx's defaults for
// failures: a node that refuses a connection is marked failed (max_fails
// 1, fail_timeout 10s) and the request passed to the next node of the ring
// (proxy_next_upstream error timeout, which passes even a POST on when
// the connect failed).
func withFailover(conf string) string {
	conf = strings.ReplaceAll(conf, " max_fails=0", "")
	return strings.ReplaceAll(conf, "proxy_next_upstream off;", "")
}

// TestLBProducerNodeDown: a producer writes through nginx; its node
// commits five batches (the client has not seen them committed yet) and is
// SIGKILLed; the producer sends a sixth batch.
//
//   - With deploy/nginx.conf (no failover) the producer gets 502s and
//     retries until its node is back; every batch is there exactly once,
//     all on its node.
//   - With nginx's default failover the sixth batch reaches another node,
//     which does not know the producer (409 unknown_producer); after an
//     init there (what a client must do), the client resends the five
//     batches it had not seen committed, and that node writes them again:
//     duplicates. This is why deploy/nginx.conf turns failover off: the
//     epoch and sequence numbers of a producer live in one node. Both
//     halves of the rule are needed: either alone fails the same way.
func TestLBProducerNodeDown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		front    lbFront
		failover bool
	}{
		{"deploy-nginx.conf", lbFront{}, false},
		{"deploy-haproxy.cfg", lbFront{HAProxy: true}, false},
		{"nginx-default-failover", lbFront{Edit: withFailover}, true},
		// Each half of the rule alone is not enough: a failed connect
		// marks the node failed (max_fails 1) and the client's retry
		// hashes past it; or the request itself is passed on.
		{"proxy_next_upstream-off-only", lbFront{Edit: func(c string) string { return strings.ReplaceAll(c, " max_fails=0", "") }}, true},
		{"max_fails=0-only", lbFront{Edit: func(c string) string { return strings.ReplaceAll(c, "proxy_next_upstream off;", "") }}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := workDir(t)
			cl := newLBCluster(t, dir, tc.front, []string{"--checkpoint-interval", "200ms"}, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			rng, _ := testRand(t)
			const id, stream = "mover", "events"
			c, err := client.New(cl.URL, client.WithProducer(id),
				client.WithRetry(client.Retry{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxElapsed: -1}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Init(ctx); err != nil {
				t.Fatal(err)
			}
			h := cl.home(t, id)
			home := cl.nodes[h]
			want := map[batchKey]int{}
			batch := func(q int64) [][]byte {
				k := batchKey{P: id, S: stream, Q: q}
				recs := makeRecords(rng, k, 4, 16)
				want[k] = len(recs)
				return recs
			}
			for q := range int64(5) {
				if _, err := c.Send(ctx, stream, batch(q)); err != nil {
					t.Fatal(err)
				}
			}
			// Wait until the node committed them, asking it directly: the
			// client learns nothing of it.
			for {
				st, err := home.Producer(ctx, id)
				if err == nil && st.Streams[stream].CommittedSeq == 4 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("batches 0-4 not committed on %s: %+v %v", cl.ids[h], st, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if s := c.Stats(); s.Batches != 5 {
				t.Fatalf("client stats %+v: want the 5 batches still kept (not seen committed)", s)
			}
			home.Kill()
			sixth := batch(5)

			if !tc.failover {
				sent := make(chan error, 1)
				go func() {
					_, err := c.Send(ctx, stream, sixth)
					sent <- err
				}()
				select {
				case err := <-sent:
					t.Fatalf("send while the producer's node is down returned (%v) before the node came back", err)
				case <-time.After(time.Second):
				}
				home.Restart()
				if err := <-sent; err != nil {
					t.Fatalf("send after the node came back: %v", err)
				}
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				cl.term(t)
				requireDest(t, cl.dest, want, true)
				if ns := producerNodes(t, cl.dest)[id]; !slices.Equal(ns, []string{cl.ids[h]}) {
					t.Errorf("producer %s on nodes %v, want only its node %s", id, ns, cl.ids[h])
				}
				failed := "through HAProxy"
				if cl.nginx != nil {
					bad := 0
					for _, e := range cl.nginx.Access() {
						if e.Status == http.StatusBadGateway {
							bad++
						}
					}
					if bad == 0 {
						t.Errorf("no 502 in nginx's access log while the producer's node was down")
					}
					failed = fmt.Sprintf("nginx answered %d 502s", bad)
				}
				requireVerify(t, cl.env, cl.flags...)
				report(t, "node %s SIGKILLed under its producer: %s, the client retried until the node was back; 6 batches exactly once, on %s only", cl.ids[h], failed, cl.ids[h])
				return
			}

			_, err = c.Send(ctx, stream, sixth)
			if !errors.Is(err, client.ErrUnknownProducer) {
				t.Fatalf("send with failover while the producer's node is down: %v, want unknown_producer from another node", err)
			}
			kept := errors.Is(err, client.ErrKept)
			if _, err := c.Init(ctx); err != nil {
				t.Fatal(err)
			}
			other := cl.home(t, id) // the node it was moved to
			// A 502 before the 409 leaves the batch with the client (it
			// may have reached the node): then it is delivered, not sent
			// again.
			if !kept {
				if _, err := c.Send(ctx, stream, sixth); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			cl.term(t)
			rep := checkDest(t, cl.dest, want, true)
			dupLine := ""
			for _, p := range rep.Problems {
				switch {
				case strings.HasPrefix(p, "I2: ") && strings.Contains(p, "want exactly once"):
					dupLine = p
				case strings.HasPrefix(p, "manifest ranges: producer "+id+" "):
					// Two nodes' manifests claim the same sequence numbers:
					// the duplicates, seen from the manifests.
				case strings.Contains(p, "later checkpoint"):
					// A later checkpoint of the same node can't go back in
					// sequence; across nodes the checker does not compare.
				default:
					t.Errorf("%s", p)
				}
			}
			found := 0
			for _, n := range rep.Batches {
				found += n
			}
			if found != len(want)+5 || dupLine == "" {
				t.Fatalf("with failover: %d batches in the destination (want %d: the 5 committed on %s written again by %s); problems: %v",
					found, len(want)+5, cl.ids[h], cl.ids[other], rep.Problems)
			}
			if ns := producerNodes(t, cl.dest)[id]; len(ns) != 2 {
				t.Errorf("producer %s on nodes %v, want two", id, ns)
			}
			report(t, "%s: node %s down: the producer's write went to %s (unknown_producer), and after an init there the client resent what %s had committed: %s", tc.name,
				cl.ids[h], cl.ids[other], cl.ids[h], dupLine)
		})
	}
}

// TestLBCrashLoop: producers (the Go client) and shippers (Idempotency-Key,
// no Producer-Id, ?wait=commit) write through nginx with deploy/nginx.conf
// to three nodes on one MinIO bucket while nodes are SIGKILLed and
// restarted (same node id and data dir). At the end the checker finds
// every acknowledged batch exactly once across all nodes' files and
// manifests, each producer on one node only, `eosink verify` passes, and
// nginx answered 502 while nodes were down.
func TestLBCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("load-balancer crash loop: not in -short mode")
	}
	dir := workDir(t)
	rng, _ := testRand(t)
	var rngMu sync.Mutex
	cl := newLBCluster(t, dir, lbFront{}, nil, func() []string {
		rngMu.Lock()
		defer rngMu.Unlock()
		return []string{"--checkpoint-interval", fmt.Sprintf("%dms", 100+rng.IntN(201))}
	})
	kills := envInt(t, envLBKills, 4)
	nprod := envInt(t, envProducers, 6)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute+time.Duration(kills)*3*time.Second)
	defer cancel()

	// A consumer follows the commit feed all along, each page through the
	// next address in turn: nginx, then each node directly.
	urls := []string{cl.URL}
	for _, n := range cl.nodes {
		urls = append(urls, n.URL)
	}
	feed := newFeedConsumer(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, urls...)
	feed.start(ctx)
	defer feed.stop()

	fl := &fleet{led: newLedger()}
	for _, id := range cl.spreadProducers(t, "lb-p", nprod) {
		fl.add(ctx, newSender(ctx, t, cl.URL, id), crashStreams, rng)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	shippers := make([]*shipper, 2)
	var shipped atomic.Int64
	for i := range shippers {
		s := newShipper(i, rng, hc, cl.URL)
		shippers[i] = s
		prng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		fl.wg.Go(func() { s.loop(ctx, []string{"logs", "events"}, 0, 30, prng, fl.led, &fl.stop, &fl.errs, &shipped) })
	}

	killed := map[string]int{}
	var down time.Duration
	first := rng.IntN(len(cl.nodes))
	for k := range kills {
		if err := ctxsleep.Sleep(ctx, time.Duration(300+rng.IntN(900))*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		i := (first + k) % len(cl.nodes) // each node in turn
		feed.mark()
		cl.nodes[i].Kill()
		killedAt := time.Now()
		killed[cl.ids[i]]++
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond) // down: nginx answers 502
		cl.nodes[i].Restart()
		down += time.Since(killedAt)
	}
	fl.windDown(ctx, t)
	fl.errs.check(t, "producer")
	feed.finish(t, ctx)
	cl.term(t)

	want := fl.led.snapshot()
	batches, records := fl.led.records()
	rep := requireDest(t, cl.dest, want, true)
	if rep.Records != records {
		t.Errorf("destination holds %d records, producers and shippers had %d acknowledged", rep.Records, records)
	}
	if len(rep.Staging) > 0 {
		t.Errorf("staging objects left after clean stops: %s", firstN(rep.Staging, 10))
	}
	requireNoUploads(t, cl.dest.Client, cl.dest.Bucket, cl.prefix, rep)
	perNode := map[string]int{}
	for p, ns := range producerNodes(t, cl.dest) {
		if len(ns) != 1 {
			t.Errorf("producer %s has records on nodes %v: it moved", p, ns)
			continue
		}
		perNode[ns[0]]++
	}
	requireVerify(t, cl.env, cl.flags...)
	feed.check(t, want, rep)
	report(t, "%s", feed.summary())
	status := map[int]int{}
	for _, e := range cl.nginx.Access() {
		status[e.Status]++
	}
	if kills > 0 && status[http.StatusBadGateway] == 0 {
		t.Errorf("%d kills, yet nginx never answered 502: no request met a node that was down", kills)
	}
	resends := 0
	for _, s := range fl.senders {
		resends += s.Resends()
	}
	var retries int64
	for _, s := range shippers {
		retries += s.retries.Load()
	}
	report(t, "3 nodes behind nginx, %d SIGKILLs %v (down %s in all); %d producers (per node %v), %d shipper batches; %d batches, %d records exactly once in %d files (per node %v), %d manifests; nginx answers %v; %d producer resends, %d shipper retries",
		kills, killed, down.Round(time.Millisecond), nprod, perNode, shipped.Load(), batches, records, rep.Files, rep.Nodes, rep.Manifests, status, resends, retries)
}
