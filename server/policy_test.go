package server

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// TestClassify: every sentinel has one verdict, whichever loop meets it
// (I14).
func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want verdict
	}{
		{errors.New("connection refused"), verdictRetry},
		{fmt.Errorf("x: %w", committer.ErrTransient), verdictRetry},
		{fmt.Errorf("write: %w", ErrDiskFull), verdictRetry},
		{fmt.Errorf("sync dir: %w", durable.ErrSync), verdictStop},
		{fmt.Errorf("%w: boom", recovery.ErrWriteFailed), verdictStop},
		{fmt.Errorf("%w: row", recovery.ErrCorrupt), verdictStop},
		{fmt.Errorf("renew: %w", ErrLeaseLost), verdictStop},
		{fmt.Errorf("take: %w", ErrLeaseHeld), verdictStop},
		{fmt.Errorf("lease: %w", committer.ErrUnsupported), verdictStop},
		{fmt.Errorf("commit: %w", committer.ErrLost), verdictAbort},
		{fmt.Errorf("commit: %w", committer.ErrConflict), verdictAbort},
		{fmt.Errorf("rename: %w", syscall.ENOTDIR), verdictAbort},
		{fmt.Errorf("rename: %w", syscall.ENAMETOOLONG), verdictAbort},
		{fmt.Errorf("rename: %w", syscall.EISDIR), verdictAbort},
		// A stop wins over what it is joined with.
		{errors.Join(fmt.Errorf("a: %w", committer.ErrLost), fmt.Errorf("b: %w", durable.ErrSync)), verdictStop},
	}
	for _, tc := range tests {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// lost: of the abort verdicts, only a file gone for good.
	for err, want := range map[error]bool{
		fmt.Errorf("commit: %w", committer.ErrLost):                                               true,
		fmt.Errorf("commit: %w", committer.ErrConflict):                                           false,
		fmt.Errorf("rename: %w", syscall.ENOTDIR):                                                 false,
		fmt.Errorf("x: %w", committer.ErrTransient):                                               false,
		errors.Join(fmt.Errorf("a: %w", committer.ErrLost), fmt.Errorf("b: %w", durable.ErrSync)): false,
	} {
		if got := lost(err); got != want {
			t.Errorf("lost(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestReplayFailedDirSyncStops: a failed fsync of the destination
// directory while the replay re-commits a prepared checkpoint stops the
// engine, as it does on the live path; the checkpoint is not recorded
// committed on a second try that finds the file renamed (fsyncgate). The
// next start commits it.
func TestReplayFailedDirSyncStops(t *testing.T) {
	base := faultfs.NewCrashFS()
	var sw faultfs.SwapInjector
	fs := faultfs.NewInjectFS(base, &sw)
	r := newRig(t, fs)
	e := r.start(nil)
	ps := r.initState("p")
	mustSend(t, e, &Producer{ID: "p", Epoch: ps.Epoch}, "s", 0, 2)
	// The commit's rename fails (retried): the checkpoint stays prepared.
	var renames atomic.Int64
	sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging) {
			renames.Add(1)
			return syscall.EIO
		}
		return nil
	}))
	done := make(chan struct{})
	go func() { defer close(done); _, _ = e.Checkpoint(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for renames.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if renames.Load() < 2 {
		t.Fatal("commit never tried the rename")
	}
	r.stop()
	<-done
	// The replay: the rename works, the destination directory's fsync
	// fails once.
	var syncs atomic.Int64
	sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpSync && strings.HasPrefix(op.Path, rigDest) && syncs.Add(1) == 1 {
			return syscall.EIO
		}
		return nil
	}))
	e2, err := Open(r.config(fs))
	if err != nil {
		t.Fatal(err)
	}
	r.e = e2
	if !waitFailed(t, e2, 10*time.Second) {
		t.Fatalf("engine went on after a failed fsync in the replay; status %+v", e2.Status())
	}
	if !errors.Is(e2.Err(), durable.ErrSync) {
		t.Fatalf("engine error %v, want ErrSync", e2.Err())
	}
	if syncs.Load() != 1 {
		t.Fatalf("the replay tried %d destination fsyncs, want 1: a failed fsync is never retried", syncs.Load())
	}
	sw.Set(nil)
	r.stop()
	st, err := recovery.OpenWith(r.storePath, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := st.Pending()
	_ = st.Close()
	if err != nil || len(pending) != 1 {
		t.Fatalf("after the failed replay: %d prepared checkpoints (%v), want 1 still prepared", len(pending), err)
	}
	r.start(nil)
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true}, Exact: true})
}

