package recovery

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// BenchmarkStoreParallelInit is many goroutines each writing its own
// durable transaction (InitProducer, one fdatasync each) at once: what
// the write mutex of update (wmu) could serialize beyond bbolt's own
// writer lock. Ns/op is per transaction.
func BenchmarkStoreParallelInit(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.InitProducer(fmt.Sprintf("p%d", n.Add(1)%64)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestStoreWriteFaultPhasesPaired: with writers in parallel, each write
// transaction's AfterCommit call comes before the next one's BeforeCommit
// (update holds its write mutex across both since 5019457). Test hooks
// that count transactions rely on it (server's storeFaults takes an
// AfterCommit call for the transaction its last BeforeCommit counted);
// before 5019457 another writer's BeforeCommit could come in between.
func TestStoreWriteFaultPhasesPaired(t *testing.T) {
	var inTxn atomic.Bool
	var bad atomic.Int64
	s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WriteFault: func(op string, ph Phase) error {
		switch ph {
		case BeforeCommit:
			if inTxn.Swap(true) {
				bad.Add(1)
			}
		case AfterCommit:
			if !inTxn.Swap(false) {
				bad.Add(1)
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 200 {
				if _, err := s.InitProducer(fmt.Sprintf("p%d-%d", g, i%8)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d write-fault calls out of pairs: another writer's BeforeCommit between a transaction's BeforeCommit and AfterCommit", n)
	}
}
