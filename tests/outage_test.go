package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/testsrv"
)

// outageRig is one eosink over its own bucket of a MinIO server that the
// test stops and starts, optionally through an s3Proxy.
type outageRig struct {
	t      *testing.T
	srv    *testsrv.MinIO
	b      s3Bucket
	proxy  *s3Proxy
	p      *proc
	prod   *rawProducer
	stream string
	rng    *rand.Rand
	want   map[batchKey]int
	bodies map[int64][]byte
}

func newOutageRig(t *testing.T, srv *testsrv.MinIO, mode string, viaProxy bool) *outageRig {
	t.Helper()
	if err := ensureMinIO(t, srv); err != nil {
		t.Fatal(err)
	}
	rng, _ := testRand(t)
	r := &outageRig{t: t, srv: srv, b: newS3Bucket(t, srv, "outage"), stream: "outage", rng: rng,
		want: map[batchKey]int{}, bodies: map[int64][]byte{}}
	endpoint := srv.Endpoint
	if viaProxy {
		r.proxy = startS3Proxy(t, srv.Endpoint)
		endpoint = r.proxy.Addr
	}
	r.p = newProc(t, workDir(t), procConfig{
		Args: []string{"--dest", r.b.url(), "--s3-endpoint", endpoint, "--s3-insecure",
			// --commit-linger 0: a waiting write must not start its own
			// checkpoint; the test chooses when checkpoints run.
			"--s3-commit", mode, "--node", "e2e", "--checkpoint-interval", "0", "--commit-linger", "0"},
		Env:          r.b.env(),
		ReadyTimeout: 90 * time.Second,
	})
	// MinIO is started again at the end, whatever happened: the next
	// subtest and the cleanup of the data need it.
	t.Cleanup(func() { _ = ensureMinIO(t, srv) })
	r.p.StartReady()
	r.prod = mustRawProducer(t.Context(), t, r.p.URL, "outage-producer")
	return r
}

// ensureMinIO starts srv if it is stopped.
func ensureMinIO(t testing.TB, srv *testsrv.MinIO) error {
	c, err := srv.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = c.ListBuckets(ctx)
	cancel()
	if err == nil {
		return nil
	}
	return srv.Restart(context.Background())
}

// body returns batch seq's body, the same on every send.
func (r *outageRig) body(seq int64) []byte {
	if b, ok := r.bodies[seq]; ok {
		return b
	}
	k := batchKey{P: r.prod.ID(), S: r.stream, Q: seq}
	recs := makeRecords(r.rng, k, 1+r.rng.IntN(10), 32)
	r.want[k] = len(recs)
	r.bodies[seq] = ndjson(recs)
	return r.bodies[seq]
}

// post sends batch seq once and returns the answer.
func (r *outageRig) post(seq int64, wait bool) answer {
	r.prod.mu.Lock()
	epoch := r.prod.epoch
	r.prod.mu.Unlock()
	return r.prod.post(r.t.Context(), r.stream, &rawBatch{seq: seq, body: r.body(seq)}, epoch, wait)
}

// mustPost sends batch seq and requires status.
func (r *outageRig) mustPost(seq int64, status int) answer {
	r.t.Helper()
	a := r.post(seq, false)
	if a.Status != status {
		r.t.Fatalf("send seq %d: got %d %s (err %v), want %d", seq, a.Status, a.Code, a.Err, status)
	}
	return a
}

// checkpoint runs one and requires state.
func (r *outageRig) checkpoint(state string) checkpointAnswer {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	a, err := r.p.Checkpoint(ctx)
	if err != nil {
		r.t.Fatalf("POST /v1/checkpoints: %v", err)
	}
	if a.State != state {
		r.t.Fatalf("checkpoint %d: %s (%s) after %s, want %s", a.ID, a.State, a.Error, time.Since(began).Round(time.Millisecond), state)
	}
	r.t.Logf("checkpoint %d %s in %s", a.ID, a.State, time.Since(began).Round(time.Millisecond))
	return a
}

