package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newRemoteRig is a rig whose committer is a fakeRemote over the rig's
// destination; the fake outlives engine restarts, as a bucket would.
func newRemoteRig(t *testing.T) (*rig, *fakeRemote) {
	t.Helper()
	r := newRig(t, nil)
	fake := newFakeRemote(local.New(r.fs, rigDest, rigStaging), rigNode)
	r.tweak = func(c *Config) {
		fake.Local = local.New(c.FS, rigDest, rigStaging)
		c.Committer, c.Publisher = fake, fake.Local
	}
	return r, fake
}

// failOn returns an onPrepare hook failing the files of stream.
func failOn(stream string) func(context.Context, committer.File) error {
	return func(_ context.Context, f committer.File) error {
		if f.Stream == stream {
			return errors.New("injected: connection cut after the upload started")
		}
		return nil
	}
}

func intentCount(t *testing.T, e *Engine) int {
	t.Helper()
	in, err := e.store.Intents()
	if err != nil {
		t.Fatal(err)
	}
	return len(in)
}

// I10: a checkpoint aborts after one file's upload started; the remote
// abort fails too. The uploads must not be forgotten: the next start
// aborts them.
func TestFailedAbortKeepsIntentForRecovery(t *testing.T) {
	r, fake := newRemoteRig(t)
	e := r.start(nil)
	abortWithAbortDown(t, r, fake, e)
	if got := fake.Uploads(); len(got) != 2 {
		t.Fatalf("uploads after the failed aborts: %v, want both files' uploads", got)
	}
	if n := intentCount(t, e); n != 2 {
		t.Errorf("intents after failed aborts: %d, want 2 (kept until their abort succeeds)", n)
	}
	fake.set(func(f *fakeRemote) { f.onPrepare, f.abortDown = nil, false })
	r.stop()
	e = r.start(nil)
	if got := fake.Uploads(); len(got) != 0 {
		t.Fatalf("uploads after recovery: %v, want none (I10)", got)
	}
	if n := intentCount(t, e); n != 0 {
		t.Errorf("intents after recovery: %d, want 0", n)
	}
	// And the service goes on.
	mustSend(t, e, nil, "a", 10, 2)
	r.commit()
	r.check(invariant.Expect{Exact: true, Must: map[invariant.BatchID]bool{{Stream: "a", Seq: 10}: true},
		MustNot: map[invariant.BatchID]bool{{Stream: "a", Seq: 0}: true, {Stream: "b", Seq: 1}: true}})
}

