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
//
// The default gap is 0 (cmd/eosink): measured on a 2-core VM under load
// (tests/groupcommit_bench_test.go), one sequential waiting client gets a
// p50 of ~15 ms and ~3,300 files per minute per (stream, partition) with
// gap 0; with a 50 ms gap ~51 ms and ~1,150 files per minute; 8 concurrent
// waiting clients share checkpoints either way (~2,400 files per minute at
// gap 0, 16,000 records/s; ~1,100 and 7,400 records/s at 50 ms). Who wants
// fewer files sets the gap (or batches more per request); the latency
// target decides the default.

// The linger only pays when other requests join during it. A client that
// waits for each batch before sending the next finds nobody to share with:
// when the last linger-started checkpoint had one waiter, the next one
// starts at once (still "within" the linger), and the linger comes back as
// soon as a checkpoint is shared again. Measured: one sequential client's
// p50 is the checkpoint's own duration instead of linger + duration.

// lingerLocked asks for checkpoint id, the open one, to start soon.
func (lc *lifecycle) lingerLocked(id uint64) {
	if lc.e.cfg.CommitLinger <= 0 || id != lc.e.ing.openID {
		return
	}
	if id != lc.commitWant {
		lc.commitWant, lc.commitWaits = id, 0
	}
	lc.commitWaits++
	select {
	case lc.soon <- struct{}{}:
	default:
	}
}

// wantsCommit reports whether a waiter still needs the open checkpoint to
// start (no checkpoint since took its batch), and how many waits asked.
func (lc *lifecycle) wantsCommit() (bool, int) {
	lc.e.ing.mu.Lock()
	defer lc.e.ing.mu.Unlock()
	return lc.commitWant >= lc.e.ing.openID, lc.commitWaits
}

// lingerDelay is how long to wait before a linger-started checkpoint,
// given when the last one started and how many waits it had (0: none yet).
func (lc *lifecycle) lingerDelay(last time.Time, shared int) time.Duration {
	d := lc.e.cfg.CommitLinger
	if shared == 1 {
		d = 0
	}
	if last.IsZero() || lc.e.cfg.CommitMinGap <= 0 {
		return d
	}
	if gap := lc.e.cfg.CommitMinGap - time.Since(last); gap > d {
		d = gap
	}
	return d
}
