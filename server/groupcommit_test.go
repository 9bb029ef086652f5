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
	r.tweak = func(c *Config) { c.CommitLinger = time.Millisecond; c.CommitMinGap = gap }
	e := r.start(nil)
	var starts []time.Time
	for i := range 4 {
		res, err := send(e, nil, "s", int64(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(t.Context(), res.Checkpoint); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Now())
	}
	for i := 1; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d < gap*9/10 {
			t.Fatalf("commits %d and %d %v apart, want at least the gap %v", i-1, i, d, gap)
		}
	}
}
