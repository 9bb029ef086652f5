package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
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

// loseStore is the model test's "loss of the state store" step (recovery
// step 5): after a committed checkpoint, the engine stops, state.db is
// deleted and a new engine starts on the same destination. What was
// committed must stay (the model keeps it as must-have batches); producers
// start over, so the model renames them (a batch id names one batch for
// the checker); the new engine must open beyond every id it handed out
// (I8). It returns the new engine.
func loseStore(t *testing.T, r *rig, e *Engine, m *model, producers []string, gen int, fail func(string, ...any)) *Engine {
	t.Helper()
	// A checkpoint that commits first: then nothing is prepared and
	// uncommitted, which a lost store would lose. (One may abort on a
	// staging file that an earlier fault left failed; the next is clean.)
	for try := 0; ; try++ {
		snap := m.snapshot()
		res, err := checkpointUntil(e, func() bool { return false })
		if err != nil {
			fail("store loss: the checkpoint before it: %v", err)
		}
		m.checkpointed(snap, res.State == recovery.Committed)
		m.resolveAnon(t, e)
		if res.State == recovery.Committed {
			break
		}
		if try == 2 {
			fail("store loss: the checkpoint before it, without faults: %+v", res)
		}
	}
	for k, next := range m.prepared {
		for q := range next {
			m.must[invariant.BatchID{Producer: k[0], Stream: k[1], Seq: q}] = true
		}
	}
	r.stop()
	if err := os.Remove(r.storePath); err != nil {
		fail("store loss: %v", err)
	}
	// A new store cannot prove the last process dead (it may still hold
	// the old file's lock), so the next start waits for the lease to
	// expire: expire it here, keeping the ids it reserved (I8).
	leasePath := rigDest + "/" + layout.LeaseName(rigNode)
	if data, err := afero.ReadFile(r.fs, leasePath); err == nil {
		var l Lease
		if err := json.Unmarshal(data, &l); err != nil {
			fail("store loss: decode lease: %v", err)
		}
		l.ExpiresAt = time.Time{}
		if data, err = json.Marshal(&l); err == nil {
			err = afero.WriteFile(r.fs, leasePath, data, 0o644)
		}
		if err != nil {
			fail("store loss: expire lease: %v", err)
		}
	}
	// Every id that carried data has a manifest. (Ids of empty
	// checkpoints after the last manifest leave no trace anywhere once
	// the store is gone: an idle service writes nothing.)
	var withData uint64
	entries, _ := afero.ReadDir(r.fs, rigDest+"/_manifests/"+rigNode)
	for _, en := range entries {
		if _, id, ok := layout.ParseManifestName("_manifests/" + rigNode + "/" + en.Name()); ok {
			withData = max(withData, id)
		}
	}
	e = r.start(nil)
	if open := e.Status().OpenID; open <= withData {
		fail("store loss: open checkpoint %d, but the destination has a manifest of %d (I8)", open, withData)
	}
	if len(m.anon) > 0 {
		fail("store loss: anonymous batches of unended checkpoints: %v", m.anon)
	}
	m.epoch, m.next, m.prepared = map[string]int64{}, map[[2]string]int64{}, map[[2]string]int64{}
	for i, p := range producers {
		base, _, _ := strings.Cut(p, ":")
		producers[i] = fmt.Sprintf("%s:%d", base, gen)
	}
	return e
}
