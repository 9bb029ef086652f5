package server

import (
	"context"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/minio/minio-go/v7"
	"github.com/spf13/afero"
)

// moveTree moves every file under from to the same relative path under
// to, as an operator's mv of a data dir would.
func moveTree(t *testing.T, fs afero.Fs, from, to string) {
	t.Helper()
	err := afero.Walk(fs, from, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := afero.ReadFile(fs, p)
		if err != nil {
			return err
		}
		dst := path.Join(to, strings.TrimPrefix(p, from))
		if err := fs.MkdirAll(path.Dir(dst), 0o755); err != nil {
			return err
		}
		return afero.WriteFile(fs, dst, b, fi.Mode())
	})
	if err == nil {
		err = fs.RemoveAll(from)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// partTemps lists the part files' staging files in dir (not a manifest
// an early publish staged there).
func partTemps(t *testing.T, fs afero.Fs, dir string) []string {
	t.Helper()
	temps, err := staging.List(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tmp := range temps {
		if strings.HasPrefix(path.Base(tmp), "part-") {
			out = append(out, tmp)
		}
	}
	return out
}

// TestReplayMovedDataDir: checkpoint c is prepared, its commit fails (the
// destination down) and the process stops; the operator then moves the
// data dir (staging files and the default file:// destination) and
// starts the node with the new --data-dir. The state store names c's
// staging files under the old path, where nothing is: the committer says
// ErrLost. The staged data is not lost, though: it is under the new
// staging dir. Recording c committed without it (the lost-file path) and
// then deleting the new staging dir's files as unprepared (the replay's
// clean-up) loses batches whose producers are told they are committed
// (I2, I7); a staging file recorded outside the staging dir is no
// evidence of a loss, and the start must not call it lost.
//
// Failed before (the lost-file fix, 8965b7b): ready at once, LostFiles 2,
// both staging files deleted, the resends committed duplicates of
// batches in no file.
func TestReplayMovedDataDir(t *testing.T) {
	r, h, l := lostRig(t)
	e, p, _ := pendingTwoStreams(t, r)
	stopMidCommit(t, r, e, h)

	const moved = "/moved"
	moveTree(t, r.fs, "/data", moved)
	hooked := r.tweak
	r.tweak = func(c *Config) {
		hooked(c)
		c.StagingDir = moved + "/staging"
		c.Committer = local.New(c.FS, moved+"/files", moved+"/staging")
		c.Publisher = local.New(c.FS, moved+"/files", moved+"/staging")
	}
	e, err := r.open(nil, 2*time.Second)
	temps := partTemps(t, r.fs, moved+"/staging")
	if st := e.Status(); st.LostFiles != 0 || len(temps) != 2 {
		t.Fatalf("start over a moved data dir: ready %v, LostFiles %d, part staging files left %v (want c's two, kept), errors %.2000q",
			err == nil, st.LostFiles, temps, l.find("lost"))
	}
	if err == nil {
		t.Fatal("ready over a moved data dir whose prepared checkpoint could not commit")
	}
	// Put back where it was prepared, the node commits c, every batch once.
	r.stop()
	moveTree(t, r.fs, moved, "/data")
	r.tweak = hooked
	e = r.start(nil)
	for _, b := range []struct {
		stream string
		seq    int64
	}{{"a", 1}, {"b", 0}} {
		res, err := send(e, p, b.stream, b.seq, 2)
		if err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("resend of %s/%d: %+v, %v; want a committed duplicate", b.stream, b.seq, res, err)
		}
	}
	if st := e.Status(); st.LostFiles != 0 {
		t.Fatalf("LostFiles %d", st.LostFiles)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{
		{Producer: "p", Stream: "a", Seq: 0}: true, {Producer: "p", Stream: "a", Seq: 1}: true, {Producer: "p", Stream: "b", Seq: 0}: true}})
}

