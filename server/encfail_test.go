package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// Tests of a doomed checkpoint (doomed.go): a staging file whose encoder
// failed in the background refuses the writes after it, with a plain
// stream's answer for the error's class, and its checkpoint aborts on
// its own, at once.

// encFailCase is one way an encoder fails: op kind on the staging file
// whose name ends in suffix fails with errno, in stream's files.
type encFailCase struct {
	name       string
	stream     string
	kind       faultfs.OpKind
	suffix     string
	errno      syscall.Errno
	background bool // steps on the Encoders' goroutines, not inside Append
}

var encFailCases = []encFailCase{
	{name: "zstd-enc-create-ENOSPC", stream: zstdStream, kind: faultfs.OpOpen, suffix: ".enc" + staging.Suffix, errno: syscall.ENOSPC},
	{name: "zstd-enc-write-ENOSPC", stream: zstdStream, kind: faultfs.OpWrite, suffix: ".enc" + staging.Suffix, errno: syscall.ENOSPC},
	{name: "parquet-enc-create-ENOSPC", stream: parquetStream, kind: faultfs.OpOpen, suffix: ".enc" + staging.Suffix, errno: syscall.ENOSPC},
	{name: "parquet-pages-create-ENOSPC", stream: parquetStream, kind: faultfs.OpOpen, suffix: ".pages" + staging.Suffix, errno: syscall.ENOSPC},
	{name: "zstd-enc-write-EIO", stream: zstdStream, kind: faultfs.OpWrite, suffix: ".enc" + staging.Suffix, errno: syscall.EIO},
	{name: "parquet-enc-create-ENOSPC-background", stream: parquetStream, kind: faultfs.OpOpen, suffix: ".enc" + staging.Suffix, errno: syscall.ENOSPC, background: true},
	{name: "zstd-enc-write-ENOSPC-background", stream: zstdStream, kind: faultfs.OpWrite, suffix: ".enc" + staging.Suffix, errno: syscall.ENOSPC, background: true},
}

// TestEncoderFailureRefusesWrites: once a staging file's encoder failed,
// every write into its checkpoint, of any stream, is refused with the
// answer a plain stream's write gets for that error (disk full:
// ErrDiskFull, which the API answers 507 insufficient_storage; EIO: the
// error itself), wait=commit or not, and while the disk is full Status
// says so; the checkpoint aborts on its own as soon as the coordinator is
// free, or past the prepare of the checkpoint before (here it is held in
// that checkpoint's pre-commit: the doom stays in force), and a
// wait=commit client of a batch accepted before the failure is told
// "aborted". Then, with room on the disk again, the
// clients resend from what the engine expects and everything commits
// exactly once. Before doomed.go the writes after the failure were
// accepted (202) and the checkpoint aborted only at its pre-commit.
func TestEncoderFailureRefusesWrites(t *testing.T) {
	for _, tc := range encFailCases {
		t.Run(tc.name, func(t *testing.T) { encFailRun(t, tc) })
	}
}

