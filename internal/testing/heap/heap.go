// Package heap is test tooling only: the live heap, as the memory-bound
// tests of the encoders (internal/format, staging) measure it.
package heap

import "runtime"

// Live returns the bytes of live heap objects after two full collections:
// the second frees what the first moved to sync.Pool victim caches.
func Live() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