// TestLiveCommitLostTableFile: the live commit of a checkpoint holding a
// table stream's (Parquet, Iceberg) file and a plain stream's finds the
// staging files lost (removed by hand): "all" both, "table" the table's
// only. The checkpoint is recorded committed without them; the table
// gets no snapshot naming a file that is not there (a reader would fail
// on it), and the next checkpoint's snapshot names only its own file.
func TestLiveCommitLostTableFile(t *testing.T) {
	for _, tc := range []string{"all", "table"} {
		t.Run(tc, func(t *testing.T) {
			r, d := tableRig(t)
			e := r.startTable(tableConf)
			mustSend(t, e, nil, tableStream, 1, 2)
			mustSend(t, e, nil, "other", 1, 2)
			var once sync.Once
			e.fin.Fence = func() error {
				once.Do(func() {
					temps, err := staging.List(r.fs, rigStaging)
					if err != nil {
						t.Error(err)
					}
					for _, tmp := range temps {
						if tc == "all" || strings.Contains(tmp, "part-"+rigNode) && isTableTemp(t, e, tmp) {
							_ = r.fs.Remove(tmp)
						}
					}
				})
				return nil
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			res, err := e.Checkpoint(ctx)
			if err != nil || res.State != recovery.Committed {
				t.Fatalf("checkpoint with lost files: %+v, %v (stuck %q)", res, err, e.Status().Stuck)
			}
			want := int64(1)
			if tc == "all" {
				want = 2
			}
			if got := e.Status().LostFiles; got != want {
				t.Fatalf("LostFiles %d, want %d", got, want)
			}
			if cur, err := table.Load(ctx, d, tableStream); err == nil && cur.Metadata != nil {
				if s := cur.Metadata.CurrentSnapshot(); s != nil {
					t.Fatalf("table snapshot %v after its only file was lost", s.Summary)
				}
			}
			mustSend(t, e, nil, tableStream, 2, 3)
			r.commit()
			cur := snapshotsOf(t, d)
			paths, err := table.DataFiles(ctx, d, tableStream, cur.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				if _, err := r.fs.Stat(rigDest + "/" + p.Path); err != nil {
					t.Errorf("the table names %s: %v", p.Path, err)
				}
			}
			if len(paths) != 1 || cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"] != "3" {
				t.Fatalf("table data files %v, summary %v; want the next checkpoint's one file, 3 records", paths, cur.Metadata.CurrentSnapshot().Summary)
			}
			r.broken = "staging files removed by hand"
		})
	}
}

// isTableTemp reports whether staging file tmp is the table stream's:
// the checkpoint being committed names it so.
func isTableTemp(t *testing.T, e *Engine, tmp string) bool {
	t.Helper()
	return isStreamTemp(t, e, tmp, tableStream)
}

// TestLostNewestManifestThenOlderCopy: checkpoint c, the node's newest,
// is recorded committed with every file lost on the live commit (staging
// files removed by hand): its manifest names files the destination does
// not hold. Then a copy of the state store taken before c is put back.
// The start finds c's manifest newer than the store and holding none of
// its files (as a planted one): it must not rebuild from it, set aside
// committed files (I7), or reuse c's id (I8); c's batches, in no file,
// are written when resent.
//
// "store-lost": the state store is lost instead (a rebuild from the
// manifests, which believes c1's and not c's).
func TestLostNewestManifestThenOlderCopy(t *testing.T) {
	for _, tc := range []string{"older-copy", "store-lost"} {
		t.Run(tc, func(t *testing.T) { lostNewestManifest(t, tc == "store-lost") })
	}
}

func lostNewestManifest(t *testing.T, storeLost bool) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 1)
	c1 := r.commit()
	backup := r.storeCopy()
	mustSend(t, e, p, "a", 1, 2)
	var once sync.Once
	e.fin.Fence = func() error {
		once.Do(func() {
			temps, _ := staging.List(r.fs, rigStaging)
			for _, tmp := range temps {
				_ = r.fs.Remove(tmp)
			}
		})
		return nil
	}
	c := r.commit()
	if e.Status().LostFiles != 1 {
		t.Fatalf("LostFiles %d, want 1", e.Status().LostFiles)
	}
	if storeLost {
		r.stopLosingStore()
	} else {
		r.stop()
		r.putStore(backup)
	}
	e, err := r.open(nil, 5*time.Second)
	if err != nil {
		t.Fatalf("start over an older (or lost) store, the newest manifest's files lost: %v (%s)", err, e.Status().Recovering)
	}
	if _, err := r.fs.Stat(rigDest + "/" + c1.Files[0].Final); err != nil {
		t.Fatalf("c1's committed file: %v (I7)", err)
	}
	res, err := send(e, p, "a", 1, 2)
	if err != nil {
		t.Fatalf("resend of a/1 (lost in checkpoint %d): %v", c.ID, err)
	}
	if res.Checkpoint <= c.ID {
		t.Fatalf("a/1 resent into checkpoint %d, not after %d (I8)", res.Checkpoint, c.ID)
	}
	c2 := r.commit()
	if c2.ID <= c.ID {
		t.Fatalf("checkpoint %d after %d (I8)", c2.ID, c.ID)
	}
	r.broken = "a checkpoint's staging files removed by hand: its manifest names missing files"
	rep := r.checker0(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 0}: true, {Producer: "p", Stream: "a", Seq: 1}: true}})
	for _, pr := range rep.Problems {
		if !strings.HasSuffix(pr, "is missing") {
			t.Errorf("destination: %s", pr)
		}
	}
	for _, b := range []int64{0, 1} {
		if n := rep.Batches[invariant.BatchID{Producer: "p", Stream: "a", Seq: b}]; n != 1 {
			t.Errorf("a/%d is in the destination %d times, want once", b, n)
		}
	}
}