// blockPartition puts a file that is not eosink's where the folder of
// stream's partition of now goes (its own parent made), so that a part
// file's final name there is refused for good (ENOTDIR). It returns the
// file's path: remove it before the end, or the checker calls it a stray.
func blockPartition(t *testing.T, r *rig, e *Engine, stream string) string {
	t.Helper()
	blocker := path.Join(rigDest, stream, path.Dir(Partition(e.cfg.Now())))
	if err := r.fs.MkdirAll(path.Dir(blocker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, blocker, []byte("not eosink's"), 0o644); err != nil {
		t.Fatal(err)
	}
	return blocker
}

// TestUnplaceableFileDoesNotWedge: a prepared checkpoint whose part file
// the destination refuses for good (here a file where the partition path
// needs a folder) is committed under its displaced name, so it and every
// later checkpoint commit; the manifest names the file where it is. Before,
// the commit was retried forever, restarts included, and held back every
// later checkpoint of every stream.
func TestUnplaceableFileDoesNotWedge(t *testing.T) {
	r := newRig(t, faultfs.NewCrashFS())
	e := r.start(nil)
	blocker := blockPartition(t, r, e, "s")
	mustSend(t, e, nil, "s", 1, 3)
	mustSend(t, e, nil, "t", 1, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint with an unplaceable file: %+v, %v (status %+v), want committed", res, err, e.Status())
	}
	mustSend(t, e, nil, "t", 2, 2)
	r.commit()
	m := readManifest(t, r.fs, res.ID)
	var displaced int
	for _, f := range m.Files {
		if _, _, ok := layout.ParseDisplacedName(f.Path); ok {
			displaced++
			if _, err := r.fs.Stat(path.Join(rigDest, f.Path)); err != nil {
				t.Errorf("manifest names %s: %v", f.Path, err)
			}
		}
	}
	if displaced != 1 {
		t.Fatalf("manifest of checkpoint %d: %d displaced files, want 1: %+v", res.ID, displaced, m.Files)
	}
	if st := e.Status(); st.Stuck != "" || st.Displaced != 1 {
		t.Fatalf("status after the displaced commit: stuck %q, displaced %d; want none and 1", st.Stuck, st.Displaced)
	}
	if err := r.fs.Remove(blocker); err != nil { // not eosink's: the checker would call it a stray
		t.Fatal(err)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true, {Stream: "t", Seq: 1}: true, {Stream: "t", Seq: 2}: true}, Exact: true})
}

// TestUnplaceableFileReplay: the same, found by the replay of a prepared
// checkpoint: the node gets ready, and a re-run of the replay after the
// displaced rename (a crash right after it) finds the file committed.
func TestUnplaceableFileReplay(t *testing.T) {
	r := newRig(t, faultfs.NewCrashFS())
	e := r.start(nil)
	mustSend(t, e, nil, "s", 1, 3)
	// Prepared, then the engine stops before the commit.
	e.fin.Fence = func() error { return errors.New("held for the test") }
	done := make(chan struct{})
	go func() { defer close(done); _, _ = e.Checkpoint(t.Context()) }()
	for e.Status().Stuck == "" {
		time.Sleep(time.Millisecond)
	}
	r.stop()
	<-done
	day := Partition(time.Now())
	if err := r.fs.MkdirAll(path.Join(rigDest, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, path.Join(rigDest, "s", path.Dir(day)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	if st := e.Status(); st.LastDone == 0 {
		t.Fatalf("after the replay: %+v, want the prepared checkpoint committed", st)
	}
	r.stop()
	e = r.start(nil) // a second replay finds nothing to do
	if err := r.fs.Remove(path.Join(rigDest, "s", path.Dir(day))); err != nil {
		t.Fatal(err)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true}, Exact: true})
}

func readManifest(t *testing.T, fs afero.Fs, id uint64) *layout.Manifest {
	t.Helper()
	name := layout.ManifestName(rigNode, id)
	f, err := fs.Open(path.Join(rigDest, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := layout.DecodeManifest(name, f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLostFileRecordedLost: a prepared checkpoint whose staged data is
// gone (the data disk lost mid-commit) cannot be cured by a retry, nor by
// an operator: it is recorded committed without the lost file, which
// Status counts (LostFiles), not held stuck for good with every later
// checkpoint behind it (as before: StuckPermanent, /readyz 503 for
// ever, and a restart's replay never ready; TestReplayLostStaging). A
// retryable failure before it is stuck, not permanent.
func TestLostFileRecordedLost(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	mustSend(t, e, nil, "s", 1, 3)
	var lost atomic.Bool
	e.fin.Fence = func() error {
		if !lost.Load() {
			return errors.New("held for the test")
		}
		return nil
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = e.Checkpoint(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Status().Stuck == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := e.Status(); st.StuckPermanent || st.Stuck == "" {
		t.Fatalf("a retryable commit failure: %+v, want stuck, not permanent", st)
	}
	names, err := afero.Glob(r.fs, rigStaging+"/*")
	if err != nil || len(names) == 0 {
		t.Fatalf("staging files: %v %v", names, err)
	}
	for _, n := range names {
		if err := r.fs.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
	lost.Store(true) // the fence lets the commit through: it finds nothing
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the commit of a checkpoint whose staged data is lost is still tried after 10 s: %+v", e.Status())
	}
	st := e.Status()
	if st.Stuck != "" || st.StuckPermanent || st.LostFiles != int64(len(names)) || st.LastDone != 1 {
		t.Fatalf("status with a lost file: %+v, want checkpoint 1 committed, %d files lost, nothing stuck", st, len(names))
	}
	mustSend(t, e, nil, "s", 2, 1)
	r.commit()
	r.broken = "the test deleted a prepared checkpoint's staged data"
}

// A displaced part file is named where it is in the checkpoint's answer
// and in its record (GET /v1/checkpoints/{id}), as in its manifest.
// Failed before: both named the refused final name, where no file is (its
// download was 404, or 500 under a file).
func TestDisplacedFileNamedWhereItIs(t *testing.T) {
	r := newRig(t, faultfs.NewCrashFS())
	e := r.start(nil)
	blocker := blockPartition(t, r, e, "s")
	mustSend(t, e, nil, "s", 1, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint: %+v, %v", res, err)
	}
	stored, err := e.store.Get(res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for what, files := range map[string][]committer.File{"answer": res.Files, "record": stored.Files} {
		if len(files) != 1 {
			t.Fatalf("%s: %d files, want 1", what, len(files))
		}
		if _, _, ok := layout.ParseDisplacedName(files[0].Final); !ok {
			t.Errorf("%s names %s, want its displaced name", what, files[0].Final)
		}
		if _, err := r.fs.Stat(path.Join(rigDest, files[0].Final)); err != nil {
			t.Errorf("%s names %s: %v", what, files[0].Final, err)
		}
	}
	if err := r.fs.Remove(blocker); err != nil {
		t.Fatal(err)
	}
}
