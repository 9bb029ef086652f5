package server

import (
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// Status is a snapshot for health, metrics and the UI.
type Status struct {
	Ready       bool
	Recovering  string // why recovery is not done, while it runs
	OpenID      uint64
	FirstID     uint64 // the first id this start opened: an id below it the store lacks was never used, or ended before the start
	OpenBytes   int64
	OpenRecords int64
	OpenFiles   int
	Held        int64
	LastDone    uint64
	Stuck       string // the error holding a prepared checkpoint, if any
	// StuckCheckpoint is the prepared checkpoint Stuck holds back, since
	// StuckSince. StuckPermanent: its last error is one a retry does not
	// cure (a file lost, a name taken by other content, a path the
	// destination refuses): it needs an operator, and /readyz says so.
	StuckCheckpoint uint64
	StuckSince      time.Time
	StuckPermanent  bool
	// Displaced counts the part files committed under their displaced
	// name since the start (Engine.displace).
	Displaced int64
	Failed    string
	Draining  bool   // shutting down: writes are refused
	DiskFull  string // why writes are refused for space, while that lasts
	Keys      int    // idempotency keys held (idempotency.go), as of the last change published

	diskFullAt time.Time
}

// publishLocked publishes the status snapshot; called with e.mu held
// after a change to what Status shows.
func (e *Engine) publishLocked() {
	s := &Status{Ready: e.isReady, Recovering: e.recovering, OpenID: e.openID, FirstID: e.firstID, OpenBytes: e.openBytes,
		OpenRecords: e.openRecords, OpenFiles: len(e.openTxns), Held: e.held, LastDone: e.lastDone,
		Draining: e.draining || e.closed, Keys: len(e.keys.m)}
	if e.stuck.err != nil {
		s.Stuck, s.StuckCheckpoint, s.StuckSince = e.stuck.err.Error(), e.stuck.id, e.stuck.since
		s.StuckPermanent = e.stuck.verdict == verdictAbort
	}
	if e.failErr != nil {
		s.Failed = e.failErr.Error()
	}
	if e.diskFull != nil {
		s.DiskFull, s.diskFullAt = e.diskFull.Error(), e.diskFullAt
	}
	e.status.Store(s)
}

// Status returns a snapshot of the engine. It never takes the ingest lock:
// health checks, readiness and metrics answer however long a barrier or a
// write holds it, and add nothing to a write's wait.
func (e *Engine) Status() Status {
	s := *e.status.Load()
	if s.DiskFull != "" && time.Since(s.diskFullAt) >= diskFullHold {
		s.DiskFull = ""
	}
	s.diskFullAt = time.Time{}
	s.Displaced = e.displaced.Load()
	return s
}

// stuck is what holds a prepared checkpoint back: the zero value when
// nothing does.
type stuck struct {
	id      uint64
	err     error
	since   time.Time
	verdict verdict
}

// noteStuck records a failed commit attempt of prepared checkpoint id,
// for Status, /readyz and the CommitStuck hook.
func (e *Engine) noteStuck(id uint64, f failure) {
	e.noteDiskFull(f.err)
	e.mu.Lock()
	since := e.stuck.since
	if e.stuck.id != id || since.IsZero() {
		since = e.cfg.Now()
	}
	e.stuck = stuck{id: id, err: f.err, since: since, verdict: f.verdict}
	e.publishLocked()
	e.mu.Unlock()
	if h := e.cfg.Hooks.CommitStuck; h != nil {
		h(id, f.err)
	}
}

// displace is the Finisher's Displace (local destinations): a part file
// whose final name the destination refuses for good (classify: abort) is
// committed as <stream>/_displaced/<part name> instead, so it does not
// hold back every later checkpoint. Loudly: an operator should move the
// file where it belongs, or remove what is in its way.
func (e *Engine) displace(f committer.File, err error) (committer.File, bool) {
	if classify(err) != verdictAbort {
		return f, false
	}
	to := f
	to.Final = layout.DisplacedName(f.Final)
	if to.Final == f.Final {
		return f, false
	}
	e.displaced.Add(1)
	e.log.Error("the destination refuses a part file's name for good: committing it displaced; move it where it belongs",
		"path", f.Final, "displaced", to.Final, "stream", f.Stream, "err", err)
	return to, true
}
