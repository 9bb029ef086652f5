package server

import "time"

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
	Failed      string
	Draining    bool   // shutting down: writes are refused
	DiskFull    string // why writes are refused for space, while that lasts
	Keys        int    // idempotency keys held (idempotency.go), as of the last change published

	diskFullAt time.Time
}

// publishLocked publishes the status snapshot; called with e.mu held
// after a change to what Status shows.
func (e *Engine) publishLocked() {
	s := &Status{Ready: e.isReady, Recovering: e.recovering, OpenID: e.openID, FirstID: e.firstID, OpenBytes: e.openBytes,
		OpenRecords: e.openRecords, OpenFiles: len(e.openTxns), Held: e.held, LastDone: e.lastDone,
		Draining: e.draining || e.closed, Keys: len(e.keys.m)}
	if e.stuck != nil {
		s.Stuck = e.stuck.Error()
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
	return s
}