func encFailRun(t *testing.T, tc encFailCase) {
	base := faultfs.NewCrashFS()
	var encFail atomic.Bool
	var encFired atomic.Int64
	hold := newPreCommitHold()
	inj := faultfs.NewInjectFS(base, faultfs.InjectorFunc(func(op faultfs.Op) error {
		if encFail.Load() && op.Kind == tc.kind && strings.HasSuffix(op.Path, tc.suffix) {
			encFired.Add(1)
			return tc.errno
		}
		hold.op(op)
		return nil
	}))
	r := newRig(t, inj)
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) {
		c.BufferSize = 128
		c.Encoders = staging.NewInlineEncoders(256)
		if tc.background {
			c.Encoders = staging.NewEncoders(2, 256)
		}
		c.Hooks.Checkpoint = ckLog.hook
	}
	e := r.start(nil)
	configureTestStreams(t, e)
	r.checkpoint()
	m := newModel()
	for _, p := range []string{"p0", "p1"} {
		ps, err := e.InitProducer(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		m.epoch[p] = ps.Epoch
	}
	isClass := func(err error) bool {
		if tc.errno == syscall.ENOSPC {
			return errors.Is(err, ErrDiskFull)
		}
		return errors.Is(err, tc.errno) && !errors.Is(err, ErrDiskFull)
	}

	// Checkpoint n holds p0's batch on a plain stream; its pre-commit is
	// held, so the coordinator is busy and n is not prepared.
	if err := m.write(t, e, "p0", "a", 2); err != nil {
		t.Fatal(err)
	}
	n := e.Status().OpenID
	snapN := m.snapshot()
	hold.arm()
	type ended struct {
		res CheckpointResult
		err error
	}
	done := make(chan ended, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.Checkpoint(ctx)
		done <- ended{res, err}
	}()
	t.Cleanup(func() { // before the rig's: a test that failed early lets it end
		hold.free()
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
	})
	hold.wait(t)
	if open := e.Status().OpenID; open != n+1 {
		t.Fatalf("open checkpoint %d, want %d", open, n+1)
	}

	// In checkpoint n+1, the encoder of p1's file fails: the writes go
	// on until one is refused, and every write after it is.
	encFail.Store(true)
	var refused error
	accepted := 0
	firstID := uint64(0)
	for try := 0; refused == nil; try++ {
		if try == 200 {
			t.Fatalf("%d batches accepted after the encoder failed (%d faults): none refused", accepted, encFired.Load())
		}
		res, err := m.writeResult(t, e, "p1", tc.stream, 4)
		switch {
		case err != nil:
			refused = err
		case encFired.Load() > 0 && !tc.background:
			t.Fatalf("batch accepted (%+v) after the encoder failed inline", res)
		default:
			accepted++
			if firstID == 0 {
				firstID = res.Checkpoint
			}
			if tc.background {
				time.Sleep(time.Millisecond) // a step runs meanwhile
			}
		}
	}
	if !isClass(refused) {
		t.Fatalf("write refused with %v, want the class of %v", refused, tc.errno)
	}
	if encFired.Load() == 0 {
		t.Fatalf("write refused (%v) before the encoder failed", refused)
	}
	if accepted > 0 && firstID != n+1 {
		t.Fatalf("batches accepted into %d, want %d", firstID, n+1)
	}

	// The checkpoint is doomed: nothing more goes into it, whatever the
	// stream, with or without producer, while the coordinator is busy.
	writes := []struct {
		what string
		do   func() error
	}{
		{"p1 on the failed file's stream again", func() error { return m.write(t, e, "p1", tc.stream, 1) }},
		{"p0 on a plain stream", func() error { return m.write(t, e, "p0", "a", 1) }},
		{"p1 on a plain stream", func() error { return m.write(t, e, "p1", "b", 1) }},
		{"an anonymous batch", func() error { return m.writeAnon(e, "b") }},
	}
	for _, w := range writes {
		if err := w.do(); !isClass(err) {
			t.Fatalf("%s after the encoder failed: %v, want refused like %v", w.what, err, refused)
		}
	}
	if tc.errno == syscall.ENOSPC {
		if st := e.Status(); st.DiskFull == "" {
			t.Fatal("Status does not say the disk is full")
		}
	}
	// Room again: the checkpoint is still doomed until it aborts.
	encFail.Store(false)
	if err := m.write(t, e, "p0", "a", 1); !isClass(err) {
		t.Fatalf("write into the doomed checkpoint once the disk has room: %v", err)
	}
	// A wait=commit client of a batch accepted before the failure.
	waited := make(chan error, 1)
	if accepted > 0 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			waited <- e.Wait(ctx, firstID)
		}()
	}

	// The coordinator goes on: n is prepared, then n+1 aborts on its own
	// (no checkpoint is asked for), alone: n+2 opens and is not aborted;
	// then n commits.
	hold.free()
	end := <-done
	done <- end // for the cleanup
	if end.err != nil || end.res.State != recovery.Committed {
		t.Fatalf("checkpoint %d: %+v %v", n, end.res, end.err)
	}
	m.checkpointed(snapN, true)
	waitFor(t, "the doomed checkpoint's abort", func() bool {
		s, ok := ckLog.state(n + 1)
		return ok && s == recovery.Aborted
	})
	if s, ok := ckLog.state(n + 2); ok {
		t.Fatalf("checkpoint %d (opened by the doomed one's abort alone): %q, want open", n+2, s)
	}
	if accepted > 0 {
		if err := <-waited; !errors.Is(err, ErrAborted) {
			t.Fatalf("wait=commit of checkpoint %d: %v, want aborted", firstID, err)
		}
	}
	m.rollback()
	m.resolveAnon(t, e)
	m.checkProducers(t, e)

	// The clients resend from what the engine expects: all commits once.
	for _, k := range [][2]string{{"p1", tc.stream}, {"p0", "a"}, {"p1", "b"}} {
		for range 3 {
			if err := m.write(t, e, k[0], k[1], 2); err != nil {
				t.Fatalf("resend %v after the abort: %v", k, err)
			}
		}
	}
	snap := m.snapshot()
	if res := r.checkpoint(); res.State != recovery.Committed {
		t.Fatalf("checkpoint after the abort: %+v", res)
	}
	m.checkpointed(snap, true)
	m.resolveAnon(t, e)
	r.check(m.expect())
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// doomWatch follows the dooms of an engine that a test drives step by
// step with a model of what it accepted (the model test, the fault
// sweep): with inline encoders, a doom appears inside the write whose
// append ran the failing step, or whose file broke.
type doomWatch struct{ seen *doom }

