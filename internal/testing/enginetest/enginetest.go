// Package enginetest runs a real engine for a test: server.Engine over an
// afero filesystem (a MemMapFs unless given), its state store in a temp
// dir, committing to a local directory on that filesystem or to a MinIO
// bucket. Like bbolt's internal/btesting, the rig checks the destination
// when the test ends: t.Cleanup closes the engine and runs the invariant
// checker (internal/testing/invariant) over what it committed, failing the
// test on a violation.
//
// The rig builds no HTTP server: api/ and web/ tests wrap the engine in
// their own, and server/'s own tests (package server) cannot import a
// package that imports server.
package enginetest

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// Where the rig puts things on its filesystem, and its default node id.
const (
	Staging = "/data/staging"
	Dest    = "/data/files"
	Node    = "n1"
	// Secret is the content of the files Options.Secrets plants outside
	// the destination: no answer or page may ever hold it.
	Secret = "TOP-SECRET-OUTSIDE-DEST"
)

// secrets are next to, above and around the destination and staging.
var secrets = []string{"/secret.txt", "/etc/passwd", "/data/secret.txt", "/data/staging-secret.txt", "/data/files-secret.txt"}

// Destination is what a rig commits to and reads back.
type Destination interface {
	committer.Committer
	committer.Publisher
	committer.Reader
}

// Options shape a rig; the zero value is an engine over a new MemMapFs
// with the local committer, recovered and ready.
type Options struct {
	FS     afero.Fs         // the whole disk; nil: a new MemMapFs
	Inject faultfs.Injector // when set, the engine sees FS through an InjectFS with it
	Node   string           // "": Node
	Now    func() time.Time // the engine's clock; nil: time.Now
	// S3, when set, is the destination: a prefix of this server's bucket
	// named for the test, staging on FS.
	S3 *testsrv.MinIO
	// Config changes the engine's configuration before each open.
	Config func(*server.Config)
	// Opened is called after each open with the rig, whose Engine is the
	// new one (tests serve it).
	Opened func(*Rig)
	// NoReady: New does not wait for recovery (see WaitReady).
	NoReady bool
	// Secrets plants files holding Secret outside the destination.
	Secrets bool
	// Records: the test writes only invariant records (invariant.Batch),
	// so the check at cleanup also counts batches. Else it checks files
	// against manifests and leaves the records alone.
	Records bool
}

// Rig is one engine under test. Its fields are for reading, but for
// StorePath: a test may point it elsewhere before Crash to lose the store.
type Rig struct {
	T         testing.TB
	Base      afero.Fs // the whole disk
	FS        afero.Fs // what the engine sees: Base, or an InjectFS over it
	StorePath string
	Dest      Destination
	Checker   *invariant.Checker

	opts   Options
	mu     sync.Mutex
	engine *server.Engine
	must   map[invariant.BatchID]bool
	broken string // why the destination is not checked at cleanup
}

