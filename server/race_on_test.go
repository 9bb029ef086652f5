//go:build race

package server

// raceEnabled: built with -race, which slows the engine ~5x; TestModel
// then runs fewer steps (the race pass looks for data races; the plain
// pass covers the state space).
const raceEnabled = true
