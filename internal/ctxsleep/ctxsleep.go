// Package ctxsleep owns the one wait that a context cuts short: the timer
// and select that the client's retries, the API's feed pace, the load
// generator and the tests would otherwise each write again. It imports
// nothing of eosink, so the client can use it without the server.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends if that comes first. It returns nil when
// d has passed and ctx.Err() when ctx ended first. A d <= 0 does not wait:
// it returns ctx.Err(), so an ended context is always reported.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
