package server

import (
	"context"
	"testing"
	"time"
)

// TestParkKickNotLostAfterWait: a kick (a table commit just parked) sent
// after the park loop's timed wait returned must still be there for the
// loop's next wait. The loop reads the store before it waits, so a kick
// consumed by nobody leaves a freshly parked row unretried (and its
// stream's writes refused) until some later park kicks again. Failed
// before: the wait's helper goroutine, not yet scheduled when the timer
// ended the wait, picked between its cancelled context and the kick at
// random and swallowed the kick about half the time.
func TestParkKickNotLostAfterWait(t *testing.T) {
	lc := &lifecycle{e: &Engine{}, parkKick: make(chan struct{}, 1)}
	lc.e.health.failed = make(chan struct{})
	ctx := context.Background()
	for i := range 300 {
		if !lc.waitParkKick(ctx, time.Nanosecond) {
			t.Fatal("the wait reported the end")
		}
		select {
		case lc.parkKick <- struct{}{}:
		default:
			t.Fatal("a kick is pending before any was sent")
		}
		time.Sleep(200 * time.Microsecond) // a stale helper would run now
		select {
		case <-lc.parkKick:
		default:
			t.Fatalf("wait %d: the kick sent after the wait returned was swallowed", i)
		}
	}
}
