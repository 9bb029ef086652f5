package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

func TestWriteCheckpointCommit(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p1")
	must := map[invariant.BatchID]bool{}
	for seq := range int64(5) {
		res, err := send(e, p, "clicks", seq, 3)
		if err != nil {
			t.Fatalf("send %d: %v", seq, err)
		}
		if res.NextSeq != seq+1 || res.Duplicate {
			t.Fatalf("send %d: %+v", seq, res)
		}
		must[invariant.BatchID{Producer: "p1", Stream: "clicks", Seq: seq}] = true
	}
	mustSend(t, e, nil, "views", 1000, 2)
	must[invariant.BatchID{Stream: "views", Seq: 1000}] = true
	if _, err := e.Write(Write{Stream: "views", Ext: "txt", Data: []byte("plain\n"), Records: 1}); err != nil {
		t.Fatal(err)
	}
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 3 || res.Records != 18 {
		t.Fatalf("checkpoint: %+v", res)
	}
	// text files are not test records; check them by name and content.
	var txt string
	for _, f := range res.Files {
		if strings.HasSuffix(f.Final, ".txt") {
			txt = f.Final
		}
	}
	data, err := afero.ReadFile(r.fs, rigDest+"/"+txt)
	if err != nil || string(data) != "plain\n" {
		t.Fatalf("txt file %s: %q %v", txt, data, err)
	}
	r.broken = "removes a committed file"
	if err := r.fs.Remove(rigDest + "/" + txt); err != nil {
		t.Fatal(err)
	}
	// The manifest still names the txt file: remove it from the check by
	// checking batches only through a fresh destination copy is overkill;
	// instead confirm the checker notices the deletion.
	rep := (&invariant.Checker{FS: r.fs, Dest: rigDest}).Check(invariant.Expect{Must: must})
	if rep.Err() == nil || !strings.Contains(rep.Err().Error(), "missing") {
		t.Fatalf("checker missed a deleted file: %v", rep.Err())
	}
	st, _ := e.Producer("p1")
	if got := st.Streams["clicks"]; got.NextSeq != 5 || got.CommittedSeq != 4 {
		t.Fatalf("producer state %+v", got)
	}
}

func TestProducerRules(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	if _, err := send(e, &Producer{ID: "ghost"}, "s", 0, 1); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("unknown producer: %v", err)
	}
	ps, _ := e.InitProducer(t.Context(), "p")
	p0 := &Producer{ID: "p", Epoch: ps.Epoch}
	mustSend(t, e, p0, "s", 0, 1)
	// duplicate: nothing written, next_seq reported
	res, err := send(e, p0, "s", 0, 1)
	if err != nil || !res.Duplicate || res.NextSeq != 1 || res.Committed {
		t.Fatalf("duplicate: %+v %v", res, err)
	}
	// gap
	if _, err := send(e, p0, "s", 5, 1); err == nil {
		t.Fatal("gap accepted")
	} else if exp, ok := isSeqErr(err); !ok || exp != 1 {
		t.Fatalf("gap: %v", err)
	}
	// newer epoch than current
	if _, err := send(e, &Producer{ID: "p", Epoch: ps.Epoch + 1}, "s", 1, 1); !errors.Is(err, ErrInvalidEpoch) {
		t.Fatalf("newer epoch: %v", err)
	}
	// a new init fences the old epoch (I6)
	ps2, err := e.InitProducer(t.Context(), "p")
	if err != nil || ps2.Epoch != ps.Epoch+1 || ps2.Streams["s"].NextSeq != 1 {
		t.Fatalf("re-init: %+v %v", ps2, err)
	}
	if _, err := send(e, p0, "s", 1, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale epoch: %v", err)
	}
	p1 := &Producer{ID: "p", Epoch: ps2.Epoch}
	mustSend(t, e, p1, "s", 1, 1)
	// sequences are per stream
	mustSend(t, e, p1, "other", 0, 1)
	r.checkpoint()
	res, err = send(e, p1, "s", 0, 1)
	if err != nil || !res.Duplicate || !res.Committed {
		t.Fatalf("committed duplicate: %+v %v", res, err)
	}
	st, _ := e.Producer("p")
	if st.Fenced != 1 {
		t.Fatalf("fenced count %d", st.Fenced)
	}
	r.check(invariant.Expect{Exact: true, Must: map[invariant.BatchID]bool{
		{Producer: "p", Stream: "s", Seq: 0}: true, {Producer: "p", Stream: "s", Seq: 1}: true, {Producer: "p", Stream: "other", Seq: 0}: true,
	}})
	// epochs survive a restart; sequences are those of the last prepared checkpoint.
	r.stop()
	e = r.start(nil)
	st, ok := e.Producer("p")
	if !ok || st.Epoch != ps2.Epoch || st.Streams["s"].NextSeq != 2 || st.Streams["s"].CommittedSeq != 1 {
		t.Fatalf("after restart: %+v", st)
	}
}

