package table_test

import (
	"context"
	"testing"
	"time"
)

// TestCommitClockBehind: a node whose clock is behind the table's newest
// snapshot by more than Iceberg's one-minute tolerance (another node's
// clock ahead, or its own clock stepped back by NTP) still commits, and
// the snapshot log stays in order for time travel. Before the fix its
// snapshot was refused ("invalid snapshot timestamp"), an error the
// failure policy retries: the node's checkpoints stalled, every stream's,
// until its clock caught up with the other node's.
func TestCommitClockBehind(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ahead, behind := r.iceberg(), r.iceberg()
	ahead.Now = func() time.Time { return base.Add(10 * time.Minute) }
	behind.Now = func() time.Time { return base }
	if err := ahead.Commit(ctx, "n0", 1, r.files("orders", "n0", 1, recs(0, 3))); err != nil {
		t.Fatal(err)
	}
	if err := behind.Commit(ctx, "n1", 1, r.files("orders", "n1", 1, recs(3, 3))); err != nil {
		t.Fatalf("a node 10 minutes behind can't commit: %v", err)
	}
	// The same node's clock stepped back an hour between two checkpoints.
	behind.Now = func() time.Time { return base.Add(-time.Hour) }
	if err := behind.Commit(ctx, "n1", 2, r.files("orders", "n1", 2, recs(6, 3))); err != nil {
		t.Fatalf("a clock stepped back an hour can't commit: %v", err)
	}
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 9)
	if tb.Snapshots != 3 || cur.Version != 3 {
		t.Fatalf("%d snapshots at v%d, want 3 at v3", tb.Snapshots, cur.Version)
	}
	snaps := cur.Metadata.Snapshots()
	for i := 1; i < len(snaps); i++ {
		if snaps[i].TimestampMs < snaps[i-1].TimestampMs {
			t.Fatalf("snapshot %d at %d ms, before its parent at %d ms", i, snaps[i].TimestampMs, snaps[i-1].TimestampMs)
		}
	}
}
