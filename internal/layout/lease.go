package layout

// This file owns the node lease document (_nodes/<node>.json, written by
// the engine, read by the engine and the read side) and the checks on one
// read from the destination: its bounds, so that a lease planted by
// another writer of the bucket can neither make checkpoint ids wrap nor
// hold a node off for ever.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// MaxLease bounds the bytes of one lease document a reader accepts.
const MaxLease = 64 << 10

// Lease is the document at LeaseName(node) in the destination. A node
// takes it create-only at start (or replaces it by compare-and-swap once
// it has expired), and renews it by compare-and-swap every timeout/3.
type Lease struct {
	Node string `json:"node"`
	// Incarnation is random per process start: it tells a holder from a
	// restarted or a second process with the same node id.
	Incarnation string    `json:"incarnation"`
	Listen      string    `json:"listen,omitempty"`
	RenewedAt   time.Time `json:"renewed_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Reserved is the highest checkpoint id any incarnation of this node
	// reserved (and so may have named in an answer). A node rebuilt
	// without its state store continues beyond it (I8). Written before
	// the ids are handed out, carried over from one holder to the next.
	Reserved uint64 `json:"reserved_checkpoint"`
}

func (l Lease) String() string {
	return fmt.Sprintf("node %s incarnation %s (listen %q), renewed %s, expires %s",
		l.Node, l.Incarnation, l.Listen, l.RenewedAt.Format(time.RFC3339Nano), l.ExpiresAt.Format(time.RFC3339Nano))
}

// ReadLease decodes a lease document from r, reading at most MaxLease
// bytes. It checks only the form; CheckLease checks the bounds.
func ReadLease(r io.Reader) (Lease, error) {
	var l Lease
	if err := json.NewDecoder(io.LimitReader(r, MaxLease)).Decode(&l); err != nil {
		return l, fmt.Errorf("decode lease: %w", err)
	}
	return l, nil
}

// CheckLease checks the lease read at name against now: it names the node
// its name does, reserves no id beyond MaxCheckpoint (so the ids after it
// cannot wrap, I8), was not renewed more than MaxClockSkew in the future,
// and expires no later than MaxLeaseTimeout after its renewal. A released
// lease (zero expiry) passes. Errors wrap ErrBadLease.
func CheckLease(name string, l Lease, now time.Time) error {
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
