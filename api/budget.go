package api

import "sync"

// budget is a count of bytes that may be held at once by request bodies in
// flight. take never waits: a request over the budget is answered 429.
type budget struct {
	mu    sync.Mutex
	used  int64
	limit int64
}

// take reserves n bytes; false if that would pass the limit.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken before.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// inUse returns the bytes reserved now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
