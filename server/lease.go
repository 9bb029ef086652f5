package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// DefaultLeaseTimeout is --lease-timeout's default.
const DefaultLeaseTimeout = 30 * time.Second

// Bounds on what a lease read from the destination may say (DESIGN
// "Several nodes": checked before it is believed).
const (
	// leaseAheadMax bounds how long a lease is waited out, in lease
	// timeouts after it was first seen: a document valid for longer (a
	// planted one expiring in 9999) is taken over after this long unless
	// it changes. A live holder with
	// a timeout over 30 times this node's renews less often than that and
	// could be taken over: nodes of one id run with one --lease-timeout.
	leaseAheadMax = 10
	// lostIDSkip is how far beyond its highest manifest a node starts
	// when neither its state store nor its lease knows the ids it handed
	// out: checkpoints that left no manifest (empty, aborted) named ids
	// that nothing in the destination records. 2^40 ids are 35 years of a
	// thousand checkpoints a second; ids are cheap, and 2^64 leaves room
	// for millions of such losses.
	lostIDSkip = 1 << 40
	// reservedAhead bounds a lease's reserved checkpoint mark beyond the
	// ids this node knows of (store, manifests), above lostIDSkip. A mark
	// beyond it is ignored, so ids never wrap past 2^64.
	reservedAhead = 1 << 48
)

// Lease is the document at _nodes/<node>.json in the destination: its
// one definition, with its reader and checks, is internal/layout's.
type Lease = layout.Lease

// lease is the engine's hold on its node lease. Writes are serialized by
// mu: a renewal and a reservation must each swap from the latest version.
type lease struct {
	leaser  committer.Leaser
	name    string
	timeout time.Duration
	margin  time.Duration

	mu         sync.Mutex
	doc        Lease
	version    string
	validUntil time.Time // local clock: when commit steps must stop without a renewal
	lost       error     // set once another process took the lease
	released   bool
	prev       Lease  // the document found at start, if any
	doubted    uint64 // the highest known id prev's reserved mark was last reported implausible against (leaseReserved)
	// memo is a file beside the state store naming the incarnations that
	// ran on this data dir. The store's file lock is held, so they are
	// dead: a restart on the same data dir takes the lease over at once
	// instead of waiting for the timeout (see previous).
	memo  string
	store string // the state store's path

	// wall reads the wall clock without its monotonic reading, and
	// wallUntil is validUntil on it: after a host suspend the monotonic
	// clock has stood still while the lease expired for everyone else.
	wall      func() time.Time
	wallUntil time.Time
	kick      chan struct{} // asks renewLoop for a renewal now
	log       *slog.Logger
	// watch is what acquire saw of another incarnation's live lease: a
	// holder whose document changes while it is live renews (refused); one
	// whose document stays as it was until its expiry stopped (taken over).
	watch leaseWatch
}

// leaseWatch is a live lease of another incarnation as acquire first saw it.
type leaseWatch struct {
	version string
	until   time.Time // its expiry, bounded by leaseAheadMax
}

// leaseWait is acquire's answer while another incarnation's lease is live
// but has not been seen renewing: the caller waits and calls it again.
type leaseWait struct {
	holder Lease
	until  time.Time
	first  bool // the first answer about this holder
	in     time.Duration
}

// RetryAfter is how long the failure policy waits before acquire is
// asked again (RetryHint): until the expiry, or the next look for a
// renewal if sooner.
func (w *leaseWait) RetryAfter() time.Duration { return w.in }

// waitIn is a leaseWait's RetryAfter at time t for a lease expiring at until.
func (l *lease) waitIn(until, t time.Time) time.Duration {
	return min(max(until.Sub(t), time.Millisecond), l.poll())
}

func (w *leaseWait) Error() string {
	return fmt.Sprintf("waiting for node lease held by %s: it has not renewed since this node first read it; taking it over at %s unless it renews",
		w.holder, w.until.Format(time.RFC3339Nano))
}

