package tests

import (
	"testing"
	"time"
)

// eventually calls cond every `every` until it returns true. Once timeout
// has passed without, it fails the test with failure's message, built
// then (so it can name what cond saw last, and the log's tail).
func eventually(t testing.TB, timeout, every time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(every)
	}
}
