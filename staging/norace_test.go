//go:build !race

package staging

const raceEnabled = false