func newLease(cfg *Config) *lease {
	if cfg.Leaser == nil {
		return nil
	}
	t := cfg.LeaseTimeout
	if t <= 0 {
		t = DefaultLeaseTimeout
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return &lease{
		leaser: cfg.Leaser, name: layout.LeaseName(cfg.Node), timeout: t, margin: t / 4,
		doc:  Lease{Node: cfg.Node, Incarnation: hex.EncodeToString(rnd[:]), Listen: cfg.Listen},
		memo: filepath.Join(filepath.Dir(cfg.StorePath), "lease-incarnation"), store: cfg.StorePath,
		wall: func() time.Time { return time.Now().Round(0) }, kick: make(chan struct{}, 1), log: cfg.Logger,
	}
}

// parseLease decodes a lease document read from the destination and
// checks that it is one of this node's.
func parseLease(data []byte, node string) (Lease, error) {
	var l Lease
	if err := json.Unmarshal(data, &l); err != nil {
		return Lease{}, err
	}
	if l.Node != node || l.Incarnation == "" || l.ExpiresAt.IsZero() {
		return Lease{}, fmt.Errorf("not a lease of node %s (node %q, incarnation %q, expires %s)", node, l.Node, l.Incarnation, l.ExpiresAt)
	}
	return l, nil
}

// previous returns the incarnations the memo names: this data dir's
// former processes whose lease or lease lock may remain (see acquire). The
// memo counts only if it was written for the very state store file whose
// lock this process holds (storeIdentity): a copied data dir (a restored
// backup, a cloned volume) started while its original runs must not take
// the original's live lease for a dead one.
func (l *lease) previous() []string {
	data, err := os.ReadFile(l.memo)
	if err != nil {
		return nil
	}
	id := storeIdentity(l.store)
	lines := strings.Fields(string(data))
	if id == "" || len(lines) < 2 || lines[0] != "store" || lines[1] != id {
		return nil
	}
	return lines[2:]
}

// remember records incarnations in the memo, durably, with the identity of
// the state store they ran on.
func (l *lease) remember(incarnations []string) error {
	id := storeIdentity(l.store)
	if id == "" {
		return nil // never trusted: nothing worth writing
	}
	data := []byte("store " + id + "\n" + strings.Join(incarnations, "\n") + "\n")
	if err := durable.ReplaceFile(afero.NewOsFs(), l.memo+".tmp", l.memo, data); err != nil {
		return fmt.Errorf("record lease incarnation: %w", err)
	}
	return nil
}

// memoMax bounds the memo: a crash loop whose starts all die before
// their first swap adds one incarnation each. Beyond it the oldest are
// dropped, and a lock one of them left waits for its stale age.
const memoMax = 64

// acquire takes the lease: create-only when there is none, compare-and-swap
// over one that expired. Another incarnation's live lease is watched: while
// it stays as first read, acquire answers *leaseWait and the caller asks
// again; once it expired (bounded by leaseAheadMax) it is taken over. A
// holder whose document changes while live renews: ErrLeaseHeld, naming it.
// A document that is not a lease of this node is reported and taken over.
//
// A live lease is this data dir's own when it names this incarnation (a
// write that landed but whose answer was lost) or one the memo names. The
// memo lists this data dir's former incarnations that may have left a
// lease or a lease lock behind; they are dead, since the store's file lock
// is ours, so their locks are broken at once (committer.LockOwner). This
// incarnation is added before its first write, so a process killed at any
// point is known to the next start. The former ones stay in the memo
// (up to memoMax) after a compare-and-swap of ours went through the
// lease's lock: the other documents written under a lock (a table's
// version hint, a stream's configuration) may still hold a lock of
// theirs, which a later start must know dead too, or it waits StaleLock
// for it (TestOrphanedTableLockOfFormerIncarnation).
func (l *lease) acquire(ctx context.Context, now func() time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	self := l.doc.Incarnation
	dead := slices.DeleteFunc(l.previous(), func(s string) bool { return s == self })
	if lo, ok := l.leaser.(committer.LockOwner); ok {
		lo.SetLockOwner(self, dead)
	}
	// Should the memo fail, only a restart's shortcut is lost: it
	// waits for the timeout.
	_ = l.remember(append([]string{self}, dead[:min(len(dead), memoMax-1)]...))
	for {
		data, version, err := l.leaser.ReadLease(ctx, l.name)
		var cur Lease
		switch {
		case errors.Is(err, committer.ErrNotFound):
			version = ""
		case err != nil:
			return fmt.Errorf("take node lease: %w", err)
		default:
			if cur, err = parseLease(data, l.doc.Node); err != nil {
				// Not a document any node writes (writes are
				// atomic): nothing holds it.
				l.log.Error("node lease document unreadable: taking it over", "lease", l.name, "err", err)
			}
		}
		ours := cur.Incarnation != "" && (cur.Incarnation == self || slices.Contains(dead, cur.Incarnation))
		if version != "" && cur.Incarnation != "" && !ours {
			if err := l.watchLocked(cur, version, now()); err != nil {
				return err
			}
		}
		if cur.Incarnation != self {
			l.prev = cur
		}
		l.doc.Reserved = max(l.doc.Reserved, cur.Reserved)
		err = l.writeLocked(ctx, now, version)
		if errors.Is(err, committer.ErrExists) || errors.Is(err, committer.ErrPrecondition) {
			continue // another process moved first: look again
		}
		if err != nil {
			return fmt.Errorf("take node lease: %w", err)
		}
		return nil
	}
}

// watchLocked decides about another incarnation's lease cur, read at
// version at time t: nil when it may be taken over (released, or seen
// unchanged for as long as it said it is valid), *leaseWait while it has
// not been, ErrLeaseHeld when it changed meanwhile without a release.
//
// The holder's times are read only as a duration (its expiry minus its
// renewal, both from its own clock): an expiry compared with this node's
// clock would hand over the lease of a live holder whose clock is behind
// by more than the timeout. So the wait runs on this node's clock, from
// the first read, as leader elections over a shared record do.
func (l *lease) watchLocked(cur Lease, version string, t time.Time) error {
	w := l.watch
	switch {
	case leaseReleased(cur):
		return nil
	case w.version == "":
		valid := cur.ExpiresAt.Sub(cur.RenewedAt)
		if bound := leaseAheadMax * l.timeout; valid > bound {
			l.log.Error("node lease is valid for longer than any plausible renewal: waiting only for the bound",
				"lease", l.name, "holder", cur.String(), "bound", bound.String(), "lease_timeout", l.timeout.String())
			valid = bound
		}
		until := t.Add(valid)
		l.watch = leaseWatch{version: version, until: until}
		return &leaseWait{holder: cur, until: until, first: true, in: l.waitIn(until, t)}
	case version != w.version:
		return fmt.Errorf("%w: %s, which renewed it while this node waited; it is taken over %s after its last renewal (--lease-timeout) if it stops",
			ErrLeaseHeld, cur, cur.ExpiresAt.Sub(cur.RenewedAt).Round(time.Millisecond))
	case !t.Before(w.until):
		return nil
	default:
		return &leaseWait{holder: cur, until: w.until, in: l.waitIn(w.until, t)}
	}
}

// leaseReleased reports whether l was ended by a clean shutdown (release):
// its expiry is not after its last renewal, which no renewal writes.
func leaseReleased(l Lease) bool { return !l.ExpiresAt.After(l.RenewedAt) }

// writeLocked writes the document with a fresh expiry, swapping from
// version ("" creates), and on success moves validUntil.
func (l *lease) writeLocked(ctx context.Context, now func() time.Time, version string) error {
	sent, sentWall := time.Now(), l.wall()
	doc := l.doc
	doc.RenewedAt = now().UTC()
	doc.ExpiresAt = doc.RenewedAt.Add(l.timeout)
	data, err := json.MarshalIndent(&doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node lease: %w", err)
	}
	v, err := l.leaser.WriteLease(ctx, l.name, data, version)
	if err != nil {
		return err
	}
	l.doc, l.version = doc, v
	// Measured from before the write: the holder's view of its lease
	// must never outlast what others read in the document.
	l.validUntil = sent.Add(l.timeout - l.margin)
	l.wallUntil = sentWall.Add(l.timeout - l.margin)
	return nil
}

// renew extends the lease and raises its reserved mark to at least
// reserved. A lease another process took is ErrLeaseLost, for good.
func (l *lease) renew(ctx context.Context, now func() time.Time, reserved uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if l.released {
		return fmt.Errorf("renew node lease: released: %w", ErrLeaseLost)
	}
	prevReserved := l.doc.Reserved
	l.doc.Reserved = max(l.doc.Reserved, reserved)
	err := l.writeLocked(ctx, now, l.version)
	if errors.Is(err, committer.ErrPrecondition) {
		// A write whose answer was lost may have landed: the document
		// then holds our incarnation under a version we don't know.
		data, version, rerr := l.leaser.ReadLease(ctx, l.name)
		var cur Lease
		if rerr == nil && json.Unmarshal(data, &cur) == nil && cur.Incarnation == l.doc.Incarnation {
			l.version = version
			err = l.writeLocked(ctx, now, l.version)
		} else if rerr == nil || errors.Is(rerr, committer.ErrNotFound) {
			holder := "nobody (deleted)"
			if rerr == nil {
				holder = cur.String()
			}
			l.lost = fmt.Errorf("%w: %s is now held by %s", ErrLeaseLost, l.name, holder)
			return l.lost
		}
	}
	if err != nil {
		l.doc.Reserved = prevReserved
		return fmt.Errorf("renew node lease: %w", err)
	}
	return nil
}

// release ends the lease now (a clean shutdown), so a replacement need not
// wait for the timeout. Nothing may be written to the destination after.
func (l *lease) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil || l.released {
		return nil
	}
	l.released = true
	l.validUntil, l.wallUntil = time.Time{}, time.Time{}
	doc := l.doc
	doc.ExpiresAt = doc.RenewedAt // released (leaseReleased); expired by any clock too
	data, err := json.MarshalIndent(&doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node lease: %w", err)
	}
	if _, err := l.leaser.WriteLease(ctx, l.name, data, l.version); err != nil {
		return fmt.Errorf("release node lease: %w", err)
	}
	return nil
}

