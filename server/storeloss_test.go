package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
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
					backup = r.storeCopy()
					e = r.start(nil)
				}
			}
			r.check(invariant.Expect{Must: must, Exact: true})
			r.stopLosingStore()
			if older {
				r.putStore(backup)
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
//
// lease says how the node lease looks to the new start (leaseAfterLoss).
// killFirst, when set, runs a start killed partway before the one that
// comes up.
func loseStore(t *testing.T, r *rig, e *Engine, m *model, older []byte, zombies map[string]int64, cut bool, lease leaseAfterLoss, killFirst func(), fail func(string, ...any)) (*Engine, bool) {
	t.Helper()
	how := "lost"
	if older != nil {
		how = "replaced by an older copy"
	}
	how += " (lease " + lease.String() + ")"
	before := maps.Clone(m.prepared)
	mustBefore := len(m.must)
	// A checkpoint that commits first: then nothing is prepared and
	// uncommitted, which a lost store would lose. (One may abort on a
	// staging file that an earlier fault left failed; the next is clean.)
	last := commitAll(t, e, m, "store "+how, fail)
	// The model and the engine agree before the loss: what follows
	// compares the rebuilt producers with the model.
	checkI5(t, m, e, fail)
	// Not when it holds files of a table stream: a crash before its
	// manifest leaves no table commit, and taking the manifest away after
	// the commit would leave one (TestTableHalfCommittedAfterStoreLoss
	// has that crash).
	cut = cut && len(last.Files) > 0 && len(m.must) == mustBefore &&
		!slices.ContainsFunc(last.Files, func(f committer.File) bool { return f.Stream == tableStream })
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
	// the old file's lock), so the next start waits for the lease to
	// expire, or takes over a lease it cannot read.
	damageLease(r.fs, lease, fail)
	// Every id that carried data has a manifest, or (a cut commit's) part
	// files without one, which the start sets aside. (Ids of empty
	// checkpoints after the last manifest leave no trace anywhere once
	// the store is gone: an idle service writes nothing.)
	var withData uint64
	entries, _ := afero.ReadDir(r.fs, rigDest+"/_manifests/"+rigNode)
	for _, en := range entries {
		if _, id, ok := layout.ParseManifestName("_manifests/" + rigNode + "/" + en.Name()); ok {
			withData = max(withData, id)
		}
	}
	parts := highestPartID(t, r.fs, fail)
	if killFirst != nil {
		killFirst()
	}
	e = r.start(nil)
	if open := e.Status().OpenID; open <= max(withData, parts) {
		fail("store %s: open checkpoint %d, but the destination has a manifest of %d and a part file of %d (I8)", how, open, withData, parts)
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

// highestPartID is the highest checkpoint id the name of a part file of
// the rig's node shows anywhere in the destination (set aside or not).
func highestPartID(t *testing.T, fs afero.Fs, fail func(string, ...any)) uint64 {
	t.Helper()
	var top uint64
	err := afero.Walk(fs, rigDest, func(name string, fi os.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if node, id, _, _, ok := layout.ParsePartName(path.Base(name)); ok && !fi.IsDir() && node == rigNode {
			top = max(top, id)
		}
		return nil
	})
	if err != nil {
		fail("walk the destination: %v", err)
	}
	return top
}

// leaseAfterLoss is how the node lease looks to the start that follows a
// loss of the state store (or any start: the model damages it before a
// restart too).
type leaseAfterLoss int

const (
	// leaseExpired: the former process stopped renewing long ago (a disk
	// replaced, a node rebuilt): the document as it left it, readable,
	// with an expiry in the past on the engine's clock and the ids it
	// reserved (I8).
	leaseExpired leaseAfterLoss = iota
	// leaseUnreadable: a document no node writes (damaged, cut short,
	// overwritten by another writer of the bucket). The start takes it
	// over knowing no reserved ids, and skips past every id a checkpoint
	// without a manifest may have named (lostIDsFloor).
	leaseUnreadable
	// leaseDeleted: removed (by an operator, a lifecycle rule): likewise.
	leaseDeleted
)

func (l leaseAfterLoss) String() string {
	return [...]string{"expired", "unreadable", "deleted"}[l]
}

// damageLease makes the node lease look as how says, durably (a power
// cut the crash filesystem simulates later keeps it). Without a lease
// document (the rig has no leaser) it does nothing.
func damageLease(fs afero.Fs, how leaseAfterLoss, fail func(string, ...any)) {
	name := rigDest + "/" + layout.LeaseName(rigNode)
	data, err := afero.ReadFile(fs, name)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		fail("lease %s: read: %v", how, err)
	}
	switch how {
	case leaseExpired:
		var l Lease
		if err := json.Unmarshal(data, &l); err != nil {
			fail("lease %s: decode: %v", how, err)
		}
		// Expired as a release leaves it (expires_at at renewed_at):
		// taken over at once whatever the clock did (the model steps it).
		l.ExpiresAt = l.RenewedAt
		data, err = json.Marshal(&l)
	case leaseUnreadable:
		data = data[:len(data)/2]
	case leaseDeleted:
		if err := fs.Remove(name); err != nil {
			fail("lease %s: %v", how, err)
		}
		if err := durable.SyncDir(fs, path.Dir(name)); err != nil {
			fail("lease %s: %v", how, err)
		}
		return
	}
	if err == nil {
		err = durable.ReplaceFile(fs, name+".damaged.tmp", name, data)
	}
	if err != nil {
		fail("lease %s: write: %v", how, err)
	}
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

// The state store is lost twice in a row (a disk replaced twice), with a
// producer committing between the losses and, just before the second, a
// checkpoint aborted by a full disk (its encoder failed while batches
// were accepted), whatever the node lease then looks like. Each start
// must open beyond every manifest (I8) and tell the client exactly what
// is committed (I12): the batches of the aborted checkpoint are not, and
// those committed after the first loss are — also when the lease was
// unreadable or deleted and the first start skipped 2^40 ids
// (lostIDsFloor), so that they carry ids beyond anything the lease
// recorded before.
func TestStoreLostTwiceInARow(t *testing.T) {
	for _, lease := range []leaseAfterLoss{leaseExpired, leaseUnreadable, leaseDeleted} {
		t.Run(lease.String(), func(t *testing.T) {
			sw := &faultfs.SwapInjector{}
			r := newRig(t, faultfs.NewInjectFS(faultfs.NewCrashFS(), sw))
			clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
			r.tweak = func(c *Config) {
				c.Now = func() time.Time { return clock }
				// Compressed files encoded as batches arrive, from a small
				// buffer: an encoder's write can fail while batches are
				// accepted.
				c.Encoders, c.BufferSize = staging.NewInlineEncoders(256), 128
				c.Leaser, c.LeaseTimeout = local.New(c.FS, rigDest, rigStaging), time.Hour
			}
			e := r.start(nil)
			if _, err := e.PutStream(t.Context(), "s1", streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd}); err != nil {
				t.Fatal(err)
			}
			r.commit()
			must := map[invariant.BatchID]bool{}
			next := int64(0)
			p := r.initProducer("p")
			sendCommitted := func(n int) uint64 {
				t.Helper()
				for range n {
					mustSend(t, e, p, "s1", next, 4)
					must[invariant.BatchID{Producer: "p", Stream: "s1", Seq: next}] = true
					next++
				}
				return r.commit().ID
			}
			lose := func(what string) {
				t.Helper()
				r.stopLosingStore()
				damageLease(r.fs, lease, t.Fatalf)
				clock = clock.Add(time.Minute)
				e = r.start(nil)
				ps, err := e.InitProducer(t.Context(), "p")
				if err != nil {
					t.Fatalf("%s: init: %v", what, err)
				}
				if got := ps.Streams["s1"]; got.NextSeq != next || got.CommittedSeq != next-1 {
					t.Fatalf("I12: %s (lease %s): init answers next_seq %d committed_seq %d, committed next %d", what, lease, got.NextSeq, got.CommittedSeq, next)
				}
				p = &Producer{ID: "p", Epoch: ps.Epoch}
			}
			sendCommitted(3)
			lose("first loss")
			id := sendCommitted(2)
			skipped := id > lostIDSkip
			if skipped != (lease != leaseExpired) {
				t.Fatalf("first checkpoint after the loss with the lease %s: id %d (skipped 2^40: %v)", lease, id, skipped)
			}
			// Accepted, then aborted: the encoder of s1 fails on a full disk.
			var failed atomic.Int64
			sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
				if op.Kind == faultfs.OpWrite && strings.HasSuffix(op.Path, ".enc.inprogress") {
					failed.Add(1)
					return syscall.ENOSPC
				}
				return nil
			}))
			// The write whose step failed is refused (doomed.go), and the
			// engine aborts the checkpoint on its own: the one asked for
			// next ends after it.
			doomed := e.Status().OpenID
			for seq := next; failed.Load() == 0; seq++ {
				if seq == next+20 {
					t.Fatal("the encoder of s1 never wrote")
				}
				if _, err := send(e, p, "s1", seq, 4); err != nil && (failed.Load() == 0 || !errors.Is(err, ErrDiskFull)) {
					t.Fatalf("send s1/%d: %v", seq, err)
				}
			}
			sw.Set(nil)
			r.checkpoint()
			if c, err := e.store.Get(doomed); err != nil || c.State != recovery.Aborted {
				t.Fatalf("checkpoint %d after the encoder failed: %+v %v, want aborted", doomed, c, err)
			}
			lose("second loss")
			if open := e.Status().OpenID; open <= id {
				t.Fatalf("I8: open checkpoint %d after the second loss; a manifest of %d is in the destination", open, id)
			}
			sendCommitted(2) // the aborted batches, sent again
			r.check(invariant.Expect{Must: must, Exact: true})
		})
	}
}

