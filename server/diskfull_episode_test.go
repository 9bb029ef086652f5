package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/testenv"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// fullDisk is the data dir's disk in a disk-full episode: while full, a
// write (now and then a short one) and a new directory anywhere on it
// are refused with ENOSPC, and so is every write transaction of the
// state store (storeFault), each with a 1 in pass chance of going
// through (the engine's own deletes freed a little, and the next write
// ate it). Opens, renames, removes and syncs pass, as on a real full
// disk. crashed fails every operation, as a dead process does nothing
// more. It is safe for concurrent use.
type fullDisk struct {
	full    atomic.Bool
	crashed atomic.Bool
	base    atomic.Pointer[faultfs.CrashFS] // to tell an existing directory
	pass    int
	refused atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand
}

func (d *fullDisk) refuse() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pass > 0 && d.rng.IntN(d.pass) == 0 {
		return false
	}
	d.refused.Add(1)
	return true
}

func (d *fullDisk) MaybeError(op faultfs.Op) error {
	if d.crashed.Load() {
		return faultfs.ErrCrashed
	}
	if !d.full.Load() {
		return nil
	}
	switch op.Kind {
	case faultfs.OpWrite:
		if !d.refuse() {
			return nil
		}
		d.mu.Lock()
		short := d.rng.IntN(3) == 0
		d.mu.Unlock()
		if short {
			return &faultfs.ShortWriteError{Err: syscall.ENOSPC}
		}
		return syscall.ENOSPC
	case faultfs.OpMkdir:
		if _, err := d.base.Load().Stat(op.Path); err == nil || !d.refuse() {
			return nil // MkdirAll of one that exists
		}
		return syscall.ENOSPC
	}
	return nil
}

// storeFault is the state store's WriteFault: refused for space, nothing
// written, while the disk is full.
func (d *fullDisk) storeFault(_ int, _ string, phase recovery.Phase) error {
	if phase != recovery.BeforeCommit || !d.full.Load() || !d.refuse() {
		return nil
	}
	return errPageENOSPC
}

// episode is what the clients of TestDiskFullLongEpisode share: the
// engine running now, what was answered, and what went wrong.
type episode struct {
	eng  atomic.Pointer[episodeEngine]
	stop atomic.Bool

	mu       sync.Mutex
	ans      answers                        // checkpoint id -> batches answered with it (I8)
	acked    map[invariant.BatchID]uint64   // answered committed (wait=commit, a committed duplicate), with the id
	codes    map[string]int                 // the answers, by DESIGN error code
	problems []string                       // unexpected answers
	claimed  map[invariant.BatchID]bool     // below a committed_seq that init answered
	sentNext map[[2]string]int64            // producer, stream -> highest seq sent + 1
	ids      map[invariant.BatchID][]uint64 // every id a batch was answered with
}

const (
	episodeDeadline = time.Second            // each call's context
	episodeSlack    = 500 * time.Millisecond // over it, a call hangs
	episodeRetry    = 2 * time.Millisecond   // the clients' Retry-After
)

func (ep *episode) problem(format string, args ...any) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.problems) < 30 {
		ep.problems = append(ep.problems, fmt.Sprintf(format, args...))
	}
}

// episodeEngine is one process's engine; dead once its crash began:
// what it answers then is a lost connection.
type episodeEngine struct {
	*Engine
	dead atomic.Bool
}

// answer classifies err, the answer of call on engine e, into the DESIGN
// row the API answers with (episodeCode), and reports whether it is one
// of allowed; an unexpected one, or a call over its limit, is a problem.
// An answer of an engine that crashed meanwhile is a lost connection.
func (ep *episode) answer(call string, e *episodeEngine, took time.Duration, limit time.Duration, err error, allowed ...string) (code string, lost bool) {
	if e.dead.Load() {
		return "lost", true
	}
	if took > limit+episodeSlack {
		ep.problem("%s took %v, its deadline %v: %v", call, took, limit, err)
	}
	code = episodeCode(err)
	if errors.Is(err, ErrDiskFull) && code != "insufficient_storage" {
		ep.problem("%s: refused for space, but answered %s (DESIGN: 507 insufficient_storage): %v", call, code, err)
	}
	ep.mu.Lock()
	ep.codes[call+" "+code]++
	ep.mu.Unlock()
	if code != "ok" && !slices.Contains(allowed, code) {
		ep.problem("%s: answered %s: %v", call, code, err)
	}
	return code, false
}

