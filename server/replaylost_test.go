package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/minio/minio-go/v7"
)

// A prepared checkpoint whose files are gone when the replay commits it
// again: neither the staged data nor the final file exists
// (committer.ErrLost, an abort verdict of the failure policy). Before the
// fix the replay retried it once per RetryMax for ever: the start never
// became ready, and every stream waited on data that no retry and no
// operator could bring back.

// commitHook is the rig's local committer that calls before with each
// file it is asked to commit, first: a test takes a copy of the state
// store there (the checkpoint recorded prepared, not yet committed), or
// fails the commit.
type commitHook struct {
	*local.Local
	mu     sync.Mutex
	before func(committer.File) error
}

func (c *commitHook) CommitUnsynced(ctx context.Context, f committer.File) (string, error) {
	c.mu.Lock()
	before := c.before
	c.mu.Unlock()
	if before != nil {
		if err := before(f); err != nil {
			return "", err
		}
	}
	return c.Local.CommitUnsynced(ctx, f)
}

func (c *commitHook) set(before func(committer.File) error) {
	c.mu.Lock()
	c.before = before
	c.mu.Unlock()
}

// withCommitHook makes r's engines commit through a commitHook.
func (r *rig) withCommitHook() *commitHook {
	h := &commitHook{}
	r.tweak = func(c *Config) {
		h.Local = local.New(c.FS, rigDest, rigStaging)
		c.Committer = h
	}
	return h
}

// errorLog keeps the error-level records an engine logs.
type errorLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

// find returns the error records that hold every one of words.
func (l *errorLog) find(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		all := true
		for _, w := range words {
			all = all && strings.Contains(r, w)
		}
		if all {
			out = append(out, r)
		}
	}
	return out
}

// lostRig is a rig whose engines commit through a commitHook and log
// their errors to an errorLog.
func lostRig(t *testing.T) (*rig, *commitHook, *errorLog) {
	r := newRig(t, nil)
	h := r.withCommitHook()
	hooked := r.tweak
	l := &errorLog{}
	r.tweak = func(c *Config) {
		hooked(c)
		c.Logger = slog.New(l)
	}
	return r, h, l
}

// preparedCopy starts r, commits p's batch a/0 in c1, then a/1 and b/0
// in c, whose two files a backup of the live state store (taken as c's
// commit begins) holds prepared. c commits; the engine stops.
func preparedCopy(t *testing.T, r *rig, h *commitHook) (p *Producer, backup []byte, c CheckpointResult) {
	t.Helper()
	_, p, _ = pendingTwoStreams(t, r)
	var once sync.Once // the files commit in parallel
	h.set(func(committer.File) error {
		once.Do(func() { backup = r.storeCopy() })
		return nil
	})
	c = r.commit()
	h.set(nil)
	if len(c.Files) != 2 || backup == nil {
		t.Fatalf("checkpoint %+v, backup %d bytes", c, len(backup))
	}
	r.stop()
	return p, backup, c
}

// startLost starts r over what the test left and wants it ready within a
// few seconds (not a replay retrying for ever); then p's resends of c's
// batches are committed duplicates (c's sequence numbers stay known: its
// resends are not written again), the loss of want (c's files the
// destination lacks) is logged naming them and counted in Status, and
// the node goes on: p's next batch commits.
func startLost(t *testing.T, r *rig, l *errorLog, p *Producer, c CheckpointResult, want []string) {
	t.Helper()
	e := startLostReady(t, r, l, p, c, want)
	mustSend(t, e, p, "a", 2, 1)
	if res := r.commit(); res.ID <= c.ID {
		t.Fatalf("the next checkpoint is %d, after %d (I8)", res.ID, c.ID)
	}
	// The destination: c's lost files are what its manifest names and
	// lacks, nothing else is wrong, and a/2 is there once.
	r.broken = "files of a committed checkpoint lost"
	rep := r.checker0(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 2}: true}})
	for _, pr := range rep.Problems {
		named := false
		for _, f := range want {
			named = named || strings.Contains(pr, f+" in manifest")
		}
		if !named || !strings.HasSuffix(pr, "is missing") {
			t.Errorf("destination: %s", pr)
		}
	}
	if n := rep.Batches[invariant.BatchID{Producer: "p", Stream: "a", Seq: 2}]; n != 1 {
		t.Errorf("a/2 is in the destination %d times, want once", n)
	}
}

