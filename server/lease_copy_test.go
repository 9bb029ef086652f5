package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eosink/eosink/recovery"
)

// A copy of a live node's data dir (a backup restored elsewhere, a cloned
// VM or volume snapshot) started with the same node id while the original
// still runs. DESIGN: "a second live node with the same id refuses to
// start". The copied memo names the live process's incarnation, and the
// memo is trusted as "dead" without any check that it belongs to this file
// lock, so the copy takes the live lease over at once.
func TestLeaseCopiedDataDirRefused(t *testing.T) {
	r := leaseRig(t, nil, 900*time.Millisecond, nil) // the original renews every 300 ms: the copy sees it
	r.broken = "two holders on purpose"
	a := r.start(nil)
	held := readLease(t, r.fs)

	// Copy the data dir (state store and memo) while A runs.
	copyDir := fastTempDir(t)
	for _, f := range []string{"state.db", "lease-incarnation"} {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(r.storePath), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyDir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := openWithStore(t, r, filepath.Join(copyDir, "state.db"))
	if errors.Is(err, ErrLeaseHeld) {
		return // what the design promises
	}
	if err != nil {
		t.Fatal(err)
	}
	now := readLease(t, r.fs)
	t.Logf("lease before: %s", held.Incarnation)
	t.Logf("lease after the copy started: %s", now.Incarnation)
	// Both engines now pass the fence and commit.
	mustSend(t, a, nil, "s", 1, 1)
	ra := checkpointWithin(t, a, 5*time.Second)
	mustSend(t, b, nil, "s", 2, 1)
	rb := checkpointWithin(t, b, 5*time.Second)
	t.Logf("A (original, live) checkpoint %d %s; B (copy) checkpoint %d %s; A fence %v, B fence %v",
		ra.ID, ra.State, rb.ID, rb.State, a.life.leaseCheck(), b.life.leaseCheck())
	if ra.State == recovery.Committed && rb.State == recovery.Committed {
		t.Fatalf("split brain: the copy took the live lease of %s at once and both nodes committed", held.Incarnation)
	}
	t.Fatalf("a copied data dir started instead of ErrLeaseHeld (A %s, B %s)", ra.State, rb.State)
}
