package main

import (
	"fmt"
	"strconv"
)

// openFilesReserve is what the default --max-open-files leaves of the
// descriptor limit for everything else: connections, the state store,
// directories being synced, the destination's files being read.
const openFilesReserve = 64

// maxOpenFilesFor is the default --max-open-files under a soft
// RLIMIT_NOFILE: half of it, because the previous checkpoint's files stay
// open through its pre-commit while the next checkpoint opens its own, less
// a reserve; at least a quarter of it and 1, at most 65536.
func maxOpenFilesFor(soft uint64) int {
	soft = min(soft, 1<<20)
	n := int(soft/2) - openFilesReserve
	n = max(n, int(soft/4), 1)
	return min(n, 65536)
}

// positive is an int flag that must be at least 1.
type positive int

func (p *positive) String() string { return strconv.Itoa(int(*p)) }

func (p *positive) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("want a whole number of at least 1")
	}
	*p = positive(n)
	return nil
}
