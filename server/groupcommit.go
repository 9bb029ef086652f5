package server

import "time"

// Group commit (DESIGN "Acknowledgement and commit latency"): a request
// waiting for its batch's commit (Wait on the open checkpoint) makes the
// next checkpoint start within Config.CommitLinger, and every request
// waiting by then shares it. The periodic interval still paces 202 writes.
//
// CommitMinGap keeps a steady stream of waiting clients from cutting one
// checkpoint (and so one file per stream and partition) per linger: a
// linger-started checkpoint starts at least CommitMinGap after the
// previous one did. It trades latency for fewer, larger files: with a gap
// G a waiting client's latency is at least about G, and a stream gets at
// most one file per G from waits.

// lingerLocked asks for checkpoint id, the open one, to start soon.
func (e *Engine) lingerLocked(id uint64) {
	if e.cfg.CommitLinger <= 0 || id != e.openID {
		return
	}
	e.commitWant = max(e.commitWant, id)
	select {
	case e.soon <- struct{}{}:
	default:
	}
}

// wantsCommit reports whether a waiter still needs the open checkpoint to
// start: no checkpoint since took its batch.
func (e *Engine) wantsCommit() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.commitWant >= e.openID
}

// lingerDelay is how long to wait before a linger-started checkpoint,
// given when the last one started.
func (e *Engine) lingerDelay(last time.Time) time.Duration {
	d := e.cfg.CommitLinger
	if last.IsZero() || e.cfg.CommitMinGap <= 0 {
		return d
	}
	if gap := e.cfg.CommitMinGap - time.Since(last); gap > d {
		d = gap
	}
	return d
}