// Two store losses in a row, the first with a lease that does not know the
// node's ids (it skips 2^40 of them, lostIDsFloor) and the second with a
// readable, expired one, on a node whose ids are past 2^48 (a document
// planted under its manifest prefix pushed them there: ids go past every
// manifest name). The second start must open beyond every id the first
// one named: the lease's reserved mark says where. Before, the mark was
// judged against the lost store's last id (0) alone, found more than
// reservedAhead beyond it and dropped for the whole start, so the start
// skipped 2^40 past the same newest manifest as the first one and named
// its ids again (I8).
func TestStoreLostTwiceHighIDs(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	planted := rigDest + "/" + layout.ManifestName(rigNode, 1<<49)
	if err := afero.WriteFile(r.fs, planted, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := r.start(nil)
	if err := r.fs.Remove(planted); err != nil {
		t.Fatal(err)
	}
	p := r.initProducer("p")
	mustSend(t, e, p, "s", 0, 2)
	must := map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true}
	if id := r.commit().ID; id <= 1<<49 {
		t.Fatalf("checkpoint %d after a manifest name of %d", id, uint64(1<<49))
	}
	lose := func(lease leaseAfterLoss) {
		t.Helper()
		r.stopLosingStore()
		damageLease(r.fs, lease, t.Fatalf)
		e = r.start(nil)
	}
	lose(leaseUnreadable)
	named := r.checkpoint().ID // empty: no manifest, but the id was answered
	mustSend(t, e, nil, "s", 1, 1)
	must[invariant.BatchID{Stream: "s", Seq: 1}] = true
	named = max(named, e.Status().OpenID)
	lose(leaseExpired)
	if open := e.Status().OpenID; open <= named {
		t.Fatalf("I8: open checkpoint %d after the second loss; the first start named ids up to %d", open, named)
	}
	mustSend(t, e, nil, "s", 1, 1) // sent again: accepted, never committed before the loss
	r.commit()
	r.check(invariant.Expect{Must: must, Exact: true})
}
