package server

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/invariant"
	"github.com/eosink/eosink/recovery"
)

// checkpointWithin runs a checkpoint and fails the test if it has not
// ended within d (a commit stuck on a conflict retries forever).
func checkpointWithin(t *testing.T, e *Engine, d time.Duration) CheckpointResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v (status %+v)", err, e.Status())
	}
	return res
}

// Recovery step 5: the state store is lost (or replaced by an older copy)
// while the destination keeps the node's manifests. The next start must
// continue after the highest manifest id: no id is reused, the new files
// commit beside the old ones in the same hour, nothing is overwritten.
func TestStoreLossContinuesAfterDestination(t *testing.T) {
	for _, older := range []bool{false, true} {
		name := map[bool]string{false: "lost", true: "older"}[older]
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil)
			clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
			r.tweak = func(c *Config) { c.Now = func() time.Time { return clock } }
			e := r.start(nil)
			must := map[invariant.BatchID]bool{}
			var last uint64
			var backup []byte
			for i := range int64(4) {
				if _, err := send(e, nil, "s", i, 2); err != nil {
					t.Fatal(err)
				}
				must[invariant.BatchID{Stream: "s", Seq: i}] = true
				res := checkpointWithin(t, e, 10*time.Second)
				if res.State != recovery.Committed {
					t.Fatalf("checkpoint: %+v", res)
				}
				last = res.ID
				if i == 0 && older {
					r.stop() // copy the store as a backup would
					var err error
					if backup, err = os.ReadFile(r.storePath); err != nil {
						t.Fatal(err)
					}
					e = r.start(nil)
				}
			}
			r.check(invariant.Expect{Must: must, Exact: true})
			r.stop()
			if err := os.Remove(r.storePath); err != nil {
				t.Fatal(err)
			}
			if older {
				if err := os.WriteFile(r.storePath, backup, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e = r.start(nil)
			if open := e.Status().OpenID; open <= last {
				t.Fatalf("open checkpoint %d after the store was %s; manifests go up to %d", open, name, last)
			}
			for i := int64(100); i < 103; i++ {
				if _, err := send(e, nil, "s", i, 2); err != nil {
					t.Fatal(err)
				}
				must[invariant.BatchID{Stream: "s", Seq: i}] = true
				res := checkpointWithin(t, e, 10*time.Second)
				if res.State != recovery.Committed || res.ID <= last {
					t.Fatalf("checkpoint after the store was %s: %+v (stuck: %s), want committed with an id beyond %d", name, res, e.Status().Stuck, last)
				}
			}
			r.check(invariant.Expect{Must: must, Exact: true})
		})
	}
}
