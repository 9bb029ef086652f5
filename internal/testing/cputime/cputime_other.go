//go:build !unix

// Package cputime is test tooling only: the process's CPU time, so that
// benchmarks (internal/format, staging) can report CPU per record, which a
// loaded machine distorts less than wall time.
package cputime

import "time"

// Used is not measured here: benchmarks report 0 CPU.
func Used() time.Duration { return 0 }