// startLostReady is startLost up to p's next batch: the start is ready
// within 5 s, c's resends are committed duplicates, and the loss of want
// is counted and logged, naming each file.
func startLostReady(t *testing.T, r *rig, l *errorLog, p *Producer, c CheckpointResult, want []string) *Engine {
	t.Helper()
	e, err := r.open(nil, 5*time.Second)
	if err != nil {
		t.Fatalf("the start is not ready after 5 s (%v); recovering: %s", err, e.Status().Recovering)
	}
	for _, b := range []struct {
		stream string
		seq    int64
	}{{"a", 1}, {"b", 0}} {
		res, err := send(e, p, b.stream, b.seq, 2)
		if err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("resend of %s/%d (in checkpoint %d): %+v, %v; want a committed duplicate", b.stream, b.seq, c.ID, res, err)
		}
	}
	if got := e.Status().LostFiles; got != int64(len(want)) {
		t.Errorf("Status.LostFiles %d, want %d", got, len(want))
	}
	if got := e.Status().Displaced; got != 0 {
		t.Errorf("Status.Displaced %d: a lost file looked for under its displaced name is not displaced", got)
	}
	for _, f := range want {
		if recs := l.find("lost", f); len(recs) == 0 {
			t.Errorf("no error logged naming lost file %s; errors: %q", f, l.find())
		}
	}
	return e
}

// TestReplayLostOlderCopy: an older copy of the state store holding
// checkpoint c prepared is put back after c committed and a retention job
// (or an operator) removed c's files:
//   - "files": both files, its manifest kept;
//   - "files+manifest": both files and its manifest;
//   - "one-file": one file, the other and the manifest kept;
//   - "one-file+manifest": one file and the manifest.
//
// c was committed: the start records it so, says which files are lost,
// and answers the resends of its batches as duplicates.
func TestReplayLostOlderCopy(t *testing.T) {
	for _, tc := range []string{"files", "files+manifest", "one-file", "one-file+manifest"} {
		t.Run(tc, func(t *testing.T) {
			r, h, l := lostRig(t)
			p, backup, c := preparedCopy(t, r, h)
			r.putStore(backup)
			gone := []string{c.Files[0].Final, c.Files[1].Final}
			if strings.HasPrefix(tc, "one-file") {
				gone = gone[:1]
			}
			for _, f := range gone {
				if err := r.fs.Remove(rigDest + "/" + f); err != nil {
					t.Fatal(err)
				}
			}
			if strings.HasSuffix(tc, "+manifest") {
				if err := r.fs.Remove(rigDest + "/" + layout.ManifestName(rigNode, c.ID)); err != nil {
					t.Fatal(err)
				}
			}
			startLost(t, r, l, p, c, gone)
			if strings.HasPrefix(tc, "one-file") {
				if _, err := r.fs.Stat(rigDest + "/" + c.Files[1].Final); err != nil {
					t.Fatalf("c's file that was kept: %v", err)
				}
			}
		})
	}
}

