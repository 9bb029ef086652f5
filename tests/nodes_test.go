package tests

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