// s3Hook is the S3 committer whose Commit calls before first (nil: none).
type s3Hook struct {
	*s3.S3
	mu     sync.Mutex
	before func(committer.File) error
}

func (h *s3Hook) Commit(ctx context.Context, f committer.File) error {
	h.mu.Lock()
	before := h.before
	h.mu.Unlock()
	if before != nil {
		if err := before(f); err != nil {
			return err
		}
	}
	return h.S3.Commit(ctx, f)
}

// TestReplayMovedDataDirS3 is TestReplayMovedDataDir over an S3
// destination (MinIO), where the staging file matters once the prepared
// upload is gone (aborted by a bucket lifecycle rule during the outage):
// the commit uploads again from it. Under the old path it is not there,
// and the committer says ErrLost; it is under the new staging dir, and
// must not be recorded lost and then deleted by the replay's clean-up.
// Failed before 59dbb95 as the local one did: ready, LostFiles 1, the
// staging file deleted.
func TestReplayMovedDataDirS3(t *testing.T) {
	srv := testsrv.StartMinIO(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil)
	r.broken = "an S3 destination: the checker reads the local one"
	l := &errorLog{}
	h := &s3Hook{}
	stagingDir := rigStaging
	r.tweak = func(c *Config) {
		d, err := s3.New(s3.Config{Client: client, Bucket: srv.Bucket, Prefix: "moved", Node: rigNode, Staging: c.FS})
		if err != nil {
			t.Fatal(err)
		}
		h.S3 = d
		c.Committer, c.Publisher, c.Logger, c.StagingDir = h, d, slog.New(l), stagingDir
	}
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 2)
	tried := make(chan committer.File, 1)
	h.mu.Lock()
	h.before = func(f committer.File) error {
		select {
		case tried <- f:
		default:
		}
		return committer.ErrTransient
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); _, _ = checkpointIn(e) }()
	var f committer.File
	select {
	case f = <-tried:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit was never tried")
	}
	r.stop()
	<-done
	h.mu.Lock()
	h.before = nil
	h.mu.Unlock()
	// The upload expires (a lifecycle rule) while the node is down.
	core := minio.Core{Client: client}
	if err := core.AbortMultipartUpload(t.Context(), srv.Bucket, h.Key(f.Final), f.UploadID); err != nil {
		t.Fatalf("abort upload %s: %v", f.UploadID, err)
	}
	if f.StagingKey != "" {
		_ = client.RemoveObject(t.Context(), srv.Bucket, f.StagingKey, minio.RemoveObjectOptions{})
	}
	moveTree(t, r.fs, "/data", "/moved")
	stagingDir = "/moved/staging"
	e, err = r.open(nil, 2*time.Second)
	temps := partTemps(t, r.fs, stagingDir)
	if st := e.Status(); st.LostFiles != 0 || len(temps) != 1 {
		t.Fatalf("start over a moved data dir: ready %v, LostFiles %d, part staging files left %v (want the one, kept), errors %.2000q",
			err == nil, st.LostFiles, temps, l.find("lost"))
	}
	if err == nil {
		t.Fatal("ready over a moved data dir whose prepared checkpoint could not commit")
	}
	// Put back where it was prepared: the commit uploads again from it.
	r.stop()
	moveTree(t, r.fs, "/moved", "/data")
	stagingDir = rigStaging
	e = r.start(nil)
	res, err := send(e, p, "a", 0, 2)
	if err != nil || !res.Duplicate || !res.Committed {
		t.Fatalf("resend of a/0: %+v, %v; want a committed duplicate", res, err)
	}
	if _, err := client.StatObject(t.Context(), srv.Bucket, h.Key(f.Final), minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the committed object %s: %v", f.Final, err)
	}
}

