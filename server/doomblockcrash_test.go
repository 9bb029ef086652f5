package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// TestDoomedAbortAtBlockEndUnrecordedThenRestart: the abort alone with
// the coordinator free (c907c6c) at the end of the reserve (reserving
// more refused for space, reserved = open+1), its own record refused by
// the full store too, then a write into the checkpoint it opened (its
// answer names reserved, the last reserved id) and a crash. The next
// start opens beyond every id an answer named (I8: neither the aborted
// n nor n+1 is handed out again, with or without a lease), and the
// batches of both, resent, commit once (I3: nothing of n).
func TestDoomedAbortAtBlockEndUnrecordedThenRestart(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		f, ends := blockEndRig(r)
		e := r.start(nil)
		full := func(_ int, op string, ph recovery.Phase) error {
			if (op == "reserve" || op == "abort") && ph == recovery.BeforeCommit {
				return errPageENOSPC
			}
			return nil
		}
		f.set(full)
		n, seq := useUpReserve(t, e)
		if res := mustSend(t, e, nil, "s", seq, 1); res.Checkpoint != n {
			t.Fatalf("write into n: %+v", res)
		}
		e.ing.doomFile(n, "s", fmt.Errorf("step: %w", ErrDiskFull))
		deadline := time.Now().Add(5 * time.Second)
		for s, _ := ends.state(n); s == "" && time.Now().Before(deadline); s, _ = ends.state(n) {
			time.Sleep(time.Millisecond)
		}
		if s, _ := ends.state(n); s != recovery.Aborted {
			t.Fatalf("doomed open checkpoint %d at the end of the reserve: %q after 5 s, want aborted", n, s)
		}
		f.mu.Lock()
		fired := fmt.Sprint(f.fired)
		f.mu.Unlock()
		if !strings.Contains(fired, "abort") {
			t.Fatalf("the abort's record was not refused: faults fired %s", fired)
		}
		res := mustSend(t, e, nil, "s", seq+1, 1)
		if res.Checkpoint != n+1 {
			t.Fatalf("write after the abort: %+v, want checkpoint %d", res, n+1)
		}
		if _, err := e.Checkpoint(context.Background()); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("checkpoint at the end of the reserve: %v, want refused for space", err)
		}
		r.stop()
		f.set(nil)
		e = r.start(nil)
		if open := e.Status().OpenID; open <= n+1 {
			t.Fatalf("open checkpoint %d after the restart: %d (aborted, its record refused) and %d (named in an answer) may not be handed out again (I8)", open, n, n+1)
		}
		for _, s := range []int64{seq, seq + 1} {
			if res := mustSend(t, e, nil, "s", s, 1); res.Checkpoint <= n+1 {
				t.Fatalf("resend of %d after the restart: %+v (I8)", s, res)
			}
		}
		r.commit()
		must := map[invariant.BatchID]bool{}
		for i := int64(0); i <= seq+1; i++ {
			must[invariant.BatchID{Stream: "s", Seq: i}] = true
		}
		r.check(invariant.Expect{Must: must, Exact: true})
	})
}

// TestDoomedAbortAtBlockEndRacingWrites: writes race the free abort alone
// at the end of the reserve (c907c6c). Every answer names n or n+1, both
// reserved (I8); once space is back, what was answered into n+1 commits,
// once, and nothing answered into n, the doomed checkpoint, appears (I3).
func TestDoomedAbortAtBlockEndRacingWrites(t *testing.T) {
	r := newRig(t, nil)
	f, ends := blockEndRig(r)
	e := r.start(nil)
	f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
	seq := int64(0)
	must := map[invariant.BatchID]bool{}
	for e.pipe.reserved.Load() >= e.Status().OpenID+2 {
		mustSend(t, e, nil, "s", seq, 1)
		must[invariant.BatchID{Stream: "s", Seq: seq}] = true
		seq++
		if res, err := e.Checkpoint(context.Background()); err != nil || res.State != recovery.Committed {
			t.Fatalf("checkpoint with ids reserved: %+v, %v", res, err)
		}
	}
	n := e.Status().OpenID
	var mu sync.Mutex
	answered := map[int64]uint64{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := 1_000_000*int64(w+1) + i // disjoint per writer
				res, err := send(e, nil, "s", s, 1)
				if err == nil {
					mu.Lock()
					answered[s] = res.Checkpoint
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	e.ing.doomFile(n, "s", fmt.Errorf("step: %w", ErrDiskFull))
	deadline := time.Now().Add(5 * time.Second)
	for s, _ := ends.state(n); s == "" && time.Now().Before(deadline); s, _ = ends.state(n) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond)
	close(stop)
	wg.Wait()
	if s, _ := ends.state(n); s != recovery.Aborted {
		t.Fatalf("doomed open checkpoint %d: %q, want aborted", n, s)
	}
	into := map[uint64]int{}
	for s, id := range answered {
		into[id]++
		if id != n && id != n+1 {
			t.Fatalf("batch %d answered into checkpoint %d, open %d, reserved %d (I8)", s, id, n, n+1)
		}
		if id == n+1 {
			must[invariant.BatchID{Stream: "s", Seq: s}] = true
		}
	}
	if into[n+1] == 0 {
		t.Fatalf("no write accepted after the abort: %v", into)
	}
	f.set(nil)
	r.commit()
	r.check(invariant.Expect{Must: must, Exact: true})
}