func TestUnpreparedBatchesForgottenOnRestart(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	ps, _ := e.InitProducer(t.Context(), "p")
	p := &Producer{ID: "p", Epoch: ps.Epoch}
	for seq := range int64(3) {
		mustSend(t, e, p, "s", seq, 2)
	}
	r.checkpoint()
	for seq := int64(3); seq < 6; seq++ {
		mustSend(t, e, p, "s", seq, 2)
	}
	r.stop() // crash: 3..5 accepted, never prepared
	e = r.start(nil)
	if left, _ := afero.ReadDir(r.fs, rigStaging); len(left) != 0 {
		t.Fatalf("staging not cleaned: %d files", len(left))
	}
	// I5: the service expects 3 again; a client sending 5 is told so.
	if _, err := send(e, p, "s", 5, 2); err == nil {
		t.Fatal("seq 5 accepted after losing 3, 4")
	} else if exp, ok := isSeqErr(err); !ok || exp != 3 {
		t.Fatalf("expected_seq: %v", err)
	}
	for seq := int64(3); seq < 6; seq++ {
		mustSend(t, e, p, "s", seq, 2)
	}
	r.checkpoint()
	must := map[invariant.BatchID]bool{}
	for seq := range int64(6) {
		must[invariant.BatchID{Producer: "p", Stream: "s", Seq: seq}] = true
	}
	r.check(invariant.Expect{Must: must, Exact: true})
}

// TestEmptyCheckpoints: a requested checkpoint with nothing to commit is
// answered committed with its own id, records no row, and its id is never
// handed out again after a restart (I8), without a write per checkpoint.
func TestEmptyCheckpoints(t *testing.T) {
	r, f := storeRig(t)
	e := r.start(nil)
	before := f.count()
	var ids []uint64
	for range 10 {
		res := r.commit()
		if len(ids) > 0 && res.ID != ids[len(ids)-1]+1 {
			t.Fatalf("empty checkpoint ids %v then %d", ids, res.ID)
		}
		ids = append(ids, res.ID)
	}
	if n := f.count() - before; n > 1 {
		t.Fatalf("10 empty checkpoints ran %d state-store write transactions: %v", n, f.ops[before:])
	}
	list, err := e.store.List(10)
	if err != nil || len(list) != 0 {
		t.Fatalf("empty checkpoints recorded: %v %v", list, err)
	}
	last := ids[len(ids)-1]
	r.stop()
	e = r.start(nil)
	// last+1 was open when the engine stopped and may have taken writes:
	// a new start never hands it out again.
	if st := e.Status(); st.OpenID <= last+1 {
		t.Fatalf("checkpoint ids reused after restart: open %d, last %d", st.OpenID, last)
	}
}

func TestBackpressure(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.MaxUncommittedBytes = 1000 }
	e := r.start(nil)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = send(e, nil, "s", int64(i), 5)
	}
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("no backpressure: %v", err)
	}
	r.checkpoint()
	if _, err := send(e, nil, "s", 999, 1); err != nil {
		t.Fatalf("after checkpoint: %v", err)
	}
}

