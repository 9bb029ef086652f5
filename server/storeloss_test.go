package server

import (
	"context"
	"errors"
	"maps"
	"os"
	"path"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/durable"
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
				mustSend(t, e, nil, "s", i, 2)
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
				mustSend(t, e, nil, "s", i, 2)
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
// deleted — or replaced by older, an older copy of it (a snapshot or
// backup restored) — and a new engine starts on the same destination.
// What was committed must stay (the model keeps it as must-have batches);
// the new engine must open beyond every id it handed out (I8) and rebuild
// every producer from the manifests: each client inits again and must be
// told exactly what the model knows committed (I12), whatever incarnations
// the producer id had. It returns the new engine.
//
// zombies holds, by name, the last epoch of producer incarnations that
// were forgotten and created again: a client still holding one must stay
// fenced after the rebuild (I6).
//
// With cut, the loss comes while that last checkpoint commits, after its
// files took their names and before its manifest was published (when it
// held only producers' batches, which their clients resend): the new
// start must set its files aside, and the rebuilt producers must not
// count it. It returns whether the cut was made.
func loseStore(t *testing.T, r *rig, e *Engine, m *model, older []byte, zombies map[string]int64, cut bool, fail func(string, ...any)) (*Engine, bool) {
	t.Helper()
	how := "lost"
	if older != nil {
		how = "replaced by an older copy"
	}
	before := maps.Clone(m.prepared)
	mustBefore := len(m.must)
	// A checkpoint that commits first: then nothing is prepared and
	// uncommitted, which a lost store would lose. (One may abort on a
	// staging file that an earlier fault left failed; the next is clean.)
	last := commitAll(t, e, m, "store "+how, fail)
	cut = cut && len(last.Files) > 0 && len(m.must) == mustBefore
	if cut {
		m.prepared = before // its batches are not committed after all,
		m.rollback()        // and their clients send them again
		how += " while a checkpoint commits"
	}
	for k, next := range m.prepared {
		for q := range next {
			m.must[invariant.BatchID{Producer: k[0], Stream: k[1], Seq: q}] = true
		}
	}
	r.stop()
	if cut {
		// Never published: removed for good, also for the power cuts
		// the crash filesystem simulates later.
		name := rigDest + "/" + layout.ManifestName(rigNode, last.ID)
		if err := r.fs.Remove(name); err != nil {
			fail("store %s: remove the manifest: %v", how, err)
		}
		if err := durable.SyncDir(r.fs, path.Dir(name)); err != nil {
			fail("store %s: remove the manifest: %v", how, err)
		}
	}
	if err := os.Remove(r.storePath); err != nil {
		fail("store %s: %v", how, err)
	}
	if older != nil {
		if err := os.WriteFile(r.storePath, older, 0o600); err != nil {
			fail("store %s: %v", how, err)
		}
	}
	// A new store cannot prove the last process dead (it may still hold
	// the old file's lock), so the next start would wait for the lease
	// to expire: release it here, keeping the ids it reserved (I8). (It
	// zeroed the expiry before, which made the document unreadable: every
	// start after a loss then took the path of a lease that knows no ids.)
	if ok, err := afero.Exists(r.fs, rigDest+"/"+layout.LeaseName(rigNode)); err != nil {
		fail("store %s: %v", how, err)
	} else if ok {
		expireLease(t, r.fs)
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
		fail("store %s: open checkpoint %d, but the destination has a manifest of %d (I8)", how, open, withData)
	}
	if len(m.anon) > 0 {
		fail("store %s: anonymous batches of unended checkpoints: %v", how, m.anon)
	}
	for name, epoch := range zombies {
		// Refused either way: fenced, or — when the producer id was
		// forgotten after its last commit and the store rebuilt knows
		// it no more — unknown (an init would start a new incarnation).
		_, known := e.Producer(wireID(name))
		if _, err := send(e, &Producer{ID: name, Epoch: epoch}, "s0", 0, 1); !errors.Is(err, ErrFenced) && (known || !errors.Is(err, ErrUnknownProducer)) {
			fail("I6: store %s: a zombie of %s's forgotten incarnation %s at epoch %d writes: %v, want producer_fenced", how, wireID(name), name, epoch, err)
		}
	}
	// Every client inits again (its epoch may be newer than what the
	// manifests show) and must be told what is committed: a stale
	// committed_seq would have it resend, and the engine store, committed
	// batches twice; a higher one would drop its batches.
	for p := range m.epoch {
		ps, err := e.InitProducer(t.Context(), wireID(p))
		if err != nil {
			fail("store %s: init %s: %v", how, p, err)
		}
		streams := map[string]bool{}
		for s := range ps.Streams {
			streams[s] = true
		}
		for k := range m.prepared {
			if k[0] == p {
				streams[k[1]] = true
			}
		}
		for s := range streams {
			k := [2]string{p, s}
			got, ok := ps.Streams[s]
			if !ok {
				got = recovery.StreamSeq{NextSeq: 0, CommittedSeq: -1}
			}
			if want := m.prepared[k]; got.NextSeq != want || got.CommittedSeq != want-1 {
				fail("I12: store %s: init %s/%s: next_seq %d committed_seq %d, committed next %d", how, p, s, got.NextSeq, got.CommittedSeq, want)
			}
			m.next[k] = m.prepared[k]
		}
		m.epoch[p] = ps.Epoch
	}
	return e, cut
}

// commitAll runs checkpoints until one commits, so that nothing accepted
// is uncommitted (one may abort on a staging file an earlier fault left
// failed; the next is clean).
func commitAll(t *testing.T, e *Engine, m *model, what string, fail func(string, ...any)) CheckpointResult {
	t.Helper()
	for try := 0; ; try++ {
		snap := m.snapshot()
		res, err := checkpointUntil(e, func() bool { return false })
		if err != nil {
			fail("%s: the checkpoint before it: %v", what, err)
		}
		m.checkpointed(snap, res.State == recovery.Committed)
		m.resolveAnon(t, e)
		if res.State == recovery.Committed {
			return res
		}
		if try == 2 {
			fail("%s: the checkpoint before it, without faults: %+v", what, res)
		}
	}
}
