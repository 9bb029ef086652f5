package server

import (
	"errors"
	"testing"
	"time"
)

// TestLeaseSkewedHolderKeepsLease: a live holder whose wall clock is an
// hour behind (its renewals write expiries an hour old by the others'
// clocks) keeps its lease: a second node with the same id and its own
// state store is refused while the holder renews, as DESIGN "Several
// nodes" says ("it refuses only a holder that renews"). Before the fix it
// took the lease over at once: acquire compared the expiry written by the
// holder's clock with its own, with no watch for a renewal. The holder
// then went on committing until its next renewal found the lease lost
// (its fence runs on its own monotonic clock) while the newcomer ran its
// recovery, which after a store loss moves aside the part files of
// checkpoints without a manifest: the holder's checkpoint in flight too.
func TestLeaseSkewedHolderKeepsLease(t *testing.T) {
	const timeout = 600 * time.Millisecond
	r := leaseRig(t, nil, timeout, nil)
	tweak := r.tweak
	r.tweak = func(c *Config) {
		tweak(c)
		c.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	}
	r.start(nil)
	r.tweak = tweak
	e2, err := openSecond(t, r)
	if err == nil {
		_ = e2.Close()
		t.Fatal("a second node took over the lease of a live holder whose clock is an hour behind")
	}
	if !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("second node: %v, want ErrLeaseHeld", err)
	}
}
