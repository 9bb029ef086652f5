package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestGroupCommit: with no periodic checkpoints, a waiting write starts a
// checkpoint within the linger, and writers waiting at once share it.
func TestGroupCommit(t *testing.T) {
	tests := []struct {
		name    string
		linger  time.Duration
		writers int
		commits bool
	}{
		{"off: a wait is left to the interval", 0, 1, false},
		{"one writer", 5 * time.Millisecond, 1, true},
		{"eight writers share", 50 * time.Millisecond, 8, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.tweak = func(c *Config) { c.CommitLinger = tc.linger }
			e := r.start(nil)
			var wg sync.WaitGroup
			errs := make([]error, tc.writers)
			ckpts := make([]uint64, tc.writers)
			for i := range tc.writers {
				res, err := send(e, nil, "s", int64(i), 1)
				if err != nil {
					t.Fatal(err)
				}
				ckpts[i] = res.Checkpoint
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
					defer cancel()
					errs[i] = e.Wait(ctx, res.Checkpoint)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if (err == nil) != tc.commits {
					t.Fatalf("writer %d: wait: %v, want committed %v", i, err, tc.commits)
				}
				if ckpts[i] != ckpts[0] {
					t.Fatalf("writer %d in checkpoint %d, writer 0 in %d: want one shared", i, ckpts[i], ckpts[0])
				}
			}
		})
	}
}

// TestCommitMinGap: linger-started checkpoints start at least the gap apart.
func TestCommitMinGap(t *testing.T) {
	r := newRig(t, nil)
	gap := 100 * time.Millisecond
	var mu sync.Mutex
	var starts []time.Time // when each checkpoint began: its end less its duration
	r.tweak = func(c *Config) {
		c.CommitLinger = time.Millisecond
		c.CommitMinGap = gap
		c.Hooks.Checkpoint = func(res CheckpointResult) {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, time.Now().Add(-time.Duration(res.Seconds*float64(time.Second))))
		}
	}
	e := r.start(nil)
	for i := range 4 {
		res, err := send(e, nil, "s", int64(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(t.Context(), res.Checkpoint); err != nil {
			t.Fatal(err)
		}
	}
	// The hook runs just after the waiters are released.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(starts)
		mu.Unlock()
		if n >= 4 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) < 4 {
		t.Fatalf("%d checkpoints for 4 sequential waiting writes", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		// Starts, not ends: a slow commit followed by a fast one ends
		// closer together than they began.
		if d := starts[i].Sub(starts[i-1]); d < gap*9/10 {
			t.Fatalf("checkpoints %d and %d began %v apart, want at least the gap %v", i-1, i, d, gap)
		}
	}
}

// TestGroupCommitLingersOnlyWhenShared: a checkpoint shared by several
// waiters makes the next one linger; one that had a single waiter makes
// the next start at once, since a lone sequential client has nobody to
// share with. (Bounds, not timings: the linger is 1 s, a checkpoint here
// takes milliseconds.)
func TestGroupCommitLingersOnlyWhenShared(t *testing.T) {
	const linger = time.Second
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.CommitLinger = linger }
	e := r.start(nil)
	wait := func(seq int64) time.Duration {
		t.Helper()
		res, err := send(e, nil, "s", seq, 1)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := e.Wait(t.Context(), res.Checkpoint); err != nil {
			t.Fatal(err)
		}
		return time.Since(begin)
	}
	// Four waiters: the first checkpoint lingers, all four share it.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 4 {
		res, err := send(e, nil, "s", int64(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = e.Wait(t.Context(), res.Checkpoint) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if d := wait(10); d < linger*9/10 {
		t.Fatalf("after a shared checkpoint, a wait took %v, want the linger %v", d, linger)
	}
	if d := wait(11); d >= linger {
		t.Fatalf("after a checkpoint with one waiter, a wait took %v, want it started at once (linger %v)", d, linger)
	}
	if d := wait(12); d >= linger {
		t.Fatalf("sequential waits: %v, want them started at once (linger %v)", d, linger)
	}
}
