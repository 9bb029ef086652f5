package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// CheckLease: a planted lease with ids near 2^64, an expiry in 9999, a
// renewal in the future or another node's name is refused; what a node
// writes passes.
func TestCheckLease(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	good := Lease{Node: "n1", RenewedAt: now.Add(-time.Second), ExpiresAt: now.Add(29 * time.Second), Reserved: 1025}
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
		l  func(Lease) Lease
	}{
		"another node":      {LeaseName("n1"), func(l Lease) Lease { l.Node = "n2"; return l }},
		"not a lease name":  {"_nodes/n1.txt", func(l Lease) Lease { return l }},
		"ids near 2^64":     {LeaseName("n1"), func(l Lease) Lease { l.Reserved = 1<<64 - 1; return l }},
		"expires in 9999":   {LeaseName("n1"), func(l Lease) Lease { l.ExpiresAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC); return l }},
		"renewed in future": {LeaseName("n1"), func(l Lease) Lease { l.RenewedAt = now.AddDate(1, 0, 0); return l }},
	} {
		if err := CheckLease(c.at, c.l(good), now); !errors.Is(err, ErrBadLease) {
			t.Errorf("%s: %v, want ErrBadLease", name, err)
		}
	}
}

// ReadLease reads back what the engine writes (the same struct), and
// refuses a document that is not JSON.
func TestReadLeaseRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	want := Lease{Node: "n1", Incarnation: "abc", Listen: "127.0.0.1:8080", RenewedAt: now, ExpiresAt: now.Add(30 * time.Second), Reserved: 7}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadLease(bytes.NewReader(b))
	if err != nil || got != want {
		t.Fatalf("ReadLease = %+v, %v; want %+v", got, err, want)
	}
	if !bytes.Contains(b, []byte(`"reserved_checkpoint":7`)) {
		t.Fatalf("the wire name of Reserved changed: %s", b)
	}
	if _, err := ReadLease(strings.NewReader("not json")); err == nil {
		t.Fatal("ReadLease accepted a document that is not JSON")
	}
}
