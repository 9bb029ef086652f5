package server

import (
	"path"
	"strings"
	"sync/atomic"
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
	// cure (a name taken by other content, a path the
	// destination refuses): it needs an operator, and /readyz says so.
	StuckCheckpoint uint64
	StuckSince      time.Time
	StuckPermanent  bool
	// Displaced counts the part files committed under their displaced
	// name since the start (Engine.displace).
	Displaced int64
	// LostFiles counts the part files of prepared checkpoints recorded
	// committed without them since the start, because neither their
	// staged data nor a final file existed (health.noteLost).
	LostFiles int64
	// TablePassedOver counts the table metadata files the table commits
	// passed over since the start: documents at a table's newest versions
	// that are no metadata of the table (planted; docs/tables.md).
	TablePassedOver int64
	// TablesParked counts the table streams whose table commit is parked
	// (docs/tables.md "Parked tables"): their writes are refused with
	// backpressure until their tables take it; the other streams go on.
	// TableParked says why, for one of them.
	TablesParked int
	TableParked  string
	Failed       string
	Draining     bool   // shutting down: writes are refused
	DiskFull     string // why writes are refused for space, while that lasts
	Keys         int    // idempotency keys held (idempotency.go), as of the last change published

	diskFullAt time.Time
}

// health is what Status shows beyond the ingest counters: what holds a
// prepared checkpoint back, why recovery is not done, a full disk, the
// error that stopped the engine, and the published snapshot. Its fields
// are guarded by the ingest lock (e.mu), so that a snapshot is published
// atomically with the ingest state it shows.
type health struct {
	e *Engine

	failErr    error
	failed     chan struct{} // closed by fail
	stuck      stuck         // what holds a prepared checkpoint back, if anything
	recovering string
	diskFull   error     // the last write refused for space, until a write succeeds
	diskFullAt time.Time // when

	status     atomic.Pointer[Status] // published under mu, read by Status without it
	displaced  atomic.Int64           // part files committed displaced
	lostFiles  atomic.Int64           // part files recorded committed though lost
	passedOver atomic.Int64           // table metadata files passed over

	tablesParked int    // parked table streams (parked.go)
	tableParked  string // why, for one
}

// publishLocked publishes the status snapshot; called with e.mu held
// after a change to what Status shows.
func (hs *health) publishLocked() {
	s := &Status{Ready: hs.e.ing.isReady, Recovering: hs.recovering, OpenID: hs.e.ing.openID, FirstID: hs.e.ing.firstID, OpenBytes: hs.e.ing.openBytes,
		OpenRecords: hs.e.ing.openRecords, OpenFiles: len(hs.e.ing.openTxns), Held: hs.e.ing.held, LastDone: hs.e.ing.lastDone,
		Draining: hs.e.ing.draining || hs.e.ing.closed, Keys: len(hs.e.ing.keys.m),
		TablesParked: hs.tablesParked, TableParked: hs.tableParked}
	if hs.stuck.err != nil {
		s.Stuck, s.StuckCheckpoint, s.StuckSince = hs.stuck.err.Error(), hs.stuck.id, hs.stuck.since
		s.StuckPermanent = hs.stuck.verdict == verdictAbort
	}
	if hs.failErr != nil {
		s.Failed = hs.failErr.Error()
	}
	if hs.diskFull != nil {
		s.DiskFull, s.diskFullAt = hs.diskFull.Error(), hs.diskFullAt
	}
	hs.status.Store(s)
}