// episodeCode is the DESIGN error code the API answers err with, in the
// order api.engineError tries them.
func episodeCode(err error) string {
	var se *SeqError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrAborted):
		return "aborted" // 503, from a wait=commit
	case errors.As(err, &se):
		return "out_of_order_sequence" // 409, expected_seq
	case errors.Is(err, ErrUnknownProducer):
		return "unknown_producer"
	case errors.Is(err, ErrProducerBusy):
		return "producer_busy"
	case errors.Is(err, ErrFenced):
		return "producer_fenced"
	case errors.Is(err, ErrInvalidEpoch):
		return "invalid_epoch"
	case errors.Is(err, ErrKeyReused):
		return "idempotency_key_reused"
	case errors.Is(err, ErrBackpressure):
		return "backpressure" // 429, Retry-After
	case errors.Is(err, ErrNotReady), errors.Is(err, context.DeadlineExceeded):
		return "not_ready" // 503, Retry-After (a barrier outlasting the wait: waitedOut)
	case errors.Is(err, ErrClosed):
		return "shutting_down"
	case errors.Is(err, ErrDiskFull):
		return "insufficient_storage" // 507
	}
	return "internal"
}

func (ep *episode) accepted(id uint64, b invariant.BatchID) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.ans.add(id, b)
	if !slices.Contains(ep.ids[b], id) {
		ep.ids[b] = append(ep.ids[b], id)
	}
}

func (ep *episode) committed(id uint64, b invariant.BatchID) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.acked[b] = id
}

func (ep *episode) nap() { time.Sleep(episodeRetry) }