// finish stops the service cleanly and checks that exactly the batches
// sent are in the bucket, once each.
func (r *outageRig) finish() {
	r.t.Helper()
	if code := r.p.Term(); code != 0 {
		r.t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	rep := requireDest(r.t, r.b.dest(), r.want, true)
	if len(rep.Staging) > 0 {
		r.t.Errorf("staging objects left: %s", firstN(rep.Staging, 10))
	}
	requireNoUploads(r.t, r.b.c, r.b.bucket, r.b.prefix, rep)
	requireVerify(r.t, r.b.env(), r.b.destFlags()...)
	r.t.Logf("%d batches, %d records exactly once in %d files", len(rep.Batches), rep.Records, rep.Files)
}

// TestS3Outage stops MinIO under eosink at two steps of a checkpoint:
//
//   - precommit: MinIO is down when the checkpoint starts. It must abort,
//     the producer must be told (the ?wait=commit request in flight gets
//     503 aborted with expected_seq, a later send 409 expected_seq), and
//     once MinIO is back the resent batches commit exactly once.
//   - commit: MinIO goes down right after the "prepared" record, at the
//     first commit request (a proxy stops it then, deterministically). The
//     checkpoint must stay prepared with /readyz 200 and eosink_commit_stuck
//     1 while MinIO is down, and commit once it is back (I4), in both commit
//     modes.
//   - commit-crash: as commit, then eosink is SIGKILLed while stuck. The
//     restarted service must not report ready while it cannot re-commit,
//     and must commit once MinIO is back.
func TestS3Outage(t *testing.T) {
	if testing.Short() {
		t.Skip("S3 outage: not in -short mode")
	}
	srv := testsrv.StartMinIO(t)

	t.Run("precommit", func(t *testing.T) {
		r := newOutageRig(t, srv, "multipart", false)
		// Two batches committed before the outage.
		r.mustPost(0, http.StatusAccepted)
		r.mustPost(1, http.StatusAccepted)
		r.checkpoint("committed")
		// Three accepted into the checkpoint that will abort, and one
		// more waiting for it.
		for seq := int64(2); seq <= 4; seq++ {
			r.mustPost(seq, http.StatusAccepted)
		}
		waited := make(chan answer, 1)
		go func() { waited <- r.post(5, true) }()
		waitAccepted(t, t.Context(), r.p, batchKey{P: r.prod.ID(), S: r.stream, Q: 5})

		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		ab := r.checkpoint("aborted")
		a := <-waited
		if a.Status != http.StatusServiceUnavailable || a.Code != "aborted" || a.Exp == nil || *a.Exp != 2 {
			t.Errorf("?wait=commit in the aborted checkpoint: %d %s expected_seq %v, want 503 aborted expected_seq 2", a.Status, a.Code, ptrStr(a.Exp))
		}
		if later := r.post(6, false); later.Status != http.StatusConflict || later.Code != "out_of_order_sequence" || later.Exp == nil || *later.Exp != 2 {
			t.Errorf("send after the abort: %d %s expected_seq %v, want 409 out_of_order_sequence expected_seq 2", later.Status, later.Code, ptrStr(later.Exp))
		}
		st, err := r.p.Producer(t.Context(), r.prod.ID())
		if err != nil {
			t.Fatal(err)
		}
		if ss := st.Streams[r.stream]; ss.NextSeq != 2 || ss.CommittedSeq != 1 {
			t.Errorf("producer after the abort: next_seq %d committed_seq %d, want 2 and 1", ss.NextSeq, ss.CommittedSeq)
		}
		if ok, why := r.p.Ready(t.Context()); !ok {
			t.Errorf("/readyz during the outage, after an abort: %s", why)
		}
		got, err := r.p.CheckpointState(t.Context(), ab.ID)
		if err != nil || got.State != "aborted" {
			t.Errorf("GET /v1/checkpoints/%d: %+v, %v; want aborted", ab.ID, got, err)
		}

		if err := srv.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		for seq := int64(2); seq <= 6; seq++ {
			r.mustPost(seq, http.StatusAccepted)
		}
		r.checkpoint("committed")
		r.finish()
	})

	for _, mode := range []string{"multipart", "copy"} {
		t.Run("commit-"+mode, func(t *testing.T) {
			r := newOutageRig(t, srv, mode, true)
			for seq := int64(0); seq < 10; seq++ {
				r.mustPost(seq, http.StatusAccepted)
			}
			id := r.stuckCommit()
			// Writes still go into the next checkpoint meanwhile.
			for seq := int64(10); seq < 13; seq++ {
				r.mustPost(seq, http.StatusAccepted)
			}
			r.holdStuck(id, 2*time.Second)

			if err := srv.Restart(t.Context()); err != nil {
				t.Fatal(err)
			}
			r.waitState(id, "committed", 60*time.Second)
			r.waitMetric("eosink_commit_stuck", 0, 10*time.Second)
			r.checkpoint("committed")
			r.finish()
			report(t, "MinIO stopped right after checkpoint %d was prepared (at %s): it stayed prepared, ready, stuck=1 while down, and committed after MinIO returned", id, r.hitDesc())
		})
	}

	t.Run("commit-crash", func(t *testing.T) {
		r := newOutageRig(t, srv, "multipart", true)
		for seq := int64(0); seq < 10; seq++ {
			r.mustPost(seq, http.StatusAccepted)
		}
		id := r.stuckCommit()
		for seq := int64(10); seq < 13; seq++ {
			r.mustPost(seq, http.StatusAccepted)
		}
		// Crash while stuck; recovery must commit checkpoint id before it
		// reports ready, so it is not ready while MinIO is down. The test
		// acts as a supervisor: a service that exits is started again.
		r.p.Kill()
		r.p.Start()
		exits := 0
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if ok, _ := r.p.Ready(t.Context()); ok {
				t.Fatalf("restarted service reports ready while prepared checkpoint %d cannot be committed (MinIO down)", id)
			}
			if !r.p.Running() {
				exits++
				r.p.Kill() // reap
				time.Sleep(200 * time.Millisecond)
				r.p.Start()
			}
			time.Sleep(50 * time.Millisecond)
		}
		if exits > 0 {
			report(t, "FINDING: the restarted service exited %d times while S3 was down instead of recovering with retries (log %s: %s)",
				exits, r.p.LogPath, lastMatching(r.p.LogPath, "eosink: "))
		}
		if err := srv.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		readyBy := time.Now().Add(90 * time.Second)
		for {
			if ok, _ := r.p.Ready(t.Context()); ok {
				break
			}
			if !r.p.Running() {
				r.p.Kill()
				r.p.Start()
			}
			if time.Now().After(readyBy) {
				t.Fatalf("not ready 90s after MinIO returned; log %s:\n%s", r.p.LogPath, r.p.logTail(20))
			}
			time.Sleep(20 * time.Millisecond)
		}
		r.waitState(id, "committed", 10*time.Second)
		// Batches 10..12 were accepted but not prepared: lost in the
		// crash, the producer is told to resend them.
		if a := r.post(13, false); a.Status != http.StatusConflict || a.Exp == nil || *a.Exp != 10 {
			t.Errorf("send seq 13 after the crash: %d %s expected_seq %v, want 409 expected_seq 10", a.Status, a.Code, ptrStr(a.Exp))
		}
		for seq := int64(10); seq <= 13; seq++ {
			r.mustPost(seq, http.StatusAccepted)
		}
		r.checkpoint("committed")
		r.finish()
	})
}

