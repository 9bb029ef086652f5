//go:build race

package staging

// raceEnabled: the race detector instruments memory and slows encoding
// tenfold, so memory measurements mean nothing under it.
const raceEnabled = true
