//go:build race

package batch_test

// raceEnabled: the race detector makes sync.Pool drop items, so the
// encoding/json scanner pool allocates and allocation counts mean nothing.
const raceEnabled = true