// check reports whether a commit step may write to the destination now:
// the lease is held and was renewed less than timeout minus margin ago, on
// the monotonic clock and on the wall clock. The wall clock moves on
// during a host suspend while the monotonic one stands still: a lease
// stale on the wall clock only asks for a renewal at once.
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lost != nil:
		return l.lost
	case l.released:
		return fmt.Errorf("node lease released: %w", ErrLeaseLost)
	case !time.Now().Before(l.validUntil):
		return fmt.Errorf("%w: last renewed %s, valid for writes until %s (--lease-timeout %s minus a margin of %s)",
			ErrLeaseStale, l.doc.RenewedAt.Format(time.RFC3339Nano), l.validUntil.Format(time.RFC3339Nano), l.timeout, l.margin)
	case !l.wall().Before(l.wallUntil):
		select {
		case l.kick <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: last renewed %s, valid for writes until %s on the wall clock, which passed it (a suspended host?): renewing",
			ErrLeaseStale, l.doc.RenewedAt.Format(time.RFC3339Nano), l.wallUntil.Format(time.RFC3339Nano))
	}
	return nil
}

// leaseCheck is the fence before each commit step that writes to the
// destination: nil without a lease.
func (lc *lifecycle) leaseCheck() error {
	if lc.e.lease == nil {
		return nil
	}
	return lc.e.lease.check()
}