// Status returns a snapshot of the engine. It never takes the ingest lock:
// health checks, readiness and metrics answer however long a barrier or a
// write holds it, and add nothing to a write's wait.
func (e *Engine) Status() Status {
	s := *e.health.status.Load()
	if s.DiskFull != "" && time.Since(s.diskFullAt) >= diskFullHold {
		s.DiskFull = ""
	}
	s.diskFullAt = time.Time{}
	s.Displaced = e.health.displaced.Load()
	s.LostFiles = e.health.lostFiles.Load()
	s.TablePassedOver = e.health.passedOver.Load()
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
func (hs *health) noteStuck(id uint64, f failure) {
	hs.noteDiskFull(f.err)
	hs.e.ing.mu.Lock()
	since := hs.stuck.since
	if hs.stuck.id != id || since.IsZero() {
		since = hs.e.cfg.Now()
	}
	hs.stuck = stuck{id: id, err: f.err, since: since, verdict: f.verdict}
	hs.publishLocked()
	hs.e.ing.mu.Unlock()
	if h := hs.e.cfg.Hooks.CommitStuck; h != nil {
		h(id, f.err)
	}
}

// displace is the Finisher's Displace (local destinations): a part file
// whose final name the destination refuses for good (classify: abort) is
// committed as <stream>/_displaced/<part name> instead, so it does not
// hold back every later checkpoint. Loudly: an operator should move the
// file where it belongs, or remove what is in its way.
//
// A lost file (lost: neither staged nor final) is looked for under its
// displaced name too, where an earlier try may have committed it; that
// is no refusal, and neither logged nor counted.
func (hs *health) displace(f committer.File, err error) (committer.File, bool) {
	if classify(err) != verdictAbort {
		return f, false
	}
	to := f
	to.Final = layout.DisplacedName(f.Final)
	if to.Final == f.Final {
		return f, false
	}
	if !lost(err) {
		hs.displaced.Add(1)
		hs.e.log.Error("the destination refuses a part file's name for good: committing it displaced; move it where it belongs",
			"path", f.Final, "displaced", to.Final, "stream", f.Stream, "err", err)
	}
	return to, true
}

// noteLost is the Finisher's Gone: checkpoint id was recorded committed
// without files, lost (neither their staged data nor a final file
// existed). Loudly, naming each file and the batches it held: their
// producers' sequence numbers stay committed (a resend is a duplicate,
// not written again), whether the files were removed after a commit a
// store put back from an older copy does not show (published: the
// manifest was there) or their staged data was lost before the commit.
func (hs *health) noteLost(id uint64, files []committer.File, published bool) {
	hs.lostFiles.Add(int64(len(files)))
	why := "its manifest is there: it committed before, and its files were removed since (a retention job, or an operator; the state store put back from an older copy)"
	if !published {
		why = "no manifest either: its staged data was lost before it committed (staging files removed, a data disk replaced), or its files and manifest were removed after a commit a state store put back from an older copy does not show"
	}
	for _, f := range files {
		hs.e.log.Error("a prepared checkpoint's file is lost, neither staged nor in the destination: recorded committed without it, its batches not in the destination; "+why,
			"checkpoint", id, "path", f.Final, "stream", f.Stream, "records", f.Records, "bytes", f.Bytes, "producers", f.Producers, "op", "commit")
	}
}

// lostFile is the Finisher's Lost: f's failed commit err says it is lost
// (lost), and that is evidence of a loss only when f's staging file was
// recorded in this node's staging dir (or f has none: its data was only
// ever in the destination). A staging file recorded elsewhere was
// prepared under another --data-dir (the data dir moved, or the flag
// changed, between a crash and this start): its data may be under this
// staging dir or at the old path, so it is not recorded committed without
// it — the replay is retried, and its clean-up, which deletes every
// staging file no prepared checkpoint names, waits. Said at error level,
// with what to do.
func (hs *health) lostFile(f committer.File, err error) bool {
	if !lost(err) {
		return false
	}
	if f.Temp == "" || inDir(f.Temp, hs.e.cfg.StagingDir) {
		return true
	}
	hs.e.log.Error("a prepared checkpoint's staging file is recorded outside the staging dir and is not there: not recorded lost; start the node with the --data-dir it was prepared under (or put the file at its recorded path) and let it commit",
		"path", f.Final, "staging_file", f.Temp, "staging_dir", hs.e.cfg.StagingDir, "stream", f.Stream, "op", "commit")
	return false
}

// inDir reports whether name is below dir.
func inDir(name, dir string) bool {
	dir = path.Clean(dir)
	if dir == "/" {
		return path.IsAbs(name)
	}
	return strings.HasPrefix(path.Clean(name), dir+"/")
}