func TestWaitForCommit(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	res, err := send(e, nil, "s", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Wait(context.Background(), res.Checkpoint) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned before the checkpoint: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	r.checkpoint()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// an old id is answered from the store
	r.checkpoint()
	if err := e.Wait(context.Background(), res.Checkpoint); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptStoreRefusesToStart(t *testing.T) {
	r := newRig(t, nil)
	r.start(nil)
	r.stop()
	if err := afero.WriteFile(afero.NewOsFs(), r.storePath, []byte("garbage, not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(r.config(r.fs))
	if err == nil || !errors.Is(err, recovery.ErrCorrupt) || !strings.Contains(err.Error(), r.storePath) {
		t.Fatalf("corrupt store: %v", err)
	}
}

// With periodic checkpoints on, a large open checkpoint is checkpointed
// early instead of running into backpressure; with interval 0 it is not.
func TestEarlyCheckpointWhenLarge(t *testing.T) {
	for _, interval := range []time.Duration{time.Hour, 0} {
		r := newRig(t, nil)
		r.tweak = func(c *Config) { c.MaxUncommittedBytes = 4000; c.CheckpointInterval = interval }
		e := r.start(nil)
		for i := range 10 { // about 1,800 bytes: past a quarter, short of the limit
			mustSend(t, e, nil, "s", int64(i), 5)
		}
		deadline := time.Now().Add(5 * time.Second)
		for e.Status().LastDone == 0 && interval > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if done := e.Status().LastDone; (done > 0) != (interval > 0) {
			t.Fatalf("interval %v: last committed checkpoint %d", interval, done)
		}
		r.stop()
	}
}

// TestStatusOffIngestLock: Status (health, readiness, metrics) answers
// while the ingest lock is held, as it is by a long barrier or a slow
// write, and shows what the last writer published.
func TestStatusOffIngestLock(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	mustSend(t, e, nil, "clicks", 1, 3)
	e.ing.mu.Lock()
	got := make(chan Status, 1)
	go func() { got <- e.Status() }()
	var st Status
	select {
	case st = <-got:
		e.ing.mu.Unlock()
	case <-time.After(5 * time.Second):
		e.ing.mu.Unlock()
		t.Fatal("Status blocked on the ingest lock")
	}
	if !st.Ready || st.OpenFiles != 1 || st.OpenRecords != 3 || st.Held == 0 || st.OpenID == 0 {
		t.Fatalf("status %+v: want ready, one open file, 3 records held", st)
	}
	res := r.checkpoint()
	if st := e.Status(); st.LastDone != res.ID || st.OpenFiles != 0 || st.Held != 0 || st.OpenID != res.ID+1 {
		t.Fatalf("status after checkpoint %d: %+v", res.ID, st)
	}
}

// TestCheckpointQueries: the read side's queries give a stored checkpoint
// with its files, pages newest first without files, and ErrNotFound for
// the open one.
func TestCheckpointQueries(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true // records of its own: the end check skips their ranges
	e := r.start(nil)
	var ids []uint64
	for range 3 {
		if _, err := e.Write(Write{Stream: "views", Ext: "txt", Data: []byte("a\n"), Records: 1}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.checkpoint().ID)
	}
	c, err := e.CheckpointRecord(ids[1])
	if err != nil || c.ID != ids[1] || c.State != recovery.Committed || len(c.Files) != 1 {
		t.Fatalf("checkpoint %d: %+v, %v", ids[1], c, err)
	}
	if _, err := e.CheckpointRecord(e.Status().OpenID); !errors.Is(err, recovery.ErrNotFound) {
		t.Fatalf("open checkpoint: %v, want ErrNotFound", err)
	}
	newest, err := e.CheckpointRecords(0, 2)
	if err != nil || len(newest) != 2 || newest[0].ID != ids[2] || newest[1].ID != ids[1] || newest[0].Files != nil {
		t.Fatalf("newest 2: %+v, %v", newest, err)
	}
	older, err := e.CheckpointRecords(newest[1].ID, 10)
	if err != nil || len(older) != 1 || older[0].ID != ids[0] {
		t.Fatalf("before %d: %+v, %v", newest[1].ID, older, err)
	}
}

// TestReadyIsOneFact: the moment Status says ready (and /readyz answers
// 200, and writes are taken), a checkpoint is taken too. CI failed on
// 81355ae in TestS3OverTLS: a write was accepted and the checkpoint after
// it answered 503 not_ready, because the start set the ingest's ready
// flag, counted producers and logged before it closed Ready. The start is
// held here in its "recovery done" log line, inside that window.
func TestReadyIsOneFact(t *testing.T) {
	r := newRig(t, nil)
	e, release := r.openHeld("recovery done")
	st := e.Status()
	select {
	case <-e.Ready():
	default:
		if st.Ready {
			close(release)
			t.Fatal("Status says ready while Ready is not closed: a checkpoint now answers not_ready")
		}
	}
	close(release)
	if err := e.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, "clicks", 1, 2)
	if res := r.checkpoint(); len(res.Files) != 1 {
		t.Fatalf("checkpoint after ready: %+v", res)
	}
}

// openHeld opens an engine on r whose start is held in its log record
// msg (holdHandler) and returns once it is; closing release lets the
// start go on. It sets r.tweak (the logger).
func (r *rig) openHeld(msg string) (e *Engine, release chan struct{}) {
	r.t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	r.tweak = func(c *Config) {
		c.Logger = slog.New(&holdHandler{msg: msg, held: held, release: release})
	}
	e, err := Open(r.config(r.fs))
	if err != nil {
		r.t.Fatal(err)
	}
	r.e = e
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("the start never logged %q", msg)
	}
	return e, release
}

// shutdownInBackground runs e.Shutdown (the SIGTERM path) with 30 s, and
// sends its error.
func shutdownInBackground(e *Engine) <-chan error {
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- e.Shutdown(ctx)
	}()
	return stopped
}

// holdHandler is a log handler that, at the first record whose message is
// msg, closes held and blocks until release is closed.
type holdHandler struct {
	msg           string
	held, release chan struct{}
	once          sync.Once
}

func (h *holdHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *holdHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *holdHandler) WithGroup(string) slog.Handler            { return h }
func (h *holdHandler) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message == h.msg {
		h.once.Do(func() { close(h.held); <-h.release })
	}
	return nil
}
