package layout

// This file owns the checks on a node lease document read from the
// destination (_nodes/<node>.json, written by the engine): its bounds,
// so that a lease planted by another writer of the bucket can neither
// make checkpoint ids wrap nor hold a node off for ever.

import (
	"errors"
	"fmt"
	"time"
)

// MaxLeaseTimeout bounds how long a lease may outlive its renewal: far
// beyond any --lease-timeout in use, so a lease expiring later than this
// after its renewal was not written by a node.
const MaxLeaseTimeout = 24 * time.Hour

// MaxClockSkew bounds how far in the future a lease's renewal time may be
// against the reader's clock.
const MaxClockSkew = time.Hour

// ErrBadLease means a document at a lease name is not a lease a node
// wrote there: another node's, out of bounds, or unreadable. Readers
// report it; a node never takes ids or an expiry from it.
var ErrBadLease = errors.New("not a valid lease")

// LeaseFields are the parts of a lease document CheckLease bounds.
type LeaseFields struct {
	Node      string
	RenewedAt time.Time
	ExpiresAt time.Time
	// Reserved is the highest checkpoint id the node reserved.
	Reserved uint64
}

// CheckLease checks the lease read at name against now: it names the node
// its name does, reserves no id beyond MaxCheckpoint (so the ids after it
// cannot wrap, I8), was not renewed more than MaxClockSkew in the future,
// and expires no later than MaxLeaseTimeout after its renewal. A released
// lease (zero expiry) passes. Errors wrap ErrBadLease.
func CheckLease(name string, l LeaseFields, now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadLease, name, fmt.Sprintf(format, args...))
	}
	node, ok := ParseLeaseName(name)
	if !ok || !Node(node) {
		return bad("not a lease name")
	}
	if l.Node != node {
		return bad("names node %q", l.Node)
	}
	if l.Reserved > MaxCheckpoint {
		return bad("reserved checkpoint %d is beyond %d", l.Reserved, uint64(MaxCheckpoint))
	}
	if l.RenewedAt.After(now.Add(MaxClockSkew)) {
		return bad("renewed at %s, in the future", l.RenewedAt.Format(time.RFC3339))
	}
	if !l.ExpiresAt.IsZero() && l.ExpiresAt.Sub(l.RenewedAt) > MaxLeaseTimeout {
		return bad("expires at %s, more than %s after its renewal at %s", l.ExpiresAt.Format(time.RFC3339), MaxLeaseTimeout, l.RenewedAt.Format(time.RFC3339))
	}
	return nil
}
