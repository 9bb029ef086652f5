package server

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
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

// errRemoteDown is what fakeRemote answers while it is down.
var errRemoteDown = fmt.Errorf("fake remote down: %w", committer.ErrTransient)

// fakeRemote is an in-memory stand-in for an object store that prepares
// remotely, as S3 does: Prepare starts an "upload" (kept in memory, keyed by
// the final name), Commit completes it (the file is renamed by a local
// committer underneath, so the invariant checker sees the destination),
// Abort removes every upload on the file's name. While down, every remote
// call fails; abortDown fails only the aborts and removals — an abort
// that fails, then heals.
type fakeRemote struct {
	*local.Local
	node string

	mu        sync.Mutex
	seq       int
	uploads   map[string]fakeUpload // by upload id
	down      bool
	abortDown bool
	// onPrepare runs in Prepare after the upload started; an error fails
	// the Prepare and leaves the upload, as a cut connection would.
	onPrepare func(ctx context.Context, f committer.File) error
	aborts    int // failed abort calls
}

type fakeUpload struct {
	name      string
	initiated time.Time
}

var (
	_ committer.Committer      = (*fakeRemote)(nil)
	_ committer.RemotePreparer = (*fakeRemote)(nil)
	_ committer.Sweeper        = (*fakeRemote)(nil)
)

func newFakeRemote(l *local.Local, node string) *fakeRemote {
	return &fakeRemote{Local: l, node: node, uploads: map[string]fakeUpload{}}
}

func (f *fakeRemote) PreparesRemotely() {}

func (f *fakeRemote) set(fn func(f *fakeRemote)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// Uploads returns the names of the incomplete uploads, sorted.
func (f *fakeRemote) Uploads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, u := range f.uploads {
		out = append(out, u.name)
	}
	sort.Strings(out)
	return out
}

// startUpload adds an upload as a crash after the request would leave it.
func (f *fakeRemote) startUpload(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("up%d", f.seq)
	f.uploads[id] = fakeUpload{name: name, initiated: time.Now()}
	return id
}

func (f *fakeRemote) Prepare(ctx context.Context, file committer.File) (committer.File, error) {
	if err := ctx.Err(); err != nil {
		return file, err
	}
	f.mu.Lock()
	down, hook := f.down, f.onPrepare
	f.mu.Unlock()
	if down {
		return file, errRemoteDown
	}
	file.UploadID = f.startUpload(file.Final)
	if hook != nil {
		if err := hook(ctx, file); err != nil {
			return file, fmt.Errorf("prepare %s: %w", file.Final, err)
		}
	}
	return f.Local.Prepare(ctx, file)
}

// CommitUnsynced is Commit: a remote commit owes no sync. Defined so that
// the embedded local committer's batch commit (committer.BatchCommitter)
// is not promoted past the fake's uploads.
func (f *fakeRemote) CommitUnsynced(ctx context.Context, file committer.File) (string, error) {
	return "", f.Commit(ctx, file)
}

// SyncCommits has nothing to sync (see CommitUnsynced).
func (f *fakeRemote) SyncCommits(context.Context, string) error { return nil }

func (f *fakeRemote) Commit(ctx context.Context, file committer.File) error {
	f.mu.Lock()
	if f.down {
		f.mu.Unlock()
		return errRemoteDown
	}
	delete(f.uploads, file.UploadID)
	f.mu.Unlock()
	return f.Local.Commit(ctx, file)
}

func (f *fakeRemote) Abort(ctx context.Context, file committer.File) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("abort %s: %w", file.Final, err)
	}
	f.mu.Lock()
	if f.down || f.abortDown {
		f.aborts++
		f.mu.Unlock()
		return fmt.Errorf("abort %s: %w", file.Final, errRemoteDown)
	}
	for id, u := range f.uploads {
		if u.name == file.Final {
			delete(f.uploads, id)
		}
	}
	f.mu.Unlock()
	return f.Local.Abort(ctx, file)
}

// Leftovers lists the uploads of this node's part files and manifests.
func (f *fakeRemote) Leftovers(ctx context.Context) ([]committer.Leftover, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errRemoteDown
	}
	var out []committer.Leftover
	for id, u := range f.uploads {
		node, _, _, _, ok := layout.ParsePartName(path.Base(u.name))
		if !ok {
			node, _, ok = layout.ParseManifestName(u.name)
		}
		if !ok || node != f.node {
			continue
		}
		out = append(out, committer.Leftover{Kind: committer.LeftoverUpload, Name: u.name, Key: u.name, UploadID: id, Initiated: u.initiated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UploadID < out[j].UploadID })
	return out, nil
}

func (f *fakeRemote) RemoveLeftover(ctx context.Context, l committer.Leftover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.abortDown {
		return errRemoteDown
	}
	if _, ok := f.uploads[l.UploadID]; !ok || l.Kind != committer.LeftoverUpload {
		return fmt.Errorf("remove %s: %w", l.Key, committer.ErrNotFound)
	}
	delete(f.uploads, l.UploadID)
	return nil
}
