package tests

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// TestGracefulStop stops the service with SIGTERM at random moments while
// producers write. Each stop must exit 0 after a final checkpoint, so that
// right after the exit every batch answered 202 (or 200) before it is in
// the destination, and every ?wait=commit request in flight is answered
// 200 committed. Some rounds run with --checkpoint-interval 0, so only the
// final checkpoint can commit what the round wrote.
func TestGracefulStop(t *testing.T) {
	if testing.Short() {
		t.Skip("graceful stop loop: not in -short mode")
	}
	const rounds = 5
	rng, _ := testRand(t)
	dir := workDir(t)
	dest := dir + "/dest"
	round := 0
	p := newProc(t, dir, procConfig{
		Args: []string{"--dest", "file://" + dest, "--node", "e2e"},
		PerStart: func() []string {
			if round%2 == 0 {
				return []string{"--checkpoint-interval", "0"}
			}
			return []string{"--checkpoint-interval", fmt.Sprintf("%dms", 100+rng.IntN(201))}
		},
	})
	p.StartReady()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// acked: batches the service answered 200/202; the answer proves it
	// holds them.
	var ackMu sync.Mutex
	acked := map[batchKey]int{}
	observe := func(id string) func(a answer) {
		return func(a answer) {
			if a.Status == http.StatusOK || a.Status == http.StatusAccepted {
				ackMu.Lock()
				acked[batchKey{P: id, S: a.Stream, Q: a.Seq}] = 1
				ackMu.Unlock()
			}
		}
	}

	fl := &fleet{led: newLedger()}
	var load []*rawProducer
	for i := range 3 {
		id := fmt.Sprintf("load%d", i)
		rp := mustRawProducer(ctx, t, p.URL, id)
		rp.Observe = observe(id)
		load = append(load, rp)
		fl.add(ctx, rp, crashStreams, rng)
	}
	// Waiters send one ?wait=commit batch per round and record every answer.
	type waitAnswer struct {
		key batchKey
		a   answer
	}
	var waiters []*rawProducer
	var waitMu sync.Mutex
	var waitAnswers []waitAnswer
	for i := range 2 {
		id := fmt.Sprintf("waiter%d", i)
		rp := mustRawProducer(ctx, t, p.URL, id)
		rp.Observe = func(a answer) {
			observe(id)(a)
			if a.Wait {
				waitMu.Lock()
				waitAnswers = append(waitAnswers, waitAnswer{batchKey{id, a.Stream, a.Seq}, a})
				waitMu.Unlock()
			}
		}
		waiters = append(waiters, rp)
	}

	var maxStop, maxStart time.Duration
	inFlight := 0
	for round = 0; round < rounds; round++ {
		if round > 0 {
			maxStart = max(maxStart, p.Restart())
		}
		if err := ctxsleep.Sleep(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			if _, err := p.Checkpoint(ctx); err != nil {
				t.Errorf("round %d: POST /v1/checkpoints: %v", round, err)
			}
		}
		// One ?wait=commit batch per waiter, accepted before the signal.
		waitMu.Lock()
		waitAnswers = nil
		waitMu.Unlock()
		var wwg sync.WaitGroup
		keys := make([]batchKey, len(waiters))
		for i, w := range waiters {
			stream := crashStreams[rng.IntN(len(crashStreams))]
			k := batchKey{P: w.ID(), S: stream, Q: w.Next(stream)}
			keys[i] = k
			recs := makeRecords(rng, k, 1+rng.IntN(5), 16)
			fl.led.add(k, len(recs))
			wwg.Go(func() {
				if _, err := w.SendBody(ctx, k.S, k.Q, ndjson(recs), true); err != nil {
					fl.errs.add(fmt.Errorf("waiter %s: %w", k, err))
				}
			})
		}
		for _, k := range keys {
			waitAccepted(t, ctx, p, k)
		}
		waitMu.Lock()
		answered := len(waitAnswers)
		waitMu.Unlock()
		inFlight += len(keys) - answered

		began := time.Now()
		code := p.Term()
		stopped := time.Since(began)
		maxStop = max(maxStop, stopped)
		if code != 0 {
			t.Fatalf("round %d: SIGTERM: exit %d, want 0; log %s:\n%s", round, code, p.LogPath, p.logTail(30))
		}
		// Right after the exit, before anything is resent: everything
		// acknowledged is committed.
		ackMu.Lock()
		want := make(map[batchKey]int, len(acked))
		for k, v := range acked {
			want[k] = v
		}
		ackMu.Unlock()
		r := requireDest(t, invariant.LocalDest(dest), want, false)
		t.Logf("round %d: stopped in %s; %d acknowledged batches all committed (%d files)", round, stopped.Round(time.Millisecond), len(want), r.Files)

		if !waitTimeout(&wwg, 10*time.Second) {
			t.Fatalf("round %d: ?wait=commit requests not answered 10s after the exit", round)
		}
		waitMu.Lock()
		got := map[batchKey]answer{}
		for _, wa := range waitAnswers {
			if _, ok := got[wa.key]; !ok {
				got[wa.key] = wa.a // the first answer
			}
		}
		waitMu.Unlock()
		for _, k := range keys {
			a, ok := got[k]
			switch {
			case !ok:
				t.Errorf("round %d: ?wait=commit %s: no answer", round, k)
			case a.Status != http.StatusOK || !a.Write.Committed:
				t.Errorf("round %d: ?wait=commit %s in flight at SIGTERM: answered %d %s (committed %v, err %v), want 200 committed",
					round, k, a.Status, a.Code, a.Write.Committed, a.Err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	maxStart = max(maxStart, p.Restart())
	fl.halt(ctx, t, 200*time.Millisecond)
	for _, rp := range append(load, waiters...) {
		fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
		trigger := time.AfterFunc(100*time.Millisecond, func() { _, _ = p.Checkpoint(fctx) })
		if err := rp.Flush(fctx); err != nil {
			t.Errorf("flush %s: %v", rp.ID(), err)
		}
		trigger.Stop()
		fcancel()
		if n := rp.Rewinds(); n != 0 {
			t.Errorf("producer %s was asked %d times to resend batches the service had accepted: a graceful stop lost them", rp.ID(), n)
		}
	}
	if code := p.Term(); code != 0 {
		t.Errorf("final SIGTERM: exit %d, want 0", code)
	}
	fl.errs.check(t, "producer")
	want := fl.led.snapshot()
	batches, records := fl.led.records()
	rep := requireDest(t, invariant.LocalDest(dest), want, true)
	requireVerify(t, nil, "--dest", "file://"+dest)
	report(t, "%d SIGTERM rounds, all exit 0; %d ?wait=commit requests in flight at a SIGTERM, all answered 200 committed; %d batches, %d records verified exactly once in %d files; longest stop %s, longest start to ready %s",
		rounds, inFlight, batches, records, rep.Files, maxStop.Round(time.Millisecond), maxStart.Round(time.Millisecond))
}

// waitAccepted waits until the service has accepted batch k (its next_seq
// for the producer and stream went past k's seq).
func waitAccepted(t testing.TB, ctx context.Context, p *proc, k batchKey) {
	t.Helper()
	eventuallyValue(t, 10*time.Second, 5*time.Millisecond,
		func() (producerState, error) { return p.Producer(ctx, k.P) },
		func(st producerState) bool { return st.Streams[k.S].NextSeq > k.Q },
		func(st producerState, err error) string {
			return fmt.Sprintf("batch %s not accepted after 10s (state %+v, err %v)", k, st, err)
		})
}

// waitTimeout waits for wg at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return waitGroup(wg, ctx)
}
