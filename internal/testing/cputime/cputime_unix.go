//go:build unix

// Package cputime is test tooling only: the process's CPU time, so that
// benchmarks (internal/format, staging) can report CPU per record, which a
// loaded machine distorts less than wall time.
package cputime

import (
	"syscall"
	"time"
)

// Used returns the process's user+system CPU time (0 if it can't be read).
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