// met returns the doom that appeared since it last returned one, or nil.
func (w *doomWatch) met(e *Engine) *doom {
	d := w.peek(e)
	if d != nil {
		w.seen = d
	}
	return d
}

// peek is met without taking the doom: the next met returns it again.
func (w *doomWatch) peek(e *Engine) *doom {
	if d := e.ing.doomed.Load(); d != w.seen {
		return d
	}
	return nil
}

// refusedFor checks err, the answer to a write during which d appeared:
// the write is refused with the failed file's error, so it gets the
// answer a plain stream's write gets for that class (ErrDiskFull: 507
// insufficient_storage), not accepted into a checkpoint that can't
// commit. Or with its own batch's failed write: the append wrote the
// buffered batches (whose step then failed), then failed on the batch,
// and is answered as any write whose staging write fails.
func refusedFor(d *doom, err error) error {
	var pe *fs.PathError
	switch {
	case err == nil:
		return fmt.Errorf("a write was accepted although a staging file of checkpoint %d failed during it: %v", d.id, d.err)
	case !errors.Is(err, d.err) && !errors.As(err, &pe):
		return fmt.Errorf("a write during which a staging file of checkpoint %d failed (%v) was refused with another error: %v", d.id, d.err, err)
	case !errors.Is(err, d.err):
		return nil // its own write failed: answered for that error
	case errors.Is(d.err, ErrDiskFull) && !errors.Is(err, ErrDiskFull):
		return fmt.Errorf("a write refused for a full disk is not ErrDiskFull: %v", err)
	}
	return nil
}

// settleDoomed: a staging file failed during the last step and doomed
// its checkpoint, which the engine aborts on its own (doomed.go). Wait
// for that abort (a checkpoint asked for ends after it: they are
// serial), check it, and forget what it held, as the engine does:
// producers back to the last prepared checkpoint. The model's steps
// write nothing after a checkpoint of their own that may have aborted
// the doomed one already, so forgetting again is right either way.
func (mr *modelRun) settleDoomed() {
	d := mr.doomWatch.met(mr.e)
	if d == nil {
		return
	}
	mr.st.doomed++
	armed := mr.crash
	// A third of the time the disk the doomed file filled holds the state
	// store too: it refuses every reservation of ids ahead. With the ids
	// the abort hands out reserved (the open one's next, and the one its
	// abort opens), that must not keep the doomed checkpoint from
	// aborting (h8-adv, 5f1833d): its abort frees the space.
	full := mr.storeFull != nil && mr.rng.IntN(3) == 0
	open, reserved := mr.e.Status().OpenID, mr.e.pipe.reserved.Load()
	if full {
		mr.storeFull.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
	}
	res, err := checkpointUntil(mr.e, func() bool { return armed != nil && armed.Crashed() })
	if full {
		mr.storeFull.set(nil)
		mr.st.doomedStoreFull++
	}
	state, ran := mr.ckLog.state(d.id)
	mr.note("doomed checkpoint %d (%v): %s (then asked: %d %s %v; store full %v, open %d reserved %d)", d.id, d.err, state, res.ID, res.State, err, full, open, reserved)
	// The engine may have aborted the doomed checkpoint alone before the
	// one asked for ran (doomed.go): then that one's ids are those after
	// the open checkpoint now, which the failed checkpoint left as it was.
	if openNow := mr.e.Status().OpenID; full && err != nil && !(armed != nil && armed.Crashed()) && mr.e.Err() == nil && reserved >= max(open, openNow)+2 {
		mr.fail("doomed checkpoint %d: a refused reservation of ids ahead stopped the checkpoint although ids through %d were reserved (open %d, now %d): %v", d.id, reserved, open, openNow, err)
	}
	if err != nil {
		// Crashed or stopped: the doomed checkpoint never prepared, the
		// store says the rest after the restart.
		mr.restart(mr.rng.IntN(2) == 0)
		return
	}
	if !ran || state != recovery.Aborted {
		mr.fail("doomed checkpoint %d (%v) ended %q (%v), want aborted", d.id, d.err, state, ran)
	}
	mr.m.rollback()
	mr.m.resolveAnon(mr.t, mr.e)
}