// New opens an engine for t; see Options. t.Cleanup closes it and checks
// the destination.
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	if o.FS == nil {
		o.FS = afero.NewMemMapFs()
	}
	if o.Node == "" {
		o.Node = Node
	}
	r := &Rig{T: t, Base: o.FS, FS: o.FS, StorePath: filepath.Join(t.TempDir(), "state.db"), opts: o, must: map[invariant.BatchID]bool{}}
	if o.Inject != nil {
		r.FS = faultfs.NewInjectFS(o.FS, o.Inject)
	}
	for _, d := range []string{Dest, Staging} {
		if err := r.Base.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if o.Secrets {
		for _, p := range secrets {
			if err := afero.WriteFile(r.Base, p, []byte(Secret+" "+p+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.Checker = &invariant.Checker{Source: invariant.FSDest{FS: r.Base, Dir: Dest}, Foreign: !o.Records}
	if o.S3 == nil {
		r.Dest = local.New(r.FS, Dest, Staging)
	} else {
		client, err := o.S3.Client()
		if err != nil {
			t.Fatal(err)
		}
		// A prefix of its own per test, so tests can share the server.
		prefix := "rig/" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
		if r.Dest, err = s3.New(s3.Config{Client: client, Bucket: o.S3.Bucket, Prefix: prefix, Node: o.Node, Staging: r.FS}); err != nil {
			t.Fatal(err)
		}
		r.Checker.Source = invariant.S3Dest{Client: client, Bucket: o.S3.Bucket, Prefix: prefix}
	}
	t.Cleanup(r.cleanup)
	r.open()
	if !o.NoReady {
		r.WaitReady()
	}
	return r
}

func (r *Rig) config() server.Config {
	cfg := server.Config{
		Node: r.opts.Node, FS: r.FS, StagingDir: Staging, StorePath: r.StorePath,
		Committer: r.Dest, Publisher: r.Dest, Now: r.opts.Now,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	if r.opts.Config != nil {
		r.opts.Config(&cfg)
	}
	return cfg
}

func (r *Rig) open() {
	r.T.Helper()
	e, err := server.Open(r.config())
	if err != nil {
		r.T.Fatalf("open engine: %v", err)
	}
	r.mu.Lock()
	r.engine = e
	r.mu.Unlock()
	if r.opts.Opened != nil {
		r.opts.Opened(r)
	}
}

// Engine returns the engine running now.
func (r *Rig) Engine() *server.Engine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine
}

// WaitReady waits up to 30 s for recovery to finish.
func (r *Rig) WaitReady() {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Engine().WaitReady(ctx); err != nil {
		r.T.Fatalf("wait ready: %v", err)
	}
}

// Crash closes the engine without a final checkpoint, as a crash of the
// process would leave it, and opens a new one over the same disk and state
// store (StorePath), as a restarted process would, without waiting for
// recovery. It returns the old engine's Close error.
func (r *Rig) Crash() error {
	r.T.Helper()
	r.mu.Lock()
	old := r.engine
	r.engine = nil
	r.mu.Unlock()
	var err error
	if old != nil {
		err = old.Close()
	}
	r.open()
	return err
}

// Restart is Crash, whatever the old engine's Close said (faults may leave
// it failing; recovery decides), then WaitReady.
func (r *Rig) Restart() *server.Engine {
	r.T.Helper()
	_ = r.Crash()
	r.WaitReady()
	return r.Engine()
}

// Checkpoint runs a checkpoint and fails the test unless it committed.
func (r *Rig) Checkpoint() server.CheckpointResult {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Engine().Checkpoint(ctx)
	if err != nil {
		r.T.Fatalf("checkpoint: %v", err)
	}
	return res
}

// Must adds batches that must each be in the destination exactly once
// when the test ends.
func (r *Rig) Must(ids ...invariant.BatchID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.must[id] = true
	}
}

// Check checks the destination now against what Must said, and fails
// the test on a violation.
func (r *Rig) Check() *invariant.Report {
	r.T.Helper()
	r.mu.Lock()
	must := make(map[invariant.BatchID]bool, len(r.must))
	for id := range r.must {
		must[id] = true
	}
	r.mu.Unlock()
	rep := r.Checker.Check(invariant.Expect{Must: must})
	if err := rep.Err(); err != nil {
		r.T.Errorf("%s: %v", r.Checker.Source, err)
	}
	return rep
}

// Broken tells the rig that the test breaks the destination on purpose
// (removes a manifest, plants files), so the check at cleanup would only
// find what the test did: it is skipped, and the reason logged.
func (r *Rig) Broken(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.broken = reason
}

func (r *Rig) cleanup() {
	r.mu.Lock()
	e, broken := r.engine, r.broken
	r.engine = nil
	r.mu.Unlock()
	if e != nil {
		_ = e.Close() // tests close engines and break disks on purpose
	}
	if broken != "" {
		r.T.Logf("destination not checked: %s", broken)
		return
	}
	r.Check()
}