// stagingFault fails every open, stat, rename and removal of a file in
// rigStaging with err while on.
type stagingFault struct {
	on  atomic.Bool
	err error
}

func (s *stagingFault) MaybeError(op faultfs.Op) error {
	if !s.on.Load() || !strings.HasPrefix(op.Path, rigStaging+"/") {
		return nil
	}
	switch op.Kind {
	case faultfs.OpOpen, faultfs.OpStat, faultfs.OpRename, faultfs.OpRemove:
		return s.err
	}
	return nil
}

// TestReplayStagingUnreadable: a start whose staging files can't be
// reached for a while (EACCES: permissions changed by hand; EIO: a disk
// failing) must not take that for "neither staged nor final" (ErrLost):
// recording the prepared checkpoint committed without its files, then
// deleting them, would lose batches its producers are told are
// committed. It is not ready meanwhile; once the files can be reached,
// the start commits them. Held: the local committer returns the error
// as it is (a retry), not ErrLost.
func TestReplayStagingUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"EACCES", syscall.EACCES}, {"EIO", syscall.EIO}} {
		t.Run(tc.name, func(t *testing.T) {
			r, h, _ := lostRig(t)
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "a", 0, 2)
			stopMidCommit(t, r, e, h)
			fault := &stagingFault{err: tc.err}
			fault.on.Store(true)
			ifs := faultfs.NewInjectFS(r.fs, fault)
			e, err := r.open(ifs, time.Second)
			if st := e.Status(); err == nil || st.LostFiles != 0 {
				t.Fatalf("start with staging files unreachable (%v): ready %v, LostFiles %d", tc.err, err == nil, st.LostFiles)
			}
			fault.on.Store(false)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := e.WaitReady(ctx); err != nil {
				t.Fatalf("not ready once the staging files can be reached: %v (%s)", err, e.Status().Recovering)
			}
			res, err := send(e, p, "a", 0, 2)
			if err != nil || !res.Duplicate || !res.Committed {
				t.Fatalf("resend of a/0: %+v, %v; want a committed duplicate", res, err)
			}
			if st := e.Status(); st.LostFiles != 0 {
				t.Fatalf("LostFiles %d", st.LostFiles)
			}
			r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 0}: true}, Exact: true})
		})
	}
}

// TestLostFileNameRefused: a prepared checkpoint's file whose name the
// destination refuses for good (a file where its partition path needs a
// folder) and whose staged data is gone (removed by hand on the live
// commit; or, on a start over an older store copy, committed displaced
// before and removed from _displaced/ since). Under its name it can't be
// (the path can't exist), under its displaced name it is not, nor
// staged: it is lost, and must be recorded so like any lost file, not
// held stuck for good with every later checkpoint behind it (the wedge
// the lost-file fix ended).
//
// Failed before: not committed after 5 s, stuck permanent ("... not a
// directory; displaced to s/_displaced/...: file lost").
func TestLostFileNameRefused(t *testing.T) {
	r := newRig(t, faultfs.NewCrashFS())
	e := r.start(nil)
	blocker := blockPartition(t, r, e, "s")
	mustSend(t, e, nil, "s", 1, 3)
	mustSend(t, e, nil, "t", 1, 2)
	var once sync.Once
	e.fin.Fence = func() error {
		once.Do(func() {
			for _, tmp := range partTemps(t, r.fs, rigStaging) {
				if isStreamTemp(t, e, tmp, "s") {
					_ = r.fs.Remove(tmp)
				}
			}
		})
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil || res.State != recovery.Committed {
		st := e.Status()
		t.Fatalf("checkpoint with a lost file whose name is refused: %+v, %v; stuck %q (permanent %v)", res, err, st.Stuck, st.StuckPermanent)
	}
	if st := e.Status(); st.LostFiles != 1 || st.Stuck != "" {
		t.Fatalf("LostFiles %d, stuck %q; want 1 lost, nothing stuck", st.LostFiles, st.Stuck)
	}
	if err := r.fs.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, "s", 2, 1)
	r.commit()
	r.broken = "a staging file removed by hand"
}

// isStreamTemp reports whether staging file tmp is stream's in the
// checkpoint being committed.
func isStreamTemp(t *testing.T, e *Engine, tmp, stream string) bool {
	t.Helper()
	pend, err := e.store.Pending()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pend {
		for _, f := range c.Files {
			if f.Temp == tmp {
				return f.Stream == stream
			}
		}
	}
	return false
}
