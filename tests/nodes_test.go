package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// nodeDest is one destination, local or on the shared MinIO, for the node
// tests: its reader, its flags and the environment the binary needs.
type nodeDest struct {
	d        destReader
	args     []string
	env      []string
	describe string
}

func newNodeDest(t *testing.T, kind, dir string) nodeDest {
	t.Helper()
	switch kind {
	case "local":
		dest := filepath.Join(dir, "dest")
		return nodeDest{d: invariant.LocalDest(dest), args: []string{"--dest", "file://" + dest}, describe: "local"}
	default:
		srv := sharedMinIO(t)
		b := newS3Bucket(t, srv, "nodes")
		return nodeDest{d: b.dest(), args: b.destFlags(), env: b.env(), describe: "s3 (MinIO)"}
	}
}

// startOrRefused starts p and waits until it is ready (true) or has exited
// by itself (false: it refused to start).
func startOrRefused(t *testing.T, p *proc) bool {
	t.Helper()
	p.Start()
	_, err := p.waitReady(p.cfg.ReadyTimeout)
	if err == nil {
		return true
	}
	select {
	case <-p.Exited():
		p.Kill() // reap: the process is gone already
		return false
	default:
		t.Fatal(err)
		return false
	}
}

// startWhenFree starts p again and again until it is ready, for at most
// limit, and returns how long that took.
func startWhenFree(t *testing.T, p *proc, limit time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	for !startOrRefused(t, p) {
		if time.Since(begin) > limit {
			t.Fatalf("%s: still refused after %s; log %s:\n%s", p.cfg.Name, limit, p.LogPath, p.logTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(begin)
}

// waitNotReady waits until p's /readyz answers 503 with a message
// containing want, and returns the message; p must not exit meanwhile.
func waitNotReady(t *testing.T, p *proc, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-p.Exited():
			t.Fatalf("%s exited (%s) instead of waiting; log:\n%s", p.cfg.Name, p.exitStatus(), p.logTail(10))
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		ok, why := p.Ready(ctx)
		cancel()
		if ok {
			t.Fatalf("%s ready, want /readyz 503 %q", p.cfg.Name, want)
		}
		if strings.Contains(why, want) && strings.Contains(why, "not_ready") {
			return why
		}
		last = why
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: /readyz never said %q (last: %s)", p.cfg.Name, want, last)
	return ""
}

// mustCommit runs a checkpoint on p and fails unless it committed.
func mustCommit(t *testing.T, p *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ck, err := p.Checkpoint(ctx)
	if err != nil || ck.State != "committed" {
		t.Fatalf("%s: checkpoint: %+v %v; log:\n%s", p.cfg.Name, ck, err, p.logTail(10))
	}
}

// TestNodeLease: two processes with one node id on one destination:
// exactly one serves, the other refuses to start naming the holder once it
// sees it renew. SIGKILL the holder, and one start of the other waits for
// the lease to time out (/readyz 503 saying so) and takes over — not
// before — and commits.
func TestNodeLease(t *testing.T) {
	const timeout = 3 * time.Second
	for _, kind := range []string{"local", "s3"} {
		t.Run(kind, func(t *testing.T) {
			dir := workDir(t)
			nd := newNodeDest(t, kind, dir)
			args := append([]string{"--node", "dup", "--checkpoint-interval", "0", "--lease-timeout", timeout.String()}, nd.args...)
			a := newProc(t, dir, procConfig{Name: "a", Args: args, Env: nd.env})
			b := newProc(t, dir, procConfig{Name: "b", Args: args, Env: nd.env})
			a.StartReady()
			for range 2 {
				if startOrRefused(t, b) {
					t.Fatalf("a second process with node id dup started while the first serves")
				}
			}
			logB, _ := os.ReadFile(b.LogPath)
			if !strings.Contains(string(logB), "node lease held by another process") || !strings.Contains(string(logB), a.Addr) {
				t.Fatalf("b's refusal does not name the holder (%s); log:\n%s", a.Addr, b.logTail(10))
			}
			prod := mustRawProducer(t.Context(), t, a.URL, "p")
			rng, _ := testRand(t)
			want := map[batchKey]int{}
			prod.sendNew(t, rng, "events", 0, 3, 16, want)
			mustCommit(t, a)

			a.Kill()
			killed := time.Now()
			// One start of b waits for the dead holder's lease to expire
			// (it exited with status 1 before), saying why on /readyz,
			// and takes over.
			b.Start()
			why := waitNotReady(t, b, "waiting for node lease")
			took, err := b.waitReady(4 * timeout)
			if err != nil {
				t.Fatalf("b did not wait for the dead holder's lease and take over: %v", err)
			}
			took = time.Since(killed)
			// The last renewal was at most timeout/3 before the kill.
			if took < timeout*2/3-200*time.Millisecond {
				t.Fatalf("b took over %s after the holder died, before its lease (timeout %s) could expire", took, timeout)
			}
			if logB, _ := os.ReadFile(b.LogPath); !strings.Contains(string(logB), "waiting for its expiry") {
				t.Fatalf("b's log does not say it waits for the lease; log:\n%s", b.logTail(10))
			}
			prod2 := mustRawProducer(t.Context(), t, b.URL, "p2")
			prod2.sendNew(t, rng, "events", 0, 3, 16, want)
			mustCommit(t, b)
			if code := b.Term(); code != 0 {
				t.Fatalf("b: SIGTERM exit %d", code)
			}
			// A clean stop released the lease: a starts at once.
			if d := startWhenFree(t, a, timeout/2); d > timeout/2 {
				t.Fatalf("a after b's clean stop: %s", d)
			}
			requireDest(t, nd.d, want, true)
			requireVerify(t, nd.env, nd.args...)
			report(t, "%s: the second process was refused while the first renewed; a start after SIGKILL waited (/readyz: %q) and took over %s after it (lease timeout %s)", nd.describe, why, took.Round(time.Millisecond), timeout)
		})
	}
}

// TestRebuildFromDestination: run, SIGKILL, delete the data dir, restart
// with the same node id, init again and resend everything: the node rebuilt
// the producer's committed sequence numbers from its manifests, so what
// was committed is a duplicate and what was lost with the data dir is
// written — every batch exactly once.
func TestRebuildFromDestination(t *testing.T) {
	for _, kind := range []string{"local", "s3"} {
		t.Run(kind, func(t *testing.T) {
			dir := workDir(t)
			nd := newNodeDest(t, kind, dir)
			args := append([]string{"--node", "e2e", "--checkpoint-interval", "0", "--lease-timeout", "1s"}, nd.args...)
			p := newProc(t, dir, procConfig{Args: args, Env: nd.env})
			p.StartReady()
			prod := mustRawProducer(t.Context(), t, p.URL, "rp")
			if err := prod.Init(t.Context()); err != nil { // epoch 1: 0 is fenced, also after the rebuild
				t.Fatal(err)
			}
			rng, _ := testRand(t)
			want := map[batchKey]int{}
			bodies := map[int64][]byte{}
			const committed, total = 4, 6
			for seq := range int64(total) {
				k := batchKey{P: "rp", S: "events", Q: seq}
				recs := makeRecords(rng, k, 2, 16)
				bodies[seq] = ndjson(recs)
				want[k] = len(recs)
				if ans := prod.post(t.Context(), "events", &rawBatch{seq: seq, body: bodies[seq]}, prod.epoch, false); ans.Status != http.StatusAccepted {
					t.Fatalf("send %s: %d %s %v", k, ans.Status, ans.Code, ans.Err)
				}
				if seq < committed {
					mustCommit(t, p)
				}
			}
			p.Kill()
			if err := os.RemoveAll(p.cfg.DataDir); err != nil {
				t.Fatal(err)
			}
			took := startWhenFree(t, p, 10*time.Second)

			// Restored at the epoch the manifests record: an older one stays
			// fenced (I6), a newer one must init again.
			old := prod.epoch
			if ans := prod.post(t.Context(), "events", &rawBatch{seq: committed, body: bodies[committed]}, old-1, false); ans.Code != "producer_fenced" {
				t.Fatalf("write with an epoch fenced before the loss: %d %s, want producer_fenced", ans.Status, ans.Code)
			}
			if ans := prod.post(t.Context(), "events", &rawBatch{seq: committed, body: bodies[committed]}, old+1, false); ans.Code != "invalid_epoch" {
				t.Fatalf("write with an epoch the manifests do not show: %d %s, want invalid_epoch", ans.Status, ans.Code)
			}
			if err := prod.Init(t.Context()); err != nil {
				t.Fatal(err)
			}
			st, err := p.Producer(t.Context(), "rp")
			if err != nil {
				t.Fatal(err)
			}
			if ss := st.Streams["events"]; ss.NextSeq != committed || ss.CommittedSeq != committed-1 {
				t.Fatalf("producer after the rebuild: %+v, want next_seq %d committed_seq %d", st, committed, committed-1)
			}
			for seq := range int64(total) {
				ans := prod.post(t.Context(), "events", &rawBatch{seq: seq, body: bodies[seq]}, prod.epoch, false)
				wantStatus, dup := http.StatusAccepted, false
				if seq < committed {
					wantStatus, dup = http.StatusOK, true
				}
				if ans.Status != wantStatus || ans.Write.Duplicate != dup {
					t.Fatalf("resend %d: %d %s duplicate=%v, want %d duplicate=%v", seq, ans.Status, ans.Code, ans.Write.Duplicate, wantStatus, dup)
				}
			}
			mustCommit(t, p) // after the rebuild
			if code := p.Term(); code != 0 {
				t.Fatalf("SIGTERM: exit %d", code)
			}
			requireDest(t, nd.d, want, true)
			requireVerify(t, nd.env, nd.args...)
			report(t, "%s: data dir deleted after SIGKILL; restarted in %s; %d committed batches deduplicated, %d lost ones written once", nd.describe, took.Round(time.Millisecond), committed, total-committed)
		})
	}
}

// TestTwoNodesOneBucket runs two eosink nodes, writing the same streams into
// the same bucket and prefix at once, each SIGKILLed and restarted a few
// times. Node ids "n1" and "n10" share a prefix, and one node commits by
// multipart upload, the other by copy, so their staging objects, uploads
// and manifests sit side by side. Every batch of both must be there exactly
// once, each node's records only in its own files, and `eosink verify`
// must pass.
func TestTwoNodesOneBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("two nodes with crashes: not in -short mode")
	}
	srv := sharedMinIO(t)
	rng, _ := testRand(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b := newS3Bucket(t, srv, "shared/dest")
	env := b.env()
	dir := workDir(t)

	nodes := []struct{ id, mode string }{{"n1", "multipart"}, {"n10", "copy"}}
	procs := make([]*proc, len(nodes))
	var rngMu sync.Mutex
	for i, n := range nodes {
		procs[i] = newProc(t, dir, procConfig{
			Name: n.id,
			Args: append([]string{"--dest", b.url(), "--s3-commit", n.mode, "--node", n.id}, b.s3Flags()...),
			Env:  env,
			PerStart: func() []string {
				rngMu.Lock()
				defer rngMu.Unlock()
				return []string{"--checkpoint-interval", fmt.Sprintf("%dms", 100+rng.IntN(201))}
			},
		})
		procs[i].StartReady()
	}

	fl := startFleet(ctx, t, rng, procs, crashStreams)

	kills := envInt(t, envKills, 6)
	maxRecovery := killRestart(ctx, t, rng, procs, kills, 100, 700)
	fl.windDown(ctx, t)
	termAll(t, procs)

	fl.errs.check(t, "producer")
	d := b.dest()
	want := fl.led.snapshot()
	batches, records := fl.led.records()
	rep := requireDest(t, d, want, true)
	for _, n := range nodes {
		if rep.Nodes[n.id] == 0 {
			t.Errorf("no data file of node %s", n.id)
		}
	}
	if len(rep.Staging) > 0 {
		t.Errorf("staging objects left after clean stops: %s", firstN(rep.Staging, 10))
	}
	requireNoUploads(t, b.c, b.bucket, b.prefix, rep)
	requireOwnFiles(t, ctx, d)
	requireVerify(t, env, b.destFlags()...)
	resends := 0
	for _, s := range fl.senders {
		resends += s.Resends()
	}
	report(t, "2 nodes (n1 multipart, n10 copy) on one prefix, %d SIGKILLs; %d batches, %d records verified exactly once in %d files (n1: %d, n10: %d), %d manifests; %d resends; longest recovery %s",
		kills, batches, records, rep.Files, rep.Nodes["n1"], rep.Nodes["n10"], rep.Manifests, resends, maxRecovery.Round(time.Millisecond))
}

// requireOwnFiles checks that every data file holds only records of its
// node's producers (producer ids start with "<node>-").
func requireOwnFiles(t testing.TB, ctx context.Context, d destReader) {
	t.Helper()
	objs, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		_, node, _, ok := dataFile(o.Path)
		if !ok {
			continue
		}
		data, err := d.Read(ctx, o.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'}) {
			var r record
			if json.Unmarshal(line, &r) == nil && !strings.HasPrefix(r.P, node+"-") {
				t.Errorf("%s, a file of node %s, holds a record of producer %s", o.Path, node, r.P)
				break
			}
		}
	}
}

// TestFencingSurvivesCrash: an init is durable before it answers, so a
// SIGKILL right after it cannot bring an older epoch back (I6); and a
// batch accepted but not prepared before the crash is forgotten, so the
// new epoch sends it again from the expected sequence number (I5).
func TestFencingSurvivesCrash(t *testing.T) {
	p := startEosink(t, "--node", "fence", "--checkpoint-interval", "0")
	dest := filepath.Join(p.cfg.DataDir, "files") // the default destination
	ctx := t.Context()
	old := mustRawProducer(ctx, t, p.URL, "zombie")
	rng, _ := testRand(t)
	k0 := batchKey{P: "zombie", S: "events", Q: 0}
	body0 := ndjson(makeRecords(rng, k0, 3, 8))
	if a := old.post(ctx, "events", &rawBatch{seq: 0, body: body0}, old.epoch, false); a.Status != http.StatusAccepted {
		t.Fatalf("old epoch seq 0: %d %s", a.Status, a.Code)
	}
	cur := mustRawProducer(ctx, t, p.URL, "zombie")
	if cur.epoch <= old.epoch {
		t.Fatalf("second init: epoch %d, first %d", cur.epoch, old.epoch)
	}
	p.Kill() // right after the init answered
	p.Restart()

	st, err := p.Producer(ctx, "zombie")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != cur.epoch {
		t.Errorf("after the crash: epoch %d, want %d (the init answered before the kill)", st.Epoch, cur.epoch)
	}
	// init is a barrier (I12): the old epoch's seq 0 was prepared before
	// the second init answered, so it survived the crash, committed.
	if ss := st.Streams["events"]; ss.NextSeq != 1 || ss.CommittedSeq != 0 {
		t.Errorf("after the crash: next_seq %d committed_seq %d, want 1 and 0 (init prepared seq 0 before answering)", ss.NextSeq, ss.CommittedSeq)
	}
	if a := old.post(ctx, "events", &rawBatch{seq: 1, body: body0}, old.epoch, false); a.Status != http.StatusConflict || a.Code != "producer_fenced" {
		t.Errorf("old epoch after the crash: %d %s, want 409 producer_fenced", a.Status, a.Code)
	}
	if a := cur.post(ctx, "events", &rawBatch{seq: 2, body: body0}, cur.epoch, false); a.Status != http.StatusConflict || a.Exp == nil || *a.Exp != 1 {
		t.Errorf("new epoch seq 2 after the crash: %d %s expected_seq %s, want 409 expected_seq 1", a.Status, a.Code, ptrStr(a.Exp))
	}
	if a := cur.post(ctx, "events", &rawBatch{seq: 0, body: body0}, cur.epoch, false); a.Status != http.StatusOK || !a.Write.Duplicate {
		t.Fatalf("new epoch resends seq 0: %d %s duplicate=%v, want 200 duplicate (committed)", a.Status, a.Code, a.Write.Duplicate)
	}
	if ck, err := p.Checkpoint(ctx); err != nil || ck.State != "committed" {
		t.Fatalf("checkpoint: %+v %v", ck, err)
	}
	if code := p.Term(); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	requireDest(t, invariant.LocalDest(dest), map[batchKey]int{k0: 3}, true)
}
