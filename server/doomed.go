package server

import (
	"context"
	"fmt"
)

// A doomed checkpoint.
//
// A staging file that can't be finished dooms its checkpoint: a Parquet
// or compressed file whose encoder failed in the background
// (staging.Txn.OnEncodeFail: ENOSPC creating its *.enc.inprogress or
// *.pages.inprogress, a failed write of either), a plain file a failed
// write left broken, or the files holding part of a refused batch that
// spans partitions (doomLocked, streams.go). Its pre-commit can only
// fail, and the checkpoint abort, with every batch accepted into it, of
// every stream, and the open checkpoint after it (abort, checkpoint.go).
// So nothing more is accepted into it (I13: a batch is accepted only when
// its commit is known possible; DESIGN "Streams": refused at write time,
// never failed at commit):
//
//   - A write is refused with the file's error, as a plain stream's
//     write is when its own staging write fails (write, engine.go): the
//     same error class, so the same answer (disk full: 507
//     insufficient_storage; EIO: what the API answers for it), the same
//     health note (Status.DiskFull, /readyz), the same "storage"
//     rejection. The client backs off and resends; after the abort its
//     batch can commit. A batch whose append ran the step that failed
//     (inline encoders) is refused too: it is in the doomed file.
//   - The checkpoint ends now, not at the next periodic or requested
//     one: the failure kicks the coordinator, whose cut of a doomed
//     checkpoint aborts it without pre-committing its other files (they
//     would be synced, on a full disk, only to be deleted). The abort is
//     the one any failed pre-commit gets, whatever the error's class
//     (checkpoint.go, step 2; a plain file's ENOSPC at pre-commit too):
//     staging files deleted, producers back to the last prepared
//     checkpoint, waiters answered "aborted" (503, expected_seq). Only
//     its moment changes: the refusals last until the coordinator is
//     free (milliseconds), not up to --checkpoint-interval.
//   - Unless the coordinator is busy committing the checkpoint before
//     (n, prepared: its commit may be stuck for hours while the
//     destination is down, I4). Then the open checkpoint n+1, not past
//     its barrier, aborts alone, at once (abortDoomedOpen): the same
//     abort (abortOpenLocked), under the ingest lock, with nothing
//     before it to abort — n is bound to commit, so producers go back
//     to n's prepared state, which is their durable one, and n's ranges
//     and keys stay — and n+2 opens: writes are accepted behind the
//     stuck commit, up to backpressure. Before, every write of every
//     stream was refused for as long as n was stuck (507 for ENOSPC,
//     even once the disk had room). It is not done while n is still
//     pre-committing: n may yet abort, and producers would have to go
//     back to n's barrier, not to their durable state; the coordinator
//     does it once n is prepared (recordPrepared), or aborts n+1 with n.
//     Nor when the id after n+1 is not reserved yet (I8): then the
//     coordinator ends it, once free.
//   - Or when the coordinator, free, may not cut it: reserving more ids
//     was refused for space (a full data dir: the state store can't
//     grow) and only the id the abort alone opens is reserved, not the
//     one a cut's abort would open (checkpoint.go). Then it aborts alone
//     too (abortDoomedAlone, free): its staging files hold the space the
//     store needs, and left open it would never end. A doom of the
//     checkpoint it opens then waits for space: nothing more is reserved.
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
	for _, kick := range []chan struct{}{in.e.life.kick, in.e.life.doomKick} {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// abortDoomedOpen aborts the open checkpoint alone if it is doomed while
// the coordinator is busy committing the one before it (see the top).
// The doom loop calls it when a doom is noted, the coordinator once a
// checkpoint is prepared. The check and the abort are one hold of the
// ingest lock, so the coordinator's barrier either cut the doomed
// checkpoint before (and aborts it) or finds it aborted after.
func (pipe *pipeline) abortDoomedOpen() { pipe.abortDoomedAlone(false) }

// abortDoomedAlone aborts the doomed open checkpoint alone: with the
// coordinator committing the one before it (abortDoomedOpen), or, free
// (the coordinator itself), when it may not cut it: reserving ids ahead
// was refused for space and only the id the abort alone opens is
// reserved, not the one a cut's abort would (checkpoint.go). On a full
// data dir the doomed checkpoint's staging files hold the space the
// store needs: left open, it would never end.
func (pipe *pipeline) abortDoomedAlone(free bool) {
	in := &pipe.e.ing
	in.mu.Lock()
	d := in.doomedLocked()
	if d == nil || !in.abortAloneLocked(d, pipe.reserved.Load(), free) {
		in.mu.Unlock()
		return
	}
	cause := fmt.Errorf("a staging file can't be finished: %w", d.err)
	log := in.e.log.With("checkpoint", d.id)
	committing := in.inflight
	ao := in.abortOpenLocked(d.id, nil, cause.Error(), log)
	in.e.health.noteDiskFullLocked(cause)
	in.e.health.publishLocked()
	in.mu.Unlock()
	if free {
		log.Error("checkpoint aborted alone, the ids a cut may hand out not reserved (reserving more was refused)", "err", cause, "reserved", pipe.reserved.Load())
	} else {
		log.Error("checkpoint aborted alone, the one before it committing", "err", cause, "committing", committing)
	}
	pipe.abortedOpen(ao, cause, log)
}

// abortAloneLocked reports whether doomed open checkpoint d.id may abort
// alone now: the coordinator is past the prepare of the checkpoint before
// it (or, free, none is past its barrier), and the id its abort opens is
// reserved.
func (in *ingest) abortAloneLocked(d *doom, reserved uint64, free bool) bool {
	busy := in.inflight != 0 && in.inflight <= in.lastPrepared
	if free {
		busy = in.inflight == 0
	}
	return d.id == in.openID && busy &&
		in.openID+1 <= reserved && in.isReady && !in.closed && in.e.health.failErr == nil
}

// doomLoop aborts a doomed open checkpoint while the coordinator is busy
// committing (abortDoomedOpen), on each doom noted.
func (lc *lifecycle) doomLoop(ctx context.Context) {
	lc.runEveryOr(ctx, nil, lc.doomKick, func() bool {
		lc.e.pipe.abortDoomedOpen()
		return false
	})
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