// producerClient is a client of producer id as the Go client behaves:
// init (again after a failed one, and now and then as a restarted client),
// then its next batch on a stream, resent as is after a retryable answer
// and from expected_seq after out_of_order_sequence; now and then it waits
// for the commit (wait=commit).
func (ep *episode) producerClient(id string, streams []string, seed uint64, done func()) {
	defer done()
	rng := rand.New(rand.NewPCG(seed, 7))
	var epoch int64
	next := map[string]int64{}
	inited := false
	for !ep.stop.Load() {
		e := ep.eng.Load()
		if !inited || rng.IntN(40) == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), episodeDeadline)
			began := time.Now()
			st, err := e.InitProducer(ctx, id)
			cancel()
			if _, lost := ep.answer("init", e, time.Since(began), episodeDeadline, err, "insufficient_storage", "not_ready", "shutting_down"); lost || err != nil {
				inited = false
				ep.nap()
				continue
			}
			inited, epoch = true, st.Epoch
			ep.mu.Lock()
			for _, s := range streams {
				ss, ok := st.Streams[s]
				if !ok {
					ss = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
				}
				k := [2]string{id, s}
				// committed_seq may lag next_seq: a prepared checkpoint's
				// commit is held back by the full disk (I4: it will).
				if ss.CommittedSeq >= ss.NextSeq || ss.NextSeq > ep.sentNext[k] {
					ep.problems = append(ep.problems, fmt.Sprintf("I12: init %s/%s: %+v, sent up to %d", id, s, ss, ep.sentNext[k]))
				}
				for q := int64(0); q <= ss.CommittedSeq; q++ {
					ep.claimed[invariant.BatchID{Producer: id, Stream: s, Seq: q}] = true
				}
				for b := range ep.acked {
					if b.Producer == id && b.Stream == s && b.Seq >= ss.NextSeq {
						ep.problems = append(ep.problems, fmt.Sprintf("init %s/%s: next_seq %d, but batch %d was answered committed", id, s, ss.NextSeq, b.Seq))
					}
				}
				next[s] = ss.NextSeq
			}
			ep.mu.Unlock()
			continue
		}
		s := streams[rng.IntN(len(streams))]
		k := [2]string{id, s}
		seq := next[s]
		b := invariant.BatchID{Producer: id, Stream: s, Seq: seq}
		ep.mu.Lock()
		ep.sentNext[k] = max(ep.sentNext[k], seq+1)
		ep.mu.Unlock()
		began := time.Now()
		res, err := e.Write(Write{Stream: s, Ext: "ndjson", Data: invariant.Batch(b, 1+int(seq%3)), Records: 1 + int(seq%3),
			Producer: &Producer{ID: id, Epoch: epoch, Seq: seq}})
		_, lost := ep.answer("write", e, time.Since(began), episodeDeadline, err, "insufficient_storage", "not_ready", "shutting_down", "backpressure", "out_of_order_sequence")
		var se *SeqError
		switch {
		case lost:
			ep.nap()
			continue
		case errors.As(err, &se):
			if se.Expected > seq {
				ep.problem("write %s: expected_seq %d beyond the batch sent, %d (a gap the client never made)", b, se.Expected, seq)
			}
			next[s] = se.Expected
			continue
		case err != nil:
			ep.nap()
			continue
		}
		ep.accepted(res.Checkpoint, b)
		if res.Duplicate && res.Committed {
			ep.committed(res.Checkpoint, b)
		}
		next[s] = res.NextSeq
		if res.Committed || rng.IntN(4) != 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), episodeDeadline)
		began = time.Now()
		err = e.Wait(ctx, res.Checkpoint)
		cancel()
		if _, lost := ep.answer("wait", e, time.Since(began), episodeDeadline, err, "aborted", "not_ready"); lost {
			continue
		}
		switch {
		case err == nil:
			ep.committed(res.Checkpoint, b)
		case errors.Is(err, ErrAborted):
			// 503 aborted with expected_seq: resend from there.
			if st, ok := e.Producer(id); ok {
				next[s] = st.Streams[s].NextSeq
			}
		}
	}
}

// shipper is a log shipper with an Idempotency-Key per batch that waits
// for each commit (wait=commit), resending the same key and body after
// any answer but committed, until stopped and its batch committed.
func (ep *episode) shipper(n int, stream string, done func()) {
	defer done()
	for i := int64(1); ; i++ {
		b := invariant.BatchID{Stream: stream, Seq: int64(n)*1_000_000 + i}
		data := invariant.Batch(b, 2)
		key := fmt.Sprintf("ship%d-%d", n, i)
		for tries := 0; ; tries++ {
			if ep.stop.Load() && tries > 5000 {
				ep.problem("keyed batch %s (key %s) not committed after %d tries", b, key, tries)
				return
			}
			e := ep.eng.Load()
			began := time.Now()
			res, err := e.Write(Write{Stream: stream, Ext: "ndjson", Data: data, Records: 2, Key: NewIdempotencyKey(key, data)})
			if _, lost := ep.answer("keyed write", e, time.Since(began), episodeDeadline, err, "insufficient_storage", "not_ready", "shutting_down", "backpressure"); lost || err != nil {
				ep.nap()
				continue
			}
			ep.accepted(res.Checkpoint, b)
			if res.Duplicate && res.Committed {
				ep.committed(res.Checkpoint, b)
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), episodeDeadline)
			began = time.Now()
			err = e.Wait(ctx, res.Checkpoint)
			cancel()
			if _, lost := ep.answer("keyed wait", e, time.Since(began), episodeDeadline, err, "aborted", "not_ready", "shutting_down"); lost || err != nil {
				continue // 503 aborted or not yet: the same key again
			}
			ep.committed(res.Checkpoint, b)
			break
		}
		if ep.stop.Load() {
			return
		}
	}
}

