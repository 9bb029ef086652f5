package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// openWaiting opens another engine with the rig's node id and its own
// state store (another data dir) and returns it without waiting.
func openWaiting(t *testing.T, r *rig) *Engine {
	t.Helper()
	cfg := r.config(r.fs)
	cfg.StorePath = filepath.Join(fastTempDir(t), "state.db")
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// waitRecovering waits until e's status says why it is not ready and
// that reason contains want.
func waitRecovering(t *testing.T, e *Engine, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Status()
		if st.Failed != "" {
			t.Fatalf("engine failed instead of waiting: %s", st.Failed)
		}
		if strings.Contains(st.Recovering, want) {
			return st.Recovering
		}
		if st.Ready || time.Now().After(deadline) {
			t.Fatalf("status %+v, want not ready and recovering %q", st, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// plantLease writes doc as the rig node's lease, as another writer of the
// bucket could.
func plantLease(t *testing.T, r *rig, data []byte) {
	t.Helper()
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.LeaseName(rigNode), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A replacement on another data dir whose lease is held by a crashed
// incarnation (it stopped renewing) waits for the expiry, saying so in
// its status, and takes over — it does not stop with ErrLeaseHeld (it did:
// the process exited with status 1 and needed a restarter).
func TestLeaseReplacementWaitsForCrashedHolder(t *testing.T) {
	const timeout = 800 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	r.start(nil)
	held := readLease(t, r.fs)
	r.stop() // SIGKILL: no release
	crashed := time.Now()
	e := openWaiting(t, r)
	why := waitRecovering(t, e, "waiting for node lease")
	if !strings.Contains(why, held.Incarnation) {
		t.Fatalf("status while waiting %q does not name the holder %s", why, held.Incarnation)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("replacement: %v, want it to wait for the expiry and take over", err)
	}
	if waited := time.Since(crashed); waited < timeout/2 {
		t.Fatalf("took over %s after the crash, before the lease could expire (timeout %s)", waited, timeout)
	}
	if l := readLease(t, r.fs); l.Incarnation != e.lease.doc.Incarnation {
		t.Fatalf("lease %+v, want the replacement's %s", l, e.lease.doc.Incarnation)
	}
	mustSend(t, e, nil, "s", 1, 1)
	if res := checkpointWithin(t, e, 10*time.Second); res.State != recovery.Committed {
		t.Fatalf("checkpoint of the replacement: %+v", res)
	}
}

// A holder that keeps renewing is refused: the waiting node sees the
// lease change while it is live and stops with ErrLeaseHeld, naming it,
// within about a renewal period.
func TestLeaseRenewingHolderRefused(t *testing.T) {
	const timeout = 900 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	r.start(nil)
	held := readLease(t, r.fs)
	begin := time.Now()
	_, err := openSecond(t, r)
	if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), held.Incarnation) || !strings.Contains(err.Error(), "renew") {
		t.Fatalf("second node: %v, want ErrLeaseHeld naming the renewing holder %s", err, held.Incarnation)
	}
	if d := time.Since(begin); d > 2*timeout {
		t.Fatalf("refused after %s; the holder renews every %s", d, timeout/3)
	}
}

// A planted lease expiring in 9999 that nobody renews does not keep the
// node from starting forever: its expiry is bounded (10 × the lease
// timeout after it was first seen), and it is reported. Before, the node
// refused to start until 9999.
func TestLeaseFarExpiryBounded(t *testing.T) {
	const timeout = 150 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	planted := Lease{Node: rigNode, Incarnation: "planted", RenewedAt: time.Now().UTC(),
		ExpiresAt: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
	data, _ := json.Marshal(planted)
	plantLease(t, r, data)
	begin := time.Now()
	e := openWaiting(t, r)
	waitRecovering(t, e, "waiting for node lease")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("with a lease planted to expire in 9999: %v", err)
	}
	if d := time.Since(begin); d < 5*timeout {
		t.Fatalf("took the planted lease after %s: it was bounded to 10 × %s, not taken at once", d, timeout)
	}
}

// A lease document that does not parse (planted, or written by something
// else) is reported and taken over, not retried forever.
func TestLeaseUndecodableTakenOver(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	plantLease(t, r, []byte("not a lease"))
	e := openWaiting(t, r)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("with an undecodable lease: %v (status %+v)", err, e.Status())
	}
	if l := readLease(t, r.fs); l.Incarnation != e.lease.doc.Incarnation {
		t.Fatalf("lease %+v after the take-over", l)
	}
}

// A planted (released) lease with a huge reserved_checkpoint must not wrap
// checkpoint ids past 2^64: the mark is checked against what the node
// knows and ignored, reported, when it is beyond any plausible use.
func TestLeaseHugeReservedIgnored(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	planted := Lease{Node: rigNode, Incarnation: "planted", RenewedAt: time.Now().Add(-time.Hour).UTC(),
		ExpiresAt: time.Now().Add(-time.Hour).UTC(), Reserved: math.MaxUint64 - 3}
	data, _ := json.Marshal(planted)
	plantLease(t, r, data)
	e := r.start(nil)
	if open := e.Status().OpenID; open == 0 || open > 1<<41 {
		t.Fatalf("open checkpoint %d after a planted reserved mark of %d", open, planted.Reserved)
	}
	if l := readLease(t, r.fs); l.Reserved > 1<<41 {
		t.Fatalf("the lease carries the planted mark on: %d", l.Reserved)
	}
	mustSend(t, e, nil, "s", 1, 1)
	r.commit()
}

// After a host suspend the monotonic clock has not moved while the wall
// clock (and every other node's view of the lease) has passed its expiry:
// the fence must refuse writes until a renewal, and renew at once rather
// than at the next tick. Before, the fence read the monotonic clock only
// and let a node write past its lease.
func TestLeaseFenceChecksWallClock(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	e := r.start(nil)
	if err := e.life.leaseCheck(); err != nil {
		t.Fatal(err)
	}
	// The suspend: two hours pass on the wall clock, none on the monotonic one.
	e.lease.mu.Lock()
	e.lease.wall = func() time.Time { return time.Now().Add(2 * time.Hour).Round(0) }
	e.lease.mu.Unlock()
	if err := e.life.leaseCheck(); !errors.Is(err, ErrLeaseStale) {
		t.Fatalf("fence after the wall clock passed the expiry: %v, want ErrLeaseStale", err)
	}
	waitRenewed(t, e, "after the fence found the lease stale")
	mustSend(t, e, nil, "s", 1, 1)
	r.commit()
}

// I8 when the state store and the lease are both lost (or the lease was
// replaced by one that does not know this node's ids): checkpoints that
// left no manifest (empty or aborted ones) named ids beyond the highest
// manifest plus a block, which nothing in the destination records. The
// node must not hand them out again. Before, it opened at manifest +
// block + 2, inside the ids named before.
func TestLeaseAndStoreLostNoIDReuse(t *testing.T) {
	for _, lost := range []string{"deleted", "replaced"} {
		t.Run(lost, func(t *testing.T) {
			r, named := leaseRigNamingIDs(t)
			r.stopLosingStore()
			leaseFile := rigDest + "/" + layout.LeaseName(rigNode)
			if lost == "deleted" {
				if err := r.fs.Remove(leaseFile); err != nil {
					t.Fatal(err)
				}
			} else {
				// An expired lease without the mark (an older version's,
				// or one another writer put there).
				old := Lease{Node: rigNode, Incarnation: "old", RenewedAt: time.Now().Add(-time.Hour).UTC(), ExpiresAt: time.Now().Add(-time.Minute).UTC()}
				data, _ := json.Marshal(old)
				plantLease(t, r, data)
			}
			e := r.start(nil)
			if open := e.Status().OpenID; open <= named {
				t.Fatalf("open checkpoint %d after losing store and lease; id %d was handed out before (I8)", open, named)
			}
			mustSend(t, e, nil, "s", 2, 1)
			r.commit()
		})
	}
}
