package server

import (
	"testing"
	"time"
)

// TestStatusOffIngestLock: Status (health, readiness, metrics) answers
// while the ingest lock is held, as it is by a long barrier or a slow
// write, and shows what the last writer published.
func TestStatusOffIngestLock(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	mustSend(t, e, nil, "clicks", 1, 3)
	e.ing.mu.Lock()
	got := make(chan Status, 1)
	go func() { got <- e.Status() }()
	var st Status
	select {
	case st = <-got:
		e.ing.mu.Unlock()
	case <-time.After(5 * time.Second):
		e.ing.mu.Unlock()
		t.Fatal("Status blocked on the ingest lock")
	}
	if !st.Ready || st.OpenFiles != 1 || st.OpenRecords != 3 || st.Held == 0 || st.OpenID == 0 {
		t.Fatalf("status %+v: want ready, one open file, 3 records held", st)
	}
	res := r.checkpoint()
	if st := e.Status(); st.LastDone != res.ID || st.OpenFiles != 0 || st.Held != 0 || st.OpenID != res.ID+1 {
		t.Fatalf("status after checkpoint %d: %+v", res.ID, st)
	}
}