// takeLease acquires the lease before recovery writes anything, retrying
// what may pass (the destination unreachable) and waiting out a holder that
// stopped renewing (saying so in the log and in Status). A holder that
// renews, or a destination that cannot enforce a lease, stops the engine.
func (lc *lifecycle) takeLease(ctx context.Context) bool {
	if lc.e.lease == nil {
		return true
	}
	if !lc.retry(ctx, "take node lease", error.Error, func() error {
		err := lc.e.lease.acquire(ctx, lc.e.cfg.Now)
		if wait := (*leaseWait)(nil); errors.As(err, &wait) && wait.first {
			lc.e.log.Warn("node lease held by an incarnation that may have stopped: waiting for its expiry",
				"lease", lc.e.lease.name, "holder", wait.holder.String(), "until", wait.until.Format(time.RFC3339Nano))
		}
		return err
	}) {
		return false
	}
	lc.e.log.Info("node lease taken", "lease", lc.e.lease.name, "incarnation", lc.e.lease.doc.Incarnation,
		"previous", lc.e.lease.prev.Incarnation, "reserved_checkpoint", lc.e.lease.doc.Reserved)
	return true
}

// poll is how often a waiting node reads another's lease: often enough
// to see a renewal (every timeout/3) and the expiry soon.
func (l *lease) poll() time.Duration {
	return min(max(l.timeout/6, 5*time.Millisecond), 5*time.Second)
}