// TestReplayLostStaging: checkpoint c is prepared, its commit fails (the
// destination down) and the process stops; its staging files are then
// lost from the data dir (removed by hand, a disk replaced under
// staging/) while the state store is kept. No retry can commit c: the
// start records it committed with its files lost, loudly, rather than
// never becoming ready; p's sequence numbers (and the next_seq init
// handed out, I12) stay valid.
func TestReplayLostStaging(t *testing.T) {
	r, h, l := lostRig(t)
	e, p, id := pendingTwoStreams(t, r)
	stopMidCommit(t, r, e, h)
	temps, err := staging.List(r.fs, rigStaging)
	if err != nil || len(temps) != 2 {
		t.Fatalf("staging files %v, %v; want c's two", temps, err)
	}
	for _, tmp := range temps {
		if err := r.fs.Remove(tmp); err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	for _, tmp := range temps {
		files = append(files, strings.TrimSuffix(tmp[strings.LastIndex(tmp, "/")+1:], ".inprogress"))
	}
	c := CheckpointResult{ID: id}
	startLost(t, r, l, p, c, files)
}

// TestLiveCommitLostStaging: the live commit of checkpoint c finds one
// of its staging files gone (removed by hand while the node runs). As in
// the replay (one failure policy, I14), c is recorded committed without
// it, loudly, instead of being retried for ever with every later
// checkpoint behind it.
func TestLiveCommitLostStaging(t *testing.T) {
	r, h, l := lostRig(t)
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 2)
	mustSend(t, e, p, "b", 0, 2)
	var gone string
	var once sync.Once // the files commit in parallel
	h.set(func(f committer.File) (err error) {
		once.Do(func() { gone, err = f.Final, r.fs.Remove(f.Temp) })
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	h.set(nil)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint with a staging file lost: %+v, %v; want committed within 5 s", res, err)
	}
	if got := e.Status().LostFiles; got != 1 {
		t.Errorf("Status.LostFiles %d, want 1", got)
	}
	if len(l.find("lost", gone)) == 0 {
		t.Errorf("no error logged naming lost file %s; errors: %q", gone, l.find())
	}
	mustSend(t, e, p, "a", 1, 1)
	r.commit()
	r.broken = "a staging file removed by hand"
}

// TestReplayLostOlderCopyS3 is TestReplayLostOlderCopy ("files",
// "files+manifest") over an S3 destination (MinIO): there the commit
// finds neither the upload, the staging object, the final object nor the
// local staging file (committer/s3 ErrLost), and nothing is displaced.
// The copy of the store is taken at the Finisher's fence, before c's
// files commit.
func TestReplayLostOlderCopyS3(t *testing.T) {
	srv := testsrv.StartMinIO(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []string{"files", "files+manifest"} {
		t.Run(tc, func(t *testing.T) {
			r := newRig(t, nil)
			r.broken = "an S3 destination: the checker reads the local one"
			l := &errorLog{}
			var dest *s3.S3
			r.tweak = func(c *Config) {
				d, err := s3.New(s3.Config{Client: client, Bucket: srv.Bucket, Prefix: "lost-" + strings.ReplaceAll(tc, "+", "-"), Node: rigNode, Staging: c.FS})
				if err != nil {
					t.Fatal(err)
				}
				dest, c.Committer, c.Publisher, c.Logger = d, d, d, slog.New(l)
			}
			e, p, _ := pendingTwoStreams(t, r)
			var backup []byte
			e.fin.Fence = func() error {
				if backup == nil {
					backup = r.storeCopy()
				}
				return nil
			}
			c := r.commit()
			r.stop()
			r.putStore(backup)
			gone := []string{c.Files[0].Final, c.Files[1].Final}
			if tc == "files+manifest" {
				gone = append(gone, layout.ManifestName(rigNode, c.ID))
			}
			for _, name := range gone {
				if err := client.RemoveObject(t.Context(), srv.Bucket, dest.Key(name), minio.RemoveObjectOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			e = startLostReady(t, r, l, p, c, gone[:2])
			mustSend(t, e, p, "a", 2, 1)
			r.commit()
		})
	}
}

// TestReplayLostOlderCopyThenBehind: as TestReplayLostOlderCopy, but
// the node committed c2 (p's a/2) after c before the copy was put back,
// and retention removed c's files and manifest, not c2's. The replay
// records c committed without its files, then finds the store behind
// the destination (c2's manifest) and rebuilds: every resend, of c's
// batches and of c2's, is a committed duplicate.
func TestReplayLostOlderCopyThenBehind(t *testing.T) {
	r, h, l := lostRig(t)
	p, backup, c := preparedCopy(t, r, h)
	e := r.start(nil)
	mustSend(t, e, p, "a", 2, 1)
	c2 := r.commit()
	r.stop()
	r.putStore(backup)
	for _, name := range []string{c.Files[0].Final, c.Files[1].Final, layout.ManifestName(rigNode, c.ID)} {
		if err := r.fs.Remove(rigDest + "/" + name); err != nil {
			t.Fatal(err)
		}
	}
	r.broken = "files and manifest of a committed checkpoint removed"
	e, err := r.open(nil, 5*time.Second)
	if err != nil {
		t.Fatalf("the start is not ready after 5 s (%v); recovering: %s", err, e.Status().Recovering)
	}
	for _, b := range []struct {
		stream string
		seq    int64
		n      int
	}{{"a", 1, 2}, {"b", 0, 2}, {"a", 2, 1}} {
		res, err := send(e, p, b.stream, b.seq, b.n)
		if err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("resend of %s/%d: %+v, %v; want a committed duplicate", b.stream, b.seq, res, err)
		}
	}
	if got := e.Status().LostFiles; got != 2 {
		t.Errorf("Status.LostFiles %d, want 2", got)
	}
	if len(l.find("lost", c.Files[0].Final)) == 0 || len(l.find("state store is behind")) == 0 {
		t.Errorf("errors logged: %q; want the lost files and the rebuild", l.find())
	}
	if open := e.Status().OpenID; open <= c2.ID {
		t.Fatalf("open checkpoint %d, c2 was %d (I8)", open, c2.ID)
	}
	mustSend(t, e, p, "a", 3, 1)
	r.commit()
}

// stopMidCommit checkpoints e with every file's commit failing
// transiently (the destination down), so the checkpoint is prepared and
// not committed, and stops the node once a commit was tried.
func stopMidCommit(t *testing.T, r *rig, e *Engine, h *commitHook) {
	t.Helper()
	tries := make(chan struct{}, 1)
	h.set(func(committer.File) error {
		select {
		case tries <- struct{}{}:
		default:
		}
		return committer.ErrTransient
	})
	done := make(chan struct{})
	go func() { defer close(done); _, _ = checkpointIn(e) }()
	select {
	case <-tries:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit was never tried")
	}
	r.stop()
	<-done
	h.set(nil)
}

// pendingTwoStreams starts r, inits p, commits p's a/0, and sends a/1 and
// b/0 into the open checkpoint, whose id it returns: the checkpoint c the
// lost-file tests prepare and lose files of.
func pendingTwoStreams(t *testing.T, r *rig) (*Engine, *Producer, uint64) {
	t.Helper()
	e := r.start(nil)
	p := r.initProducer("p")
	mustSend(t, e, p, "a", 0, 1)
	r.commit()
	mustSend(t, e, p, "a", 1, 2)
	return e, p, mustSend(t, e, p, "b", 0, 2).Checkpoint
}
