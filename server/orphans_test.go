package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/invariant"
	"github.com/eosink/eosink/recovery"
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
	in, err := e.Store().Intents()
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
	for i, s := range []string{"a", "b"} {
		if _, err := send(e, nil, s, int64(i), 2); err != nil {
			t.Fatal(err)
		}
	}
	fake.set(func(f *fakeRemote) { f.onPrepare, f.abortDown = failOn("b"), true })
	if res := r.checkpoint(); res.State != recovery.Aborted {
		t.Fatalf("checkpoint: %+v, want aborted", res)
	}
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
	if _, err := send(e, nil, "a", 10, 2); err != nil {
		t.Fatal(err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed {
		t.Fatalf("checkpoint after recovery: %+v", res)
	}
	r.check(invariant.Expect{Exact: true, Must: map[invariant.BatchID]bool{{Stream: "a", Seq: 10}: true},
		MustNot: map[invariant.BatchID]bool{{Stream: "a", Seq: 0}: true, {Stream: "b", Seq: 1}: true}})
}

// I10: SIGTERM's final checkpoint runs past the shutdown timeout while an
// upload is under way; Close cancels it and the aborts with it. The next
// start must abort the upload.
func TestShutdownCutLeavesNoUploads(t *testing.T) {
	r, fake := newRemoteRig(t)
	e := r.start(nil)
	if _, err := send(e, nil, "a", 1, 2); err != nil {
		t.Fatal(err)
	}
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