// stuckCommit arms the proxy to stop MinIO at the first commit request,
// runs a checkpoint, and waits until it is prepared and stuck: /readyz 200,
// eosink_commit_stuck 1. It returns the checkpoint's id.
func (r *outageRig) stuckCommit() uint64 {
	t := r.t
	t.Helper()
	r.proxy.Arm(isCommitRequest, func() {
		if err := r.srv.Stop(); err != nil {
			t.Errorf("stop minio: %v", err)
		}
	})
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		_, _ = r.p.Checkpoint(ctx) // ends when the checkpoint commits, or the service stops
	}()
	eventually(t, 30*time.Second, 5*time.Millisecond, func() bool { hit, _ := r.proxy.Hit(); return hit }, func() string {
		return fmt.Sprintf("no commit request reached the proxy in 30s; log %s:\n%s", r.p.LogPath, r.p.logTail(20))
	})
	var list struct {
		Checkpoints []checkpointAnswer `json:"checkpoints"`
	}
	if err := r.p.call(t.Context(), http.MethodGet, "/v1/checkpoints?limit=1", nil, &list); err != nil || len(list.Checkpoints) == 0 {
		t.Fatalf("GET /v1/checkpoints: %v %+v", err, list)
	}
	ck := list.Checkpoints[0]
	if ck.State != "prepared" {
		t.Fatalf("checkpoint %d at its first commit request: state %s, want prepared", ck.ID, ck.State)
	}
	r.waitMetric("eosink_commit_stuck", 1, 60*time.Second)
	return ck.ID
}

// holdStuck checks for d that checkpoint id stays prepared, the service
// ready and eosink_commit_stuck 1.
func (r *outageRig) holdStuck(id uint64, d time.Duration) {
	t := r.t
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ck, err := r.p.CheckpointState(t.Context(), id)
		if err != nil || ck.State != "prepared" {
			t.Fatalf("checkpoint %d while MinIO is down: %+v, %v; want prepared", id, ck, err)
		}
		if ok, why := r.p.Ready(t.Context()); !ok {
			t.Fatalf("/readyz while a commit is stuck: %s", why)
		}
		if v, err := r.p.Metric(t.Context(), "eosink_commit_stuck"); err != nil || v != 1 {
			t.Fatalf("eosink_commit_stuck while MinIO is down: %v, %v; want 1", v, err)
		}
	}
	if v, err := r.p.Metric(t.Context(), "eosink_commit_retries_total"); err != nil || v < 1 {
		t.Errorf("eosink_commit_retries_total while stuck: %v, %v; want >= 1", v, err)
	}
}

func (r *outageRig) waitState(id uint64, state string, d time.Duration) {
	t := r.t
	t.Helper()
	eventuallyValue(t, d, 20*time.Millisecond,
		func() (checkpointAnswer, error) { return r.p.CheckpointState(t.Context(), id) },
		func(ck checkpointAnswer) bool { return ck.State == state },
		func(ck checkpointAnswer, err error) string {
			return fmt.Sprintf("checkpoint %d not %s after %s: %+v, %v; log %s", id, state, d, ck, err, r.p.LogPath)
		})
}

func (r *outageRig) waitMetric(name string, want float64, d time.Duration) {
	t := r.t
	t.Helper()
	eventuallyValue(t, d, 20*time.Millisecond,
		func() (float64, error) { return r.p.Metric(t.Context(), name) },
		func(v float64) bool { return v == want },
		func(v float64, err error) string {
			return fmt.Sprintf("%s = %v (%v) after %s, want %v", name, v, err, d, want)
		})
}

func (r *outageRig) hitDesc() string {
	_, d := r.proxy.Hit()
	return d
}

// lastMatching returns the last line of the file that contains sub.
func lastMatching(path, sub string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	last := ""
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, sub) {
			last = l
		}
	}
	return last
}

func ptrStr(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
