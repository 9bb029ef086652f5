package server

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// notBelievedCounter counts the start's "forgotten-producers document not
// believed" error logs (loadForgotten).
type notBelievedCounter struct{ n atomic.Int64 }

func (c *notBelievedCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *notBelievedCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && strings.Contains(r.Message, "not believed") {
		c.n.Add(1)
	}
	return nil
}
func (c *notBelievedCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *notBelievedCounter) WithGroup(string) slog.Handler      { return c }

// countNotBelieved has r's engines log into a counter of refused
// forgotten-producers documents, after r's tweak.
func countNotBelieved(r *rig) *notBelievedCounter {
	c := &notBelievedCounter{}
	before := r.tweak
	r.tweak = func(cfg *Config) {
		if before != nil {
			before(cfg)
		}
		cfg.Logger = slog.New(c)
	}
	return c
}

func wantForgotten(t *testing.T, e *Engine, id string, epoch int64, what string) {
	t.Helper()
	if st, ok := e.Producer(id); ok && st.Epoch <= epoch {
		t.Fatalf("%s: producer %s is back as its forgotten incarnation (%+v, forgotten at epoch %d)", what, id, st, epoch)
	}
}

// Genuine forgets of a node whose store has committed nothing with data
// (9d24589 checks the seal there now): each stays believed, or the store
// already reflects it, whatever the start. Adversarial review of 9d24589.
func TestForgottenGenuineBeforeFirstCommit(t *testing.T) {
	// The node's own DELETE, the store's forget cut short (a crash
	// between the document and the store), never a commit.
	t.Run("delete cut short", func(t *testing.T) {
		withAndWithoutLease(t, func(t *testing.T, r *rig) {
			e := r.start(nil)
			p := r.initProducer("p")
			r.checkpoint() // empty
			if err := e.life.recordForgotten(t.Context(), []string{"p"}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			r.stop()
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "a forget cut short, no commit")
			r.stop()
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "a second start")
		})
	})
	// Expiry, then a crash before the store forgot (the document only).
	t.Run("expiry", func(t *testing.T) {
		withAndWithoutLease(t, func(t *testing.T, r *rig) {
			e := r.start(nil)
			p := r.initProducer("p")
			if n, err := e.ExpireProducers(time.Now().AddDate(1, 0, 0)); err != nil || n != 1 {
				t.Fatalf("expire: %d, %v", n, err)
			}
			r.stop()
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "expired, no commit")
		})
	})
	// Forgets compacted into a merged document before the first commit,
	// one of them cut short: the merged document is sealed and believed.
	t.Run("compacted", func(t *testing.T) {
		withAndWithoutLease(t, func(t *testing.T, r *rig) {
			e := r.start(nil)
			p := r.initProducer("p")
			r.initProducer("q")
			if err := e.life.recordForgotten(t.Context(), []string{"p"}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if err := e.DeleteProducer(t.Context(), "q"); err != nil {
				t.Fatal(err)
			}
			res, err := e.CompactForgotten(t.Context())
			if err != nil || res.Removed != 2 {
				t.Fatalf("compaction: %+v, %v", res, err)
			}
			r.stop()
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "a forget cut short, compacted, no commit")
		})
	})
	// An older copy of the store (its key made, nothing committed), then
	// a DELETE and a new incarnation: the copy holds the same key.
	t.Run("older copy same key", func(t *testing.T) {
		withAndWithoutLease(t, func(t *testing.T, r *rig) {
			e := r.start(nil)
			p := r.initProducer("p")
			backup := r.storeCopy()
			reincarnate(t, r, e)
			r.stop()
			r.putStore(backup)
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "an older copy, same key, no commit")
		})
	})
	// The store lost before any commit with data: the first start over
	// the new store applies the lost store's documents (no key yet) and
	// makes a key; the starts after it refuse those documents (another
	// key, after checkpoint 0) but the store reflects them already: they
	// are skipped, not reported. Before, the operator saw a "not believed"
	// error per lost-store document at every start until the node
	// committed data (3 over 3 starts here, lease or not).
	t.Run("lost store", func(t *testing.T) {
		withAndWithoutLease(t, func(t *testing.T, r *rig) {
			c := countNotBelieved(r)
			e := r.start(nil)
			p := r.initProducer("p")
			for range 3 {
				r.checkpoint() // empty: the document is after checkpoint 3
			}
			if err := e.DeleteProducer(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			r.stopLosingStore()
			e = r.start(nil)
			wantForgotten(t, e, "p", p.Epoch, "first start over a new store")
			p2 := r.initProducer("p")
			if p2.Epoch <= p.Epoch {
				t.Fatalf("p inited again at epoch %d, not above its forgotten %d", p2.Epoch, p.Epoch)
			}
			first := c.n.Load()
			for i := range 3 {
				r.stop()
				e = r.start(nil)
				if st, ok := e.Producer("p"); !ok || st.Epoch != p2.Epoch {
					t.Fatalf("start %d after the loss: p (inited at %d) is %+v, %v", i+2, p2.Epoch, st, ok)
				}
			}
			if n := c.n.Load() - first; strings.HasSuffix(t.Name(), "lease=false") {
				// No lease (tests only): nothing shows the ids the lost store
				// used (empty checkpoints: no manifest), the new store opens at
				// 1 again and its key's since is 0, below the document.
				t.Logf("no lease: the lost store's document reported \"not believed\" %d times over 3 starts", n)
			} else if n != 0 {
				t.Fatalf("the lost store's own forget, applied at the first start over the new store, reported \"not believed\" %d times over the next 3 starts (an error per document per start until the node commits)", n)
			}
			// The new store's own forget, cut short, still no commit: sealed
			// under its key and after what it applied, so believed.
			if err := e.life.recordForgotten(t.Context(), []string{"p"}, time.Time{}); err != nil {
				t.Fatal(err)
			}
			r.stop()
			e = r.start(nil)
			wantForgotten(t, e, "p", p2.Epoch, "the new store's own forget cut short, no commit")
		})
	})
}

// An older copy of a store that committed nothing (its key made), put
// back after the store was lost and a new one (another key) forgot a
// producer the copy holds, nothing committed all along. Before 9d24589 a
// start over a store with no commit believed every document; now it
// checks the copy's key and refuses the forget, sealed under the new
// store's: the DELETEd producer is back (GET answers it; nothing of it
// was committed, so no committed_seq is wrong). With a lease the start
// sees ids reserved beyond the copy's and rebuilds, believing every
// document. Without one (tests only) nothing shows the copy is older:
// the same design limit as TestForgottenSealOlderCopyOfLostStore.
func TestForgottenOlderCopyNoCommitOfLostStore(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		if strings.HasSuffix(t.Name(), "lease=false") {
			t.Skip("BUG (design limit, no Leaser only; a regression of 9d24589 in this setup): an older copy of a store with a key and no commit, put back after the store was lost and a new store DELETEd a producer the copy holds: the forget, sealed under the new store's key, is refused and the producer is back as the copy's incarnation")
		}
		r.start(nil)
		p := r.initProducer("p")
		backup := r.storeCopy() // its key made, p at p.Epoch
		r.stopLosingStore()
		e := r.start(nil)
		r.initProducer("p")
		for range 3 {
			r.checkpoint() // empty: the forget is after checkpoint 3
		}
		if err := e.DeleteProducer(t.Context(), "p"); err != nil {
			t.Fatal(err)
		}
		r.stop()
		r.putStore(backup)
		e = r.start(nil)
		wantForgotten(t, e, "p", p.Epoch, "over an older copy (no commit) of a lost store")
	})
}
