// Package testenv is test tooling only: the knobs long tests read from
// the environment (a model test's steps and seed, a test's rounds), read
// one way, so that a bad value fails the test with the variable's name.
package testenv

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Int returns the integer in environment variable name, or def when it is
// unset or empty. A value that is no integer fails t ("NAME: err").
func Int(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// Seed returns the seed in environment variable name (to replay a run),
// or one taken from the clock when it is unset or empty. A value that is
// no unsigned integer fails t ("NAME: err").
func Seed(t testing.TB, name string) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
