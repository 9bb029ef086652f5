//go:build race

package format

// raceEnabled: the race detector instruments memory and slows encoding
// tenfold, so memory measurements mean nothing under it.
const raceEnabled = true
