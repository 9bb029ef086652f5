package layout

import (
	"errors"
	"testing"
	"time"
)

// CheckLease: a planted lease with ids near 2^64, an expiry in 9999, a
// renewal in the future or another node's name is refused; what a node
// writes passes.
func TestCheckLease(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	good := LeaseFields{Node: "n1", RenewedAt: now.Add(-time.Second), ExpiresAt: now.Add(29 * time.Second), Reserved: 1025}
	if err := CheckLease(LeaseName("n1"), good, now); err != nil {
		t.Fatalf("a lease a node writes: %v", err)
	}
	released := good
	released.ExpiresAt = time.Time{}
	if err := CheckLease(LeaseName("n1"), released, now); err != nil {
		t.Fatalf("a released lease: %v", err)
	}
	for name, c := range map[string]struct {
		at string
		l  func(LeaseFields) LeaseFields
	}{
		"another node":      {LeaseName("n1"), func(l LeaseFields) LeaseFields { l.Node = "n2"; return l }},
		"not a lease name":  {"_nodes/n1.txt", func(l LeaseFields) LeaseFields { return l }},
		"ids near 2^64":     {LeaseName("n1"), func(l LeaseFields) LeaseFields { l.Reserved = 1<<64 - 1; return l }},
		"expires in 9999":   {LeaseName("n1"), func(l LeaseFields) LeaseFields { l.ExpiresAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC); return l }},
		"renewed in future": {LeaseName("n1"), func(l LeaseFields) LeaseFields { l.RenewedAt = now.AddDate(1, 0, 0); return l }},
	} {
		if err := CheckLease(c.at, c.l(good), now); !errors.Is(err, ErrBadLease) {
			t.Errorf("%s: %v, want ErrBadLease", name, err)
		}
	}
}