// I10: SIGTERM's final checkpoint runs past the shutdown timeout while an
// upload is under way; Close cancels it and the aborts with it. The next
// start must abort the upload.
func TestShutdownCutLeavesNoUploads(t *testing.T) {
	r, fake := newRemoteRig(t)
	e := r.start(nil)
	mustSend(t, e, nil, "a", 1, 2)
	started := make(chan struct{})
	fake.set(func(f *fakeRemote) {
		f.onPrepare = func(ctx context.Context, _ committer.File) error {
			close(started)
			<-ctx.Done() // a slow upload: only the engine's end stops it
			return ctx.Err()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() {
		<-started
		cancel() // the shutdown timeout expires during the upload
	}()
	if err := e.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown: nil error, want the final checkpoint cut off")
	}
	r.e = nil
	if got := fake.Uploads(); len(got) != 1 {
		t.Fatalf("uploads after the cut shutdown: %v, want the one started", got)
	}
	fake.set(func(f *fakeRemote) { f.onPrepare = nil })
	e = r.start(nil)
	if got := fake.Uploads(); len(got) != 0 {
		t.Fatalf("uploads after the restart: %v, want none (I10)", got)
	}
	if n := intentCount(t, e); n != 0 {
		t.Errorf("intents after recovery: %d, want 0", n)
	}
}

// abortWithAbortDown writes to streams "a" and "b", then checkpoints with
// b's prepare failing and every abort failing, so the checkpoint aborts and
// leaves its intents and uploads behind.
func abortWithAbortDown(t *testing.T, r *rig, fake *fakeRemote, e *Engine) {
	t.Helper()
	for i, s := range []string{"a", "b"} {
		mustSend(t, e, nil, s, int64(i), 2)
	}
	fake.set(func(f *fakeRemote) { f.onPrepare, f.abortDown = failOn("b"), true })
	if res := r.checkpoint(); res.State != recovery.Aborted {
		t.Fatalf("checkpoint: %+v, want aborted", res)
	}
}

// I10 without a restart: once the remote heals, the orphan sweep aborts
// what the failed aborts left, and counts it.
func TestSweepAfterFailedAbortHeals(t *testing.T) {
	r, fake := newRemoteRig(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg, nil)
	tweak := r.tweak
	r.tweak = func(c *Config) {
		tweak(c)
		c.Hooks = metrics.Hooks()
	}
	e := r.start(nil)
	abortWithAbortDown(t, r, fake, e)
	// Still down: the sweep fails and keeps everything.
	if _, err := e.Sweep(t.Context()); err == nil {
		t.Error("sweep with the remote down: nil error")
	}
	if got := fake.Uploads(); len(got) != 2 {
		t.Fatalf("uploads after a failed sweep: %v", got)
	}
	fake.set(func(f *fakeRemote) { f.onPrepare, f.abortDown = nil, false })
	res, err := e.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.Uploads(); len(got) != 0 {
		t.Fatalf("uploads after the sweep: %v, want none (I10)", got)
	}
	if n := intentCount(t, e); n != 0 {
		t.Errorf("intents after the sweep: %d, want 0", n)
	}
	// A leftover no record names is removed too, and counted by kind.
	fake.startUpload("a/dt=2026-11-29/hour=09/" + layout.PartName(rigNode, 900, 0, "ndjson"))
	res2, err := e.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Intents) != 2 || len(res2.Removed) != 1 {
		t.Errorf("sweeps: %+v then %+v; want 2 intents aborted, then 1 upload removed", res, res2)
	}
	body := scrape(t, reg)
	for _, want := range []string{`eosink_orphans_removed_total{kind="intent"} 2`,
		`eosink_orphans_removed_total{kind="object"} 0`, `eosink_orphans_removed_total{kind="upload"} 1`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The periodic sweep removes an upload no record names (a crash between
// the request that started it and the record, a committer's retry, a lost
// state store) without being asked.
func TestPeriodicSweep(t *testing.T) {
	r, fake := newRemoteRig(t)
	tweak := r.tweak
	r.tweak = func(c *Config) { tweak(c); c.SweepInterval = 10 * time.Millisecond }
	r.start(nil)
	fake.startUpload("a/dt=2026-11-29/hour=09/" + layout.PartName(rigNode, 3, 0, "ndjson"))
	deadline := time.Now().Add(10 * time.Second)
	for len(fake.Uploads()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("uploads 10s later: %v", fake.Uploads())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The sweep never touches another node's uploads, nor the uploads of the
// checkpoint the engine is preparing right now; it removes this node's
// unclaimed ones.
func TestSweepSparesInflightAndOtherNodes(t *testing.T) {
	r, fake := newRemoteRig(t)
	e := r.start(nil)
	other := "a/dt=2026-11-29/hour=09/" + layout.PartName("n2", 1, 0, "ndjson")
	otherManifest := recovery.ManifestPath("n2", 1)
	orphan := "a/dt=2026-11-29/hour=09/" + layout.PartName(rigNode, 900, 0, "ndjson")
	for _, n := range []string{other, otherManifest, orphan} {
		fake.startUpload(n)
	}
	mustSend(t, e, nil, "a", 1, 2)
	inPrepare, release := make(chan string, 1), make(chan struct{})
	fake.set(func(f *fakeRemote) {
		f.onPrepare = func(ctx context.Context, file committer.File) error {
			inPrepare <- file.Final
			<-release
			return nil
		}
	})
	done := make(chan CheckpointResult, 1)
	go func() {
		res, _ := e.Checkpoint(context.Background())
		done <- res
	}()
	inflight := <-inPrepare
	res, err := e.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 1 || res.Removed[0].Name != orphan {
		t.Errorf("sweep removed %+v, want only %s", res.Removed, orphan)
	}
	want := []string{other, inflight, otherManifest}
	if got := fake.Uploads(); !slices.Equal(got, sortedCopy(want)) {
		t.Errorf("uploads after the sweep: %v, want %v", got, sortedCopy(want))
	}
	if n := intentCount(t, e); n != 1 {
		t.Errorf("intents after the sweep: %d, want the in-flight file's", n)
	}
	close(release)
	select {
	case ck := <-done:
		if ck.State != recovery.Committed {
			t.Fatalf("in-flight checkpoint: %+v, want committed", ck)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("in-flight checkpoint not committed 10s later: %+v", e.Status())
	}
	if got := fake.Uploads(); !slices.Equal(got, sortedCopy([]string{other, otherManifest})) {
		t.Errorf("uploads after the commit: %v, want only the other node's", got)
	}
	r.check(invariant.Expect{Exact: true, Must: map[invariant.BatchID]bool{{Stream: "a", Seq: 1}: true}})
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// scrape returns what /metrics would show for reg.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
