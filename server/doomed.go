package server

import (
	"fmt"
)

// A doomed checkpoint.
//
// A staging file that can't be finished dooms its checkpoint: a
// Parquet or compressed file whose encoder failed in the background
// (staging.Txn.OnEncodeFail: ENOSPC creating its *.enc.inprogress or
// *.pages.inprogress, a failed write of either), or a plain file a failed
// write left broken. Its pre-commit can only fail, and the checkpoint
// abort, taking every batch accepted into it, of every stream, with it,
// and the open checkpoint after it (abort, checkpoint.go). Nothing more
// is accepted into a doomed checkpoint (I13: a batch is accepted only
// when its commit is known possible; DESIGN "Streams": refused at write
// time, never failed at commit):
//
//   - A write is refused with the file's error, as a plain stream's
//     write is refused when its own staging write fails: the same error
//     class, so the same answer (disk full: 507 insufficient_storage;
//     other I/O: what the API answers for it), the same health note
//     (Status.DiskFull, /readyz) and the same "storage" rejection. The
//     client backs off and resends; after the abort the checkpoint that
//     takes its batch can commit. A batch whose append ran the step that
//     failed (inline encoders) is refused too: it is in the doomed file.
//   - The checkpoint ends now, not at the next periodic or requested
//     one: the failure kicks the coordinator, whose cut of a doomed
//     checkpoint aborts without pre-committing its other files (they
//     would be synced only to be deleted, on a disk that is full). The
//     abort is what the failure policy (policy.go) says for a failed
//     pre-commit of a plain stream's file, taken as soon as the failure
//     is known rather than when a barrier finds it: the refusals last
//     milliseconds, not up to --checkpoint-interval, and the batches of
//     other streams stop being accepted into a checkpoint that can't
//     commit. The abort is the one a plain checkpoint's failed pre-commit
//     runs (abort, checkpoint.go): staging files deleted, producers back
//     to the last prepared checkpoint, waiters answered "aborted".
//
// The failure is noted without the ingest lock (an inline step fails
// inside an append, under it), as the newest failure by checkpoint id;
// under the lock, doomedLocked says whether it still dooms the open
// checkpoint: not once that checkpoint, or a later one, aborted or
// committed.

// doom is a staging file of checkpoint id that can't be finished.
type doom struct {
	id  uint64
	err error // "stream S: <why>"
}

// doomFile notes that a staging file of checkpoint id can't be finished
// and asks the coordinator to end the checkpoint now. It takes no lock:
// an inline encoding step calls it inside an append.
func (in *ingest) doomFile(id uint64, stream string, err error) {
	d := &doom{id: id, err: fmt.Errorf("stream %s: %w", stream, err)}
	for {
		old := in.doomed.Load()
		if old != nil && old.id >= id {
			return // the same checkpoint, or a later one (whose abort takes this one's with it) already is
		}
		if in.doomed.CompareAndSwap(old, d) {
			break
		}
	}
	select {
	case in.e.life.kick <- struct{}{}:
	default:
	}
}

// doomedLocked returns why the open checkpoint can't commit: a file of
// it, or of the checkpoint past its barrier (whose abort takes the open
// one), can't be finished. nil when none.
func (in *ingest) doomedLocked() *doom {
	d := in.doomed.Load()
	if d == nil || d.id <= in.abortedThrough || d.id <= in.lastDone {
		return nil
	}
	return d
}

// refuseDoomedLocked refuses a write into a doomed checkpoint, as a write
// refused by its own staging file is refused (write, engine.go), and asks
// again for the checkpoint to end (a coordinator that could not reserve
// ids tries again).
func (in *ingest) refuseDoomedLocked(d *doom) error {
	err := fmt.Errorf("the open checkpoint can't commit (a staging file of checkpoint %d can't be finished) and aborts now; resend after it: %w", d.id, d.err)
	in.reject("storage")
	in.e.health.noteDiskFullLocked(err)
	in.kickLocked()
	return err
}