// TestSplitAppendFailRefusesWrites: a batch spanning partitions whose
// second piece fails after the first was appended dooms its checkpoint
// too (doomLocked; TestStreamSplitAppendFails has the abort): until the
// engine has aborted it, on its own (held here by the pre-commit of the
// checkpoint before), every write is refused with the piece's error (EIO
// here), not accepted into a checkpoint that can't commit; then writes
// commit again.
func TestSplitAppendFailRefusesWrites(t *testing.T) {
	var failMatch atomic.Pointer[string]
	hold := newPreCommitHold()
	fs := faultfs.NewInjectFS(faultfs.NewCrashFS(), faultfs.InjectorFunc(func(op faultfs.Op) error {
		if m := failMatch.Load(); m != nil && op.Kind == faultfs.OpWrite && strings.Contains(op.Path, *m) {
			return syscall.EIO
		}
		hold.op(op)
		return nil
	}))
	r := newRig(t, fs)
	r.foreign = true // records of its own: the end check skips their ranges
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) {
		c.BufferSize = 8 // every batch is written at once
		c.Hooks.Checkpoint = ckLog.hook
	}
	e := r.start(nil)
	if _, err := e.PutStream(t.Context(), "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"}); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	one := func(k string) Write {
		return Write{Stream: "ev", Ext: "ndjson", Data: []byte(`{"k":"` + k + `","n":1}` + "\n"), Records: 1}
	}
	if _, err := e.Write(one("a")); err != nil {
		t.Fatal(err)
	}
	n := e.Status().OpenID
	hold.arm()
	done := commitInBackground(e, n)
	t.Cleanup(func() {
		hold.free()
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
	})
	hold.wait(t)
	m := fmt.Sprintf("-%020d-0001.", n+1) // the second file of checkpoint n+1: partition b
	failMatch.Store(&m)
	two := Write{Stream: "ev", Ext: "ndjson", Data: []byte(`{"k":"a","n":2}` + "\n" + `{"k":"b","n":2}` + "\n"), Records: 2}
	if _, err := e.Write(two); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the write whose second piece failed: %v", err)
	}
	failMatch.Store(nil)
	for _, k := range []string{"a", "c"} {
		if res, err := e.Write(one(k)); !errors.Is(err, syscall.EIO) || errors.Is(err, ErrDiskFull) {
			t.Fatalf("write into the doomed checkpoint (partition %s): %+v %v, want refused with the piece's EIO", k, res, err)
		}
	}
	hold.free()
	err := <-done
	done <- err // for the cleanup
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the doomed checkpoint's abort", func() bool {
		s, ok := ckLog.state(n + 1)
		return ok && s == recovery.Aborted
	})
	if _, err := e.Write(two); err != nil {
		t.Fatalf("after the abort: %v", err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 2 {
		t.Fatalf("after the abort: %+v", res)
	}
}

// Adversarial tests of the doom (h6-doomadv): dooms noted for the wrong
// checkpoint, or none to abort them; keyed and producer batches of a
// doomed checkpoint, resent after its abort.

// doomAnon is one anonymous record on plain stream s.
func doomAnon(s, v string) Write {
	return Write{Stream: s, Ext: "ndjson", Data: []byte(`{"v":"` + v + `"}` + "\n"), Records: 1}
}

// TestDoomIdleEngineAbortsByItself: a background encoder fails in the
// open checkpoint of an engine nobody writes to again and whose
// checkpoints run only on request (interval 0): the failure alone ends
// the checkpoint (aborted, with the next one), no write and no request
// needed; Status says the disk is full until a checkpoint commits, then
// no longer.
func TestDoomIdleEngineAbortsByItself(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) { c.CheckpointInterval = 0; c.Hooks.Checkpoint = ckLog.hook }
	e := r.start(nil)
	r.checkpoint()
	if _, err := e.Write(doomAnon("a", "1")); err != nil {
		t.Fatal(err)
	}
	n := e.Status().OpenID
	// As a Parquet file's encoder of n does on its goroutine.
	e.ing.doomFile(n, "pq", fmt.Errorf("create encoded staging file: %w", ErrDiskFull))
	waitFor(t, "the doomed checkpoint's abort, on its own", func() bool {
		s, ok := ckLog.state(n)
		return ok && s == recovery.Aborted
	})
	if s, ok := ckLog.state(n + 1); !ok || s != recovery.Aborted {
		t.Fatalf("checkpoint %d, open during the abort: %q %v, want aborted with it", n+1, s, ok)
	}
	if st := e.Status(); st.DiskFull == "" {
		t.Fatalf("Status after an abort for a full disk: %+v", st)
	}
	// Once aborted, nothing refuses: the resend commits, and the disk is
	// no longer said full.
	if res, err := e.Write(doomAnon("a", "1")); err != nil || res.Checkpoint != n+2 {
		t.Fatalf("resend after the abort: %+v %v", res, err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 1 {
		t.Fatalf("checkpoint after the abort: %+v", res)
	}
	if st := e.Status(); st.DiskFull != "" {
		t.Fatalf("Status after a commit: disk full %q", st.DiskFull)
	}
}

// TestDoomLateIsIgnored: a doom told late, for a checkpoint that has
// committed (an impossible failure, but onFail runs unlocked) or that
// aborted (a step failing while its abort halts it), refuses nothing and
// aborts nothing: only the open checkpoint or the one past its barrier
// can be doomed.
func TestDoomLateIsIgnored(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) { c.Hooks.Checkpoint = ckLog.hook }
	e := r.start(nil)
	if _, err := e.Write(doomAnon("a", "1")); err != nil {
		t.Fatal(err)
	}
	n := e.Status().OpenID
	if res := r.checkpoint(); res.State != recovery.Committed || res.ID != n {
		t.Fatalf("checkpoint %d: %+v", n, res)
	}
	e.ing.doomFile(n, "a", fmt.Errorf("late: %w", ErrDiskFull))
	if res, err := e.Write(doomAnon("a", "2")); err != nil || res.Checkpoint != n+1 {
		t.Fatalf("write after a late doom of committed %d: %+v %v", n, res, err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.ID != n+1 {
		t.Fatalf("checkpoint after a late doom of committed %d: %+v", n, res)
	}
	// n+2 doomed for real: it and n+3 abort.
	if _, err := e.Write(doomAnon("a", "3")); err != nil {
		t.Fatal(err)
	}
	e.ing.doomFile(n+2, "a", fmt.Errorf("real: %w", syscall.EIO))
	waitFor(t, "the abort of the doomed checkpoint", func() bool {
		s, ok := ckLog.state(n + 3)
		return ok && s == recovery.Aborted
	})
	// A step of n+3's (aborted with n+2) fails late, as its halt races it.
	e.ing.doomFile(n+3, "a", fmt.Errorf("late: %w", syscall.EIO))
	if res, err := e.Write(doomAnon("a", "3")); err != nil || res.Checkpoint != n+4 {
		t.Fatalf("write after a late doom of aborted %d: %+v %v", n+3, res, err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.ID != n+4 || res.Records != 1 {
		t.Fatalf("checkpoint after a late doom of aborted %d: %+v", n+3, res)
	}
}

// TestDoomForgottenByRestart: a doom is in memory only; a crash before
// the abort leaves the doomed checkpoint unprepared (recovery deletes
// its files), and the next engine accepts and commits writes.
func TestDoomForgottenByRestart(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true
	e := r.start(nil)
	if _, err := e.Write(doomAnon("a", "1")); err != nil {
		t.Fatal(err)
	}
	n := e.Status().OpenID
	e.ing.mu.Lock() // hold the coordinator off: no abort before the crash
	e.ing.doomFile(n, "a", fmt.Errorf("step: %w", ErrDiskFull))
	e.ing.mu.Unlock()
	r.stop()
	e = r.start(nil)
	if d := e.ing.doomedLocked(); d != nil {
		t.Fatalf("a new engine is doomed: %+v", d)
	}
	res, err := e.Write(doomAnon("a", "2"))
	if err != nil || res.Checkpoint <= n {
		t.Fatalf("write after the restart: %+v %v (doomed was %d)", res, err, n)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 1 {
		t.Fatalf("checkpoint after the restart: %+v", res)
	}
}

// doomStuck starts an engine whose checkpoint n (holding one record of
// plain stream "a") is prepared and stuck committing (a rename that
// fails, retried: I4), so the coordinator is busy and a doom of n+1
// aborts n+1 alone (doomed.go); release lets n commit.
func doomStuck(t *testing.T) (r *rig, e *Engine, ckLog *checkpointLog, n uint64, release func()) {
	return doomBusy(t, false, nil)
}

// doomHeld is doomStuck with n held in its pre-commit, not prepared: a
// doom of n+1 stays in force until release; then n+1 aborts alone once
// n is prepared, and n commits. before (nil: none) runs before n is cut:
// a barrier (a PUT) would wait for the held one.
func doomHeld(t *testing.T, before func(*Engine)) (r *rig, e *Engine, ckLog *checkpointLog, n uint64, release func()) {
	return doomBusy(t, true, before)
}

func doomBusy(t *testing.T, held bool, before func(*Engine)) (r *rig, e *Engine, ckLog *checkpointLog, n uint64, release func()) {
	var stuck atomic.Bool
	var stuckFired atomic.Int64
	hold := newPreCommitHold()
	fsys := faultfs.NewInjectFS(faultfs.NewCrashFS(), faultfs.InjectorFunc(func(op faultfs.Op) error {
		if stuck.Load() && op.Kind == faultfs.OpRename && strings.HasPrefix(op.Path, rigStaging) {
			stuckFired.Add(1)
			return syscall.EIO
		}
		hold.op(op)
		return nil
	}))
	r = newRig(t, fsys)
	r.foreign = true
	ckLog = &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) { c.Hooks.Checkpoint = ckLog.hook }
	e = r.start(nil)
	if before != nil {
		before(e)
	}
	r.checkpoint()
	if _, err := e.Write(doomAnon("a", "0")); err != nil {
		t.Fatal(err)
	}
	n = e.Status().OpenID
	if held {
		hold.arm()
	} else {
		stuck.Store(true)
	}
	done := commitInBackground(e, n)
	var once atomic.Bool
	release = func() {
		if once.Swap(true) {
			return
		}
		stuck.Store(false)
		hold.free()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(time.Minute):
			t.Error("checkpoint n not done within a minute")
		}
	}
	t.Cleanup(release)
	if held {
		hold.wait(t)
	} else {
		waitFor(t, "checkpoint n's commit stuck", func() bool { return stuckFired.Load() > 0 })
	}
	return r, e, ckLog, n, release
}

// preCommitHold holds the coordinator in a checkpoint's pre-commit: once
// armed, the next sync of the staging directory (the pre-commit's last
// local step) blocks until free. The checkpoint is then past its barrier
// and not prepared, so a doom of the open one stays in force (doomed.go).
type preCommitHold struct {
	armed            atomic.Bool
	held, freed      chan struct{}
	heldOnce, freeOn sync.Once
}

func newPreCommitHold() *preCommitHold {
	return &preCommitHold{held: make(chan struct{}), freed: make(chan struct{})}
}

func (h *preCommitHold) arm() { h.armed.Store(true) }

// op is called by the injector with every operation.
func (h *preCommitHold) op(op faultfs.Op) {
	if op.Kind != faultfs.OpSync || op.Path != rigStaging || !h.armed.Load() {
		return
	}
	h.heldOnce.Do(func() { close(h.held) })
	<-h.freed
}

// wait waits until a pre-commit is held.
func (h *preCommitHold) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(20 * time.Second):
		t.Fatal("no pre-commit held within 20 s")
	}
}

func (h *preCommitHold) free() {
	h.armed.Store(false)
	h.freeOn.Do(func() { close(h.freed) })
}

// TestDoomKeyedAndProducerResend: batches accepted (keyed, and a
// producer's) in a checkpoint that is then doomed: a retry during the
// doom answers as a duplicate (DESIGN "Idempotency keys": a key accepted
// answers 202 until its checkpoint ends; wait=commit tells "aborted"), a
// new batch is refused; after the abort the keys are forgotten and the
// producer is back to its last prepared state, so the resends are
// accepted, and everything commits exactly once.
func TestDoomKeyedAndProducerResend(t *testing.T) {
	r, e, ckLog, n, release := doomHeld(t, nil)
	ps, err := e.InitProducer(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	key := func(v string) Write {
		w := doomAnon("k", v)
		w.Key = NewIdempotencyKey("key-"+v, w.Data)
		return w
	}
	prod := func(seq int64) Write {
		w := doomAnon("b", fmt.Sprint(seq))
		w.Producer = &Producer{ID: "p", Epoch: ps.Epoch, Seq: seq}
		return w
	}
	for _, w := range []Write{key("1"), prod(0)} {
		if res, err := e.Write(w); err != nil || res.Checkpoint != n+1 || res.Duplicate {
			t.Fatalf("write into n+1: %+v %v", res, err)
		}
	}
	e.ing.doomFile(n+1, "pq", fmt.Errorf("step: %w", ErrDiskFull))
	for _, w := range []Write{key("1"), prod(0)} {
		if res, err := e.Write(w); err != nil || !res.Duplicate || res.Committed || res.Checkpoint != n+1 {
			t.Fatalf("retry during the doom: %+v %v, want a duplicate, not committed, in %d", res, err, n+1)
		}
	}
	for _, w := range []Write{key("2"), prod(1)} {
		if res, err := e.Write(w); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("new batch during the doom: %+v %v, want ErrDiskFull", res, err)
		}
	}
	release()
	waitFor(t, "the doomed checkpoint's abort", func() bool {
		s, ok := ckLog.state(n + 1)
		return ok && s == recovery.Aborted
	})
	// Resend: the key is forgotten, the producer expects its first seq.
	if res, err := e.Write(prod(1)); err == nil {
		t.Fatalf("producer's next batch after the abort accepted (%+v): its earlier one was aborted", res)
	}
	for _, w := range []Write{key("1"), key("2"), prod(0), prod(1)} {
		if res, err := e.Write(w); err != nil || res.Duplicate {
			t.Fatalf("resend after the abort: %+v %v", res, err)
		}
	}
	for _, w := range []Write{key("1"), prod(0)} {
		if res, err := e.Write(w); err != nil || !res.Duplicate {
			t.Fatalf("retry of a resend: %+v %v, want a duplicate", res, err)
		}
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 4 {
		t.Fatalf("checkpoint of the resends: %+v, want 4 records committed", res)
	}
	for _, w := range []Write{key("1"), key("2"), prod(0), prod(1)} {
		if res, err := e.Write(w); err != nil || !res.Duplicate || !res.Committed {
			t.Fatalf("retry after the commit: %+v %v, want a committed duplicate", res, err)
		}
	}
}

// TestDoomKeepsOtherAnswers: while the open checkpoint is doomed for a
// full disk, what a client sent wrong is still answered for itself, not
// "disk full": records the stream's schema refuses, a fenced epoch, a
// sequence gap, a key reused with another body. And the barriers that
// wait for the doomed checkpoint (a stream's PUT, a producer's init) end
// with its abort: the init's next seq is the one before the aborted
// batch, the PUT is in force.
func TestDoomKeepsOtherAnswers(t *testing.T) {
	r, e, ckLog, n, release := doomHeld(t, func(e *Engine) {
		if _, err := e.PutStream(t.Context(), parquetStream, streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}); err != nil {
			t.Fatal(err)
		}
	})
	old, err := e.InitProducer(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := e.InitProducer(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	prod := func(ep, seq int64) Write {
		w := doomAnon("b", fmt.Sprint(seq))
		w.Producer = &Producer{ID: "p", Epoch: ep, Seq: seq}
		return w
	}
	keyed := doomAnon("k", "1")
	keyed.Key = NewIdempotencyKey("k1", keyed.Data)
	for _, w := range []Write{prod(cur.Epoch, 0), keyed} {
		if res, err := e.Write(w); err != nil || res.Checkpoint != n+1 {
			t.Fatalf("write into n+1: %+v %v", res, err)
		}
	}
	e.ing.doomFile(n+1, zstdStream, fmt.Errorf("step: %w", ErrDiskFull))

	other := doomAnon("k", "2")
	other.Key = NewIdempotencyKey("k1", other.Data) // another body
	for _, c := range []struct {
		what string
		w    Write
		want error
	}{
		{"a fenced epoch", prod(old.Epoch, 1), ErrFenced},
		{"a sequence gap", prod(cur.Epoch, 5), ErrOutOfOrder},
		{"a key reused with another body", other, ErrKeyReused},
	} {
		if _, err := e.Write(c.w); !errors.Is(err, c.want) || errors.Is(err, ErrDiskFull) {
			t.Errorf("%s during the doom: %v, want %v", c.what, err, c.want)
		}
	}
	bad := Write{Stream: parquetStream, Ext: "ndjson", Data: []byte(`{"s":"x","q":"not a number","i":1,"n":1}` + "\n"), Records: 1}
	if _, err := e.Write(bad); err == nil || errors.Is(err, ErrDiskFull) {
		t.Errorf("records the schema refuses, during the doom: %v, want refused for their content", err)
	}

	// The barriers wait for the doomed checkpoint's end: its abort.
	type ans struct {
		v   any
		err error
	}
	put, init := make(chan ans, 1), make(chan ans, 1)
	go func() {
		si, err := e.PutStream(context.Background(), "b", streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip})
		put <- ans{si, err}
	}()
	go func() {
		ps, err := e.InitProducer(context.Background(), "p")
		init <- ans{ps, err}
	}()
	release()
	waitFor(t, "the doomed checkpoint's abort", func() bool {
		s, ok := ckLog.state(n + 1)
		return ok && s == recovery.Aborted
	})
	for what, ch := range map[string]chan ans{"put": put, "init": init} {
		select {
		case a := <-ch:
			if a.err != nil {
				t.Fatalf("%s waiting on the doomed checkpoint: %v", what, a.err)
			}
			if ps, ok := a.v.(ProducerState); ok {
				if ss := ps.Streams["b"]; ss.NextSeq != 0 {
					t.Fatalf("init after the abort of p's batch 0: %+v, want next seq 0", ps)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s waiting on the doomed checkpoint: no answer in 20 s", what)
		}
	}
	if info := e.Stream("b"); info.ActiveVersion == 0 || info.Config.Compression != streamconf.CompressionGzip {
		t.Fatalf("stream b after its PUT: %+v", info)
	}
	ps, _ := e.InitProducer(t.Context(), "p")
	if _, err := e.Write(prod(ps.Epoch, 0)); err != nil {
		t.Fatalf("resend after the abort: %v", err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 1 {
		t.Fatalf("after the abort: %+v", res)
	}
}

// TestDoomOfCheckpointInFlight: the encoder of checkpoint n fails on its
// goroutine after n was cut and n+1 opened, while n's pre-commit waits
// for the step. n+1 took writes before the failure; from the failure
// until n's abort (which takes n+1 with it) writes are refused; after
// it they are accepted into n+2 and commit, not refused forever, and the
// wait=commit client of n+1's batch is told "aborted".
func TestDoomOfCheckpointInFlight(t *testing.T) {
	var armed atomic.Bool
	stalled, unstall := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	fsys := faultfs.NewInjectFS(faultfs.NewCrashFS(), faultfs.InjectorFunc(func(op faultfs.Op) error {
		if !armed.Load() || op.Kind != faultfs.OpWrite || !strings.HasSuffix(op.Path, ".enc"+staging.Suffix) {
			return nil
		}
		if !once.Swap(true) {
			close(stalled)
			<-unstall
		}
		return syscall.ENOSPC
	}))
	r := newRig(t, fsys)
	r.foreign = true
	ckLog := &checkpointLog{end: map[uint64]recovery.State{}}
	r.tweak = func(c *Config) {
		c.BufferSize = 128
		c.Encoders = staging.NewEncoders(2, 256)
		c.Hooks.Checkpoint = ckLog.hook
	}
	e := r.start(nil)
	configureTestStreams(t, e)
	r.checkpoint()
	defer func() {
		if !once.Load() {
			close(stalled)
		}
		select {
		case <-unstall:
		default:
			close(unstall)
		}
	}()
	armed.Store(true)
	n := e.Status().OpenID
	for i := range 20 { // 2 KB: steps are due (the test's step size is 256 bytes)
		w := doomAnon(zstdStream, strings.Repeat("z", 100)+fmt.Sprint(i))
		if _, err := e.Write(w); err != nil {
			t.Fatalf("zstd write %d: %v", i, err)
		}
	}
	select {
	case <-stalled: // a step runs, held in its write of the encoded file
	case <-time.After(20 * time.Second):
		t.Fatal("no encoding step started")
	}
	// n is cut; its pre-commit waits for the held step.
	done := make(chan CheckpointResult, 1)
	go func() {
		res, _ := e.Checkpoint(context.Background())
		done <- res
	}()
	waitFor(t, "checkpoint n cut", func() bool { return e.Status().OpenID == n+1 })
	res, err := e.Write(doomAnon("a", "before"))
	if err != nil || res.Checkpoint != n+1 {
		t.Fatalf("write into n+1 before the failure: %+v %v", res, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- e.Wait(context.Background(), n+1) }()
	close(unstall)
	if res := <-done; res.ID != n || res.State != recovery.Aborted {
		t.Fatalf("checkpoint n: %+v, want aborted", res)
	}
	if s, ok := ckLog.state(n + 1); !ok || s != recovery.Aborted {
		t.Fatalf("checkpoint n+1: %q %v, want aborted with n", s, ok)
	}
	if err := <-waited; !errors.Is(err, ErrAborted) {
		t.Fatalf("wait=commit of n+1: %v, want aborted", err)
	}
	if d := e.ing.doomed.Load(); d == nil || d.id != n {
		t.Fatalf("the doom noted: %+v, want one of in-flight checkpoint %d (the test did not reach its case)", d, n)
	}
	armed.Store(false)
	for _, s := range []string{"a", zstdStream} {
		if res, err := e.Write(doomAnon(s, "after")); err != nil || res.Checkpoint != n+2 {
			t.Fatalf("write to %s after the abort: %+v %v, want accepted into %d", s, res, err, n+2)
		}
	}
	if res := r.checkpoint(); res.State != recovery.Committed || res.Records != 2 {
		t.Fatalf("after the abort: %+v", res)
	}
}

// TestDoomBehindStuckCommit: the open checkpoint n+1 is doomed while n's
// commit is stuck (the destination down: retried until it passes, I4):
// n+1 aborts alone, at once, and writes are accepted into n+2 behind the
// stuck commit (doomed.go). Failed before (it was TestDoomBehindStuckCommitBUG,
// skipped): n+1 aborted only when the coordinator was free, so every
// write, of every stream, was refused — 507 "disk full" for an ENOSPC
// doom, even once the disk had room — for as long as n was stuck, hours
// maybe. doomalone_test.go has the rest: crash, resends, the race with
// the coordinator's barrier.
func TestDoomBehindStuckCommit(t *testing.T) {
	_, e, ckLog, n, release := doomStuck(t)
	if _, err := e.Write(doomAnon("a", "1")); err != nil {
		t.Fatal(err)
	}
	e.ing.doomFile(n+1, zstdStream, fmt.Errorf("step: %w", ErrDiskFull))
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, ok := ckLog.state(n + 1)
		if ok && s == recovery.Aborted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("doomed checkpoint %d not aborted within 2 s while %d's commit is stuck: writes refused: %v", n+1, n, func() error { _, err := e.Write(doomAnon("a", "2")); return err }())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := e.Write(doomAnon("a", "2")); err != nil {
		t.Fatalf("write behind the stuck commit after the doomed checkpoint's abort: %v", err)
	}
	release()
}

// commitInBackground runs a checkpoint (n, the open one) on its own
// goroutine, for a test that holds its commit; the error says how it did
// not commit.
func commitInBackground(e *Engine, n uint64) chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.Checkpoint(ctx)
		if err == nil && res.State != recovery.Committed {
			err = fmt.Errorf("checkpoint %d: %+v", n, res)
		}
		done <- err
	}()
	return done
}