// TestDiskFullLongEpisode: the data dir (staging, destination, state
// store) fills for many checkpoints' worth of time, the way users meet
// it: producers and keyed shippers (wait=commit) keep writing and retry
// as clients do; meanwhile a producer inits, another is deleted, a
// stream's configuration changes (a barrier), checkpoints are asked for,
// and the process crashes once and starts again on the still full disk.
// Then space comes back. Every answer is a DESIGN row a client retries
// (507 insufficient_storage, 503 aborted / not_ready, expected_seq), no
// call outlasts its deadline, health says "disk full" during the episode
// and clears after, the engine writes again by itself, and in the end
// every batch answered committed — and every batch of the producers'
// durable state — is in the destination exactly once, each in a
// checkpoint whose id it was answered with (I8), and no id answered
// before the crash is opened again.
func TestDiskFullLongEpisode(t *testing.T) {
	seed := testenv.Seed(t, "EOSINK_DISKFULL_SEED")
	rng := rand.New(rand.NewPCG(seed, 1))
	// A third of the seeds, nothing passes at all while the disk is full.
	disk := &fullDisk{pass: []int{0, 4, 9}[rng.IntN(3)], rng: rand.New(rand.NewPCG(seed, 2))}
	t.Logf("seed %d (replay with EOSINK_DISKFULL_SEED=%d): while full, 1 in %d operations passes (0: none)", seed, seed, disk.pass)
	base := faultfs.NewCrashFS()
	disk.base.Store(base)
	r := newRig(t, faultfs.NewInjectFS(base, disk))
	r.tweak = func(c *Config) {
		c.CheckpointInterval = 20 * time.Millisecond
		c.CommitLinger = time.Millisecond
		c.BufferSize, c.RollBytes = 64, 400 // staging writes reach the disk; files roll
		c.Encoders = staging.NewInlineEncoders(128)
		c.idBlock = 4 // reservations of ids meet the full store often
		c.Parallel = 2
		leaser := local.New(c.FS, rigDest, rigStaging)
		leaser.StaleLock = time.Hour
		c.Leaser, c.LeaseTimeout, c.Listen = leaser, 600*time.Millisecond, "127.0.0.1:1"
	}
	sf := r.withStoreFaults()
	sf.set(disk.storeFault)
	ep := &episode{ans: answers{}, acked: map[invariant.BatchID]uint64{}, codes: map[string]int{},
		sentNext: map[[2]string]int64{}, ids: map[invariant.BatchID][]uint64{}, claimed: map[invariant.BatchID]bool{}}
	e := r.start(nil)
	ep.eng.Store(&episodeEngine{Engine: e})
	if _, err := e.PutStream(t.Context(), "z", streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}); err != nil {
		t.Fatal(err)
	}
	// pd commits two batches before the episode, and is deleted during it.
	pd := r.initProducer("pd")
	for seq := range int64(2) {
		res := mustSend(t, e, pd, "a", seq, 1)
		ep.accepted(res.Checkpoint, invariant.BatchID{Producer: "pd", Stream: "a", Seq: seq})
	}
	r.commit()

	var clients sync.WaitGroup
	streams := []string{"a", "z"}
	producers := []string{"p0", "p1", "p2"}
	for i, p := range producers {
		clients.Add(1)
		go ep.producerClient(p, streams, seed+uint64(i), clients.Done)
	}
	for i, s := range []string{"k", "a"} {
		clients.Add(1)
		go ep.shipper(i, s, clients.Done)
	}
	time.Sleep(150 * time.Millisecond)

	// The disk fills.
	disk.full.Store(true)
	sawFull := func(within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			st := ep.eng.Load().Status()
			if st.DiskFull != "" || !st.Ready && strings.Contains(st.Recovering, "disk full") {
				return true
			}
		}
		return false
	}
	if !sawFull(2 * time.Second) {
		t.Fatalf("health: no disk full reported 2 s into the episode: %+v", ep.eng.Load().Status())
	}
	admin := func(call string, fn func(ctx context.Context, e *Engine) error, allowed ...string) (bool, error) {
		e := ep.eng.Load()
		ctx, cancel := context.WithTimeout(context.Background(), episodeDeadline)
		defer cancel()
		began := time.Now()
		err := fn(ctx, e.Engine)
		_, lost := ep.answer(call, e, time.Since(began), episodeDeadline, err, allowed...)
		return !lost && err == nil, err
	}
	// A DELETE answered with an error after its forgotten-producers
	// document was published (the store refused to forget it) is done by
	// the next start (recovery applies the document): its retry is then
	// answered unknown_producer, which a retrying admin takes as done.
	var deleteMayHave bool
	deletePD := func(allowed ...string) bool {
		if deleteMayHave {
			allowed = append(allowed, "unknown_producer")
		}
		ok, err := admin("delete", func(ctx context.Context, e *Engine) error { return e.DeleteProducer(ctx, "pd") }, allowed...)
		if err != nil && !errors.Is(err, ErrUnknownProducer) && !strings.Contains(err.Error(), "record forgotten producers") {
			deleteMayHave = true
		}
		return ok || deleteMayHave && errors.Is(err, ErrUnknownProducer)
	}
	checkpoint := func(ctx context.Context, e *Engine) error { _, err := e.Checkpoint(ctx); return err }
	putA := func(ctx context.Context, e *Engine) error {
		_, err := e.PutStream(ctx, "a", streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip})
		return err
	}
	var deleted, putDone bool
	pn := "pn"
	episodeSteps := func(until time.Time) {
		for time.Now().Before(until) {
			switch x := rng.IntN(10); {
			case x < 4:
				_, _ = admin("checkpoint", checkpoint, "insufficient_storage", "not_ready", "shutting_down")
			case x < 6 && !deleted:
				deleted = deletePD("insufficient_storage", "not_ready", "shutting_down")
			case x < 8 && !putDone:
				putDone, _ = admin("put stream", putA, "insufficient_storage", "not_ready", "shutting_down")
			case x < 9 && pn != "":
				clients.Add(1)
				go ep.producerClient(pn, streams, seed+100, clients.Done) // its first call is its init
				producers = append(producers, pn)
				pn = ""
			}
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		}
	}
	episodeSteps(time.Now().Add(600 * time.Millisecond))

	// The process crashes, a power cut half the time, and starts again
	// on the still full disk.
	powerCut := rng.IntN(2) == 0
	answeredBefore := ep.maxAnswered()
	ep.eng.Load().dead.Store(true)
	disk.crashed.Store(true)
	if powerCut {
		base = base.CrashClone()
	}
	r.closeStopped(e)
	disk.crashed.Store(false)
	disk.base.Store(base)
	r.fs = faultfs.NewInjectFS(base, disk)
	e, _ = r.open(nil, 0) // recovery goes on in the background, on the full disk
	ep.eng.Store(&episodeEngine{Engine: e})
	t.Logf("crash (power cut %v) with ids through %d answered", powerCut, answeredBefore)
	if !sawFull(2 * time.Second) {
		t.Errorf("health: no disk full reported 2 s after the restart on a full disk: %+v", e.Status())
	}
	episodeSteps(time.Now().Add(600 * time.Millisecond))
	if !deleted || !putDone {
		t.Logf("during the episode: delete answered %v, put answered %v", deleted, putDone)
	}

	// Space comes back: the engine goes on by itself.
	disk.full.Store(false)
	back := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("not ready 10 s after space came back: %v; %+v", err, e.Status())
	}
	cancel()
	if st := e.Status(); st.FirstID <= answeredBefore {
		t.Errorf("I8: the start after the crash opened %d, an id answered before it (through %d)", st.FirstID, answeredBefore)
	}
	for !deleted {
		deleted = deletePD("not_ready")
		if time.Since(back) > 10*time.Second {
			t.Fatal("DELETE pd not answered 10 s after space came back")
		}
	}
	for !putDone {
		putDone, _ = admin("put stream", putA, "not_ready")
		if time.Since(back) > 10*time.Second {
			t.Fatal("PUT a not answered 10 s after space came back")
		}
	}
	for {
		res, err := checkpointIn(e)
		if err == nil && res.State == recovery.Committed && e.Status().DiskFull == "" {
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("10 s after space came back: checkpoint %+v %v, status %+v", res, err, e.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("writable again %v after space came back", time.Since(back).Round(time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	ep.stop.Store(true)
	clients.Wait()

	// Everything accepted is committed or forgotten: what is durable
	// must be in the destination exactly once.
	if st := e.Status(); st.DiskFull != "" || st.Failed != "" {
		t.Errorf("status after space came back: %+v", st)
	}
	commitAllQuiet(t, e)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, p := range ep.problems {
		t.Error(p)
	}
	t.Logf("answers: %v; %d operations refused for space", ep.codes, disk.refused.Load())
	must := map[invariant.BatchID]bool{{Producer: "pd", Stream: "a", Seq: 0}: true, {Producer: "pd", Stream: "a", Seq: 1}: true}
	mustNot := map[invariant.BatchID]bool{}
	for _, p := range producers {
		st, ok := e.Producer(p)
		if !ok {
			t.Errorf("producer %s unknown at the end", p)
			continue
		}
		for _, s := range streams {
			next := st.Streams[s].NextSeq
			for q := range ep.sentNext[[2]string{p, s}] {
				b := invariant.BatchID{Producer: p, Stream: s, Seq: q}
				if q < next {
					must[b] = true
				} else {
					mustNot[b] = true
				}
			}
		}
	}
	for b, id := range ep.acked {
		if mustNot[b] {
			t.Errorf("batch %s answered committed in %d, but not in its producer's durable state", b, id)
		}
		must[b] = true
	}
	for b := range ep.claimed {
		if mustNot[b] {
			t.Errorf("batch %s below a committed_seq init answered, but not in its producer's durable state", b)
		}
		must[b] = true
	}
	rep := r.check(invariant.Expect{Must: must, MustNot: mustNot})
	for b, id := range ep.acked {
		if !slices.Contains(rep.Checkpoints[b], id) {
			t.Errorf("batch %s answered committed in %d, found in %v", b, id, rep.Checkpoints[b])
		}
	}
	// I8: a committed id holds only batches answered with it, and every
	// batch answered with it.
	for b, ids := range rep.Checkpoints {
		for _, id := range ids {
			if !ep.ans[id][b] {
				t.Errorf("I8: checkpoint %d holds batch %s, answered with %v", id, b, ep.ids[b])
			}
		}
	}
	for id, bs := range ep.ans {
		c, err := e.store.Get(id)
		if err != nil || c.State != recovery.Committed {
			continue
		}
		for b := range bs {
			if !slices.Contains(rep.Checkpoints[b], id) {
				t.Errorf("I8: checkpoint %d committed without batch %s, answered with it (found in %v)", id, b, rep.Checkpoints[b])
			}
		}
	}
	t.Logf("%d batches in %d files, %d answered committed", len(rep.Batches), rep.Files, len(ep.acked))
}

func (ep *episode) maxAnswered() uint64 {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var top uint64
	for id := range ep.ans {
		top = max(top, id)
	}
	return top
}

// commitAllQuiet runs checkpoints until one commits with nothing more
// written.
func commitAllQuiet(t *testing.T, e *Engine) {
	t.Helper()
	for try := 0; try < 5; try++ {
		res, err := checkpointIn(e)
		if err == nil && res.State == recovery.Committed {
			return
		}
	}
	t.Fatal("no checkpoint commits once space came back")
}