// renewLoop renews the lease every timeout/3 (more often after a failure,
// at once when the fence asks) until the engine closes. A lease taken by
// another process stops the engine: it is fenced.
func (lc *lifecycle) renewLoop(ctx context.Context) {
	every := lc.e.lease.timeout / 3
	t := time.NewTimer(every)
	defer t.Stop()
	lc.runEveryOr(ctx, t.C, lc.e.lease.kick, func() bool {
		rctx, cancel := context.WithTimeout(ctx, every)
		err := lc.e.lease.renew(rctx, lc.e.cfg.Now, 0)
		cancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			if ctx.Err() == nil && !lc.e.lease.isReleased() {
				lc.e.health.fail(err)
			}
			return true
		case lc.e.health.failOn(err):
			// What stops the engine elsewhere (a failed fsync) stops it
			// here too: one policy in every loop (I14).
			return true
		case err != nil:
			lc.e.log.Warn("renew node lease failed; retrying", "err", err)
			t.Reset(every / 4)
		default:
			t.Reset(every)
		}
		return false
	})
}

func (l *lease) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// leaseReserve records reserved in the lease before ids up to it are
// handed out, so that a node rebuilt without its state store starts beyond
// them (I8).
func (lc *lifecycle) leaseReserve(ctx context.Context, reserved uint64) error {
	if lc.e.lease == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lc.e.lease.timeout/3)
	defer cancel()
	err := lc.e.lease.renew(ctx, lc.e.cfg.Now, reserved)
	if errors.Is(err, ErrLeaseLost) {
		lc.e.health.fail(err)
	}
	return err
}

// leaseReserved is the highest checkpoint id the lease found at start
// says a former incarnation reserved; 0 without a lease. known is the
// highest id the node knows of otherwise (its store, its manifests): a
// mark more than reservedAhead beyond it was not written by a node (ids
// would wrap past 2^64) and is reported and ignored — for this call
// only: a start asks first knowing only its store's ids (0 when the store
// was lost), then knowing its manifests too, beyond which a real mark can
// be 2^40 ids ahead (lostIDsFloor), or more, when ids went past 2^48.
func (lc *lifecycle) leaseReserved(known uint64) uint64 {
	if lc.e.lease == nil {
		return 0
	}
	l := lc.e.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.prev.Reserved; r > known && r-known > reservedAhead {
		if known > l.doubted || l.doubted == 0 {
			l.doubted = max(known, 1)
			lc.e.log.Error("node lease names a reserved checkpoint mark beyond any plausible use: ignoring it",
				"lease", l.name, "reserved_checkpoint", r, "known_checkpoint", known, "holder", l.prev.String())
		}
		return 0
	}
	return l.prev.Reserved
}

// dropImplausibleMark stops the lease carrying on a reserved mark that
// leaseReserved ignores knowing every id the node knows (known): the
// reservation that follows raises the mark to the ids this start hands
// out. Until then renewals carry the mark as found, never a lower one.
func (lc *lifecycle) dropImplausibleMark(known uint64) {
	if lc.e.lease == nil || lc.leaseReserved(known) != 0 {
		return
	}
	l := lc.e.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.prev.Reserved > known {
		l.doc.Reserved = min(l.doc.Reserved, known)
	}
}

// lostIDsFloor returns the lowest checkpoint id a node whose state store
// is behind the destination may open, given its highest manifest inDest:
// when the lease does not know this node's ids either (deleted, replaced,
// or from before it kept the mark: a real one reserved every id a manifest
// names), ids beyond inDest plus a block may have been named by checkpoints
// that left no manifest, so it skips lostIDSkip (I8). 0 when the lease
// knows, without a lease, or without manifests.
func (lc *lifecycle) lostIDsFloor(inDest uint64) uint64 {
	if lc.e.lease == nil || inDest == 0 {
		return 0
	}
	if r := lc.leaseReserved(inDest); r >= inDest {
		return 0
	}
	floor := inDest + lostIDSkip
	if floor < inDest {
		return 0 // a manifest name near 2^64: not one a node wrote
	}
	if inDest > highestPlausibleID && inDest < layout.MaxCheckpoint/2 {
		// The node's own ids beyond a planted name passed over
		// (firstOpenID): half the room left to the bound a start
		// believes, not the whole skip beyond it.
		floor = inDest + (layout.MaxCheckpoint/2-inDest)/2
	}
	lc.e.log.Error("neither the state store nor the node lease knows this node's checkpoint ids: skipping beyond every id a checkpoint without a manifest may have named",
		"lease", lc.e.lease.name, "manifest_checkpoint", inDest, "checkpoint", floor)
	return floor
}

// releaseLease ends the lease at a clean shutdown.
func (lc *lifecycle) releaseLease(ctx context.Context) error {
	if lc.e.lease == nil {
		return nil
	}
	return lc.e.lease.release(ctx)
}
