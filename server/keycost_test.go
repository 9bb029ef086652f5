package server

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// BenchmarkKeyCost measures what an idempotency key costs once its batch
// is committed: heap bytes held by the engine and bytes of state.db, per
// key, for 100k keys of 36 characters (a UUID) and of 255 (the most) prepared over ten
// checkpoints. key0 is the same writes without keys (the files, in
// memory, and the checkpoint rows): subtract it. Run:
//
//	go test ./server -run '^$' -bench KeyCost -benchtime 1x
func BenchmarkKeyCost(b *testing.B) {
	for _, size := range []int{0, 36, 255} {
		b.Run(fmt.Sprintf("key%d", size), func(b *testing.B) { benchKeyCost(b, size, 100_000, 10) })
	}
}

func benchKeyCost(b *testing.B, size, keys, ckpts int) {
	pad := strings.Repeat("k", max(size-36, 0))
	for range b.N {
		r := newRig(b, nil)
		r.broken = "a measurement, not a check"
		e := r.start(nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		data := invariant.Batch(invariant.BatchID{Stream: "s", Seq: 1}, 1)
		for i := range keys {
			key := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) + pad
			w := Write{Stream: "s", Ext: "ndjson", Data: data, Records: 1}
			if size > 0 {
				w.Key = newKeyForCost(key, data)
			}
			if _, err := e.Write(w); err != nil {
				b.Fatal(err)
			}
			if (i+1)%(keys/ckpts) == 0 {
				r.checkpoint()
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := e.KeyCount(); size > 0 && n != keys {
			b.Fatalf("%d keys held, want %d", n, keys)
		}
		r.stop()
		fi, err := os.Stat(r.storePath)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(keys), "heapB/key")
		b.ReportMetric(float64(fi.Size())/float64(keys), "dbB/key")
	}
}

func newKeyForCost(key string, data []byte) *IdempotencyKey { return NewIdempotencyKey(key, data) }
