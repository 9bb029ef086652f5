package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

const (
	rigStaging = "/data/staging"
	rigDest    = "/data/files"
	rigNode    = "n1"
)

// rig runs an Engine over a swappable filesystem and a state store in a
// temp dir, so a test can crash it, power-cut it and start it again. When
// the test ends, it closes the engine and checks the destination as the
// test last expected it (internal/testing/invariant; the rigs outside
// server/ are internal/testing/enginetest, which cannot be imported here).
type rig struct {
	t         testing.TB
	fs        afero.Fs // the disk as the next engine sees it
	storePath string
	e         *Engine
	checker   *invariant.Checker
	last      invariant.Expect // of the last check
	broken    string           // why the destination is not checked at the end
	foreign   bool             // the test writes records of its own, not invariant's
	tweak     func(*Config)
}

func newRig(t testing.TB, fs afero.Fs) *rig {
	t.Helper()
	if fs == nil {
		fs = afero.NewMemMapFs()
	}
	r := &rig{t: t, fs: fs, storePath: filepath.Join(fastTempDir(t), "state.db")}
	t.Cleanup(func() {
		if r.e != nil {
			_ = r.e.Close()
		}
		switch {
		case t.Failed():
			// Said already; faults may still be on in r.fs.
		case r.broken != "":
			t.Logf("destination not checked at the end: %s", r.broken)
		default:
			if err := r.checker0(r.last).Err(); err != nil {
				t.Errorf("at the end of the test: %v", err)
			}
		}
	})
	return r
}

func (r *rig) config(fs afero.Fs) Config {
	cfg := Config{
		Node: rigNode, FS: fs, StagingDir: rigStaging, StorePath: r.storePath,
		Committer: local.New(fs, rigDest, rigStaging), Publisher: local.New(fs, rigDest, rigStaging),
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	if r.tweak != nil {
		r.tweak(&cfg)
	}
	if os.Getenv("EOSINK_TEST_LOG") != "" {
		// The engine's log (info and above) on stderr: what a failing
		// seed of the model test did, start by start.
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return cfg
}

// start opens an engine over fs (r.fs when nil) and waits for recovery.
func (r *rig) start(fs afero.Fs) *Engine {
	r.t.Helper()
	e, err := r.open(fs, 30*time.Second)
	if err != nil {
		r.t.Fatalf("wait ready: %v", err)
	}
	return e
}

// open opens an engine over fs (r.fs when nil) as r.e, so the end of the
// test closes it, and waits up to d for recovery; it returns WaitReady's
// error for the test to judge. A failed Open ends the test.
func (r *rig) open(fs afero.Fs, d time.Duration) (*Engine, error) {
	r.t.Helper()
	if fs == nil {
		fs = r.fs
	}
	e, err := Open(r.config(fs))
	if err != nil {
		r.t.Fatalf("open engine: %v", err)
	}
	r.e = e
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return e, e.WaitReady(ctx)
}

// closeStopped closes e, r's engine, which stopped on a failure the test
// injected (Close returns that failure, which the test already saw), so
// that the next start opens a new one.
func (r *rig) closeStopped(e *Engine) {
	_ = e.Close()
	r.e = nil
}

// stop closes the engine without a final checkpoint, as a crash would.
func (r *rig) stop() {
	r.t.Helper()
	if r.e == nil {
		return
	}
	if err := r.e.Close(); err != nil {
		r.t.Fatalf("close engine: %v", err)
	}
	r.e = nil
}

// stopLosingStore stops the engine as a crash would (stop) and removes
// its state store, as a replaced disk would.
func (r *rig) stopLosingStore() {
	r.t.Helper()
	r.stop()
	if err := os.Remove(r.storePath); err != nil {
		r.t.Fatal(err)
	}
}

// storeCopy returns the bytes of r's state store, as a backup would copy
// them: a copy of the live file while the engine runs.
func (r *rig) storeCopy() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.storePath)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// putStore puts a copy taken by storeCopy back as r's state store.
func (r *rig) putStore(b []byte) {
	r.t.Helper()
	if err := os.WriteFile(r.storePath, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// check runs the invariant checker on r.fs and fails the test on a
// violation.
func (r *rig) check(exp invariant.Expect) *invariant.Report {
	r.t.Helper()
	rep := r.checker0(exp)
	if err := rep.Err(); err != nil {
		r.t.Fatal(err)
	}
	return rep
}

// checker0 checks the destination on r.fs without failing the test; the
// check at the test's end expects what this one did.
func (r *rig) checker0(exp invariant.Expect) *invariant.Report {
	if r.checker == nil || r.checker.FS != r.fs {
		old := r.checker
		r.checker = &invariant.Checker{FS: r.fs, Dest: rigDest, Foreign: r.foreign, Wire: wireID}
		if old != nil {
			r.checker.Inherit(old)
		}
	}
	r.last = exp
	return r.checker.Check(exp)
}

func (r *rig) checkpoint() CheckpointResult {
	r.t.Helper()
	res, err := checkpointIn(r.e)
	if err != nil {
		r.t.Fatalf("checkpoint: %v", err)
	}
	return res
}

// checkpointIn asks e for a checkpoint, giving it the tests' 30 s.
func checkpointIn(e *Engine) (CheckpointResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.Checkpoint(ctx)
}

// send writes batch seq of producer p (nil p: anonymous, seq is a unique id).
func send(e *Engine, p *Producer, stream string, seq int64, n int) (WriteResult, error) {
	id := invariant.BatchID{Stream: stream, Seq: seq}
	var pp *Producer
	if p != nil {
		id.Producer = p.ID
		pp = &Producer{ID: wireID(p.ID), Epoch: p.Epoch, Seq: seq}
	}
	return e.Write(Write{Stream: stream, Ext: "ndjson", Data: invariant.Batch(id, n), Records: n, Producer: pp})
}

// wireID returns the producer id a test producer name is sent under: the
// name up to a "~", which tests use to tell a producer id's incarnations
// apart in the records (the model's "p0~3" is p0's third incarnation).
func wireID(name string) string {
	id, _, _ := strings.Cut(name, "~")
	return id
}

func isSeqErr(err error) (int64, bool) {
	var se *SeqError
	if errors.As(err, &se) {
		return se.Expected, true
	}
	return 0, false
}

// fastTempDir returns a temp dir on tmpfs when there is one: the state
// store fsyncs on every transaction, and the sweeps open thousands of them.
// Durability against power cuts is simulated by the CrashFS, not the disk.
func fastTempDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "eosink-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// commit runs a checkpoint on r.e and fails the test unless it committed.
func (r *rig) commit() CheckpointResult {
	r.t.Helper()
	res := r.checkpoint()
	if res.State != recovery.Committed {
		r.t.Fatalf("checkpoint: %+v", res)
	}
	return res
}

// initProducer inits producer id on r.e and returns it at its new epoch.
func (r *rig) initProducer(id string) *Producer {
	r.t.Helper()
	return &Producer{ID: id, Epoch: r.initState(id).Epoch}
}

// initState inits producer id on r.e and returns the state init answers;
// an error ends the test.
func (r *rig) initState(id string) ProducerState {
	r.t.Helper()
	st, err := r.e.InitProducer(context.Background(), id)
	if err != nil {
		r.t.Fatalf("init producer %s: %v", id, err)
	}
	return st
}

// mustSend is send that fails the test on an error.
func mustSend(t testing.TB, e *Engine, p *Producer, stream string, seq int64, n int) WriteResult {
	t.Helper()
	res, err := send(e, p, stream, seq, n)
	if err != nil {
		t.Fatalf("send %s/%d: %v", stream, seq, err)
	}
	return res
}
