package staging

import (
	"bufio"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/heap"
	"github.com/eosink/eosink/internal/testing/orders"
	"github.com/spf13/afero"
)

// TestEncodersSlotsHeap: one file's steps, one after another, on Encoders
// of two slots use one slot's buffers and codec state, not both. Before
// (a FIFO channel of slots) the steps took the slots in turn, and each
// kept its 2 x 256 KiB buffers and its zstd framer: +4.20 MiB live here
// (with stream.go reverted, checked); after, one slot's: +2.10 MiB.
func TestEncodersSlotsHeap(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory means nothing under the race detector")
	}
	batches := orders.Batches(orders.Records(t, 15, 12000), 100)
	fs := afero.NewBasePathFs(afero.NewOsFs(), t.TempDir())
	base := heap.Live()
	es := NewEncoders(2, 64<<10)
	tx, err := CreateEncoded(fs, "/s.ndjson.zst.inprogress", 16<<10, Encoding{Format: "ndjson", Compression: "zstd"}, es)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		if err := tx.Append(b, 100, "", int64(i)); err != nil {
			t.Fatal(err)
		}
		tx.enc.wait() // one step at a time
	}
	if _, err := tx.PreCommit(); err != nil {
		t.Fatal(err)
	}
	held := heap.Live() - base
	t.Logf("Encoders of 2 slots after one file's steps: live heap +%.2f MiB", float64(held)/(1<<20))
	if limit := int64(3 << 20); held > limit {
		t.Errorf("Encoders hold +%.2f MiB after one file's steps, want one slot's (~2.1 MiB)", float64(held)/(1<<20))
	}
	runtime.KeepAlive(es)
	runtime.KeepAlive(batches)
}

// TestEncodersSlots: the slot released last is taken next; a slot idle
// for slotIdle while another is idle lets its buffers go, and one in
// steady use keeps them; all n are taken before a step waits.
func TestEncodersSlots(t *testing.T) {
	es := NewEncoders(3, 0)
	var mu sync.Mutex
	var clock time.Time
	es.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	tick := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	fill := func(s *slot) { s.bw, s.br = bufio.NewWriterSize(nil, 16), bufio.NewReaderSize(nil, 16) }

	a := es.acquire()
	fill(a)
	es.release(a)
	for i := range 5 {
		tick(slotIdle) // alone: nothing else idle holds anything
		if s := es.acquire(); s != a {
			t.Fatalf("step %d took another slot than the one released last", i)
		}
		es.release(a)
		if a.empty() {
			t.Fatalf("step %d: the slot in use let its buffers go", i)
		}
	}

	// Three at once, then only one in use: the other two let theirs go
	// once idle for slotIdle, not before.
	ss := []*slot{es.acquire(), es.acquire(), es.acquire()}
	done := make(chan *slot)
	go func() { done <- es.acquire() }() // waits: all three taken
	select {
	case <-done:
		t.Fatal("a fourth step took a slot of three")
	case <-time.After(20 * time.Millisecond):
	}
	for _, s := range ss {
		fill(s)
		es.release(s)
	}
	w := <-done
	es.release(w)
	for i := range 3 {
		tick(slotIdle / 4)
		s := es.acquire()
		es.release(s)
		if s != w {
			t.Fatalf("step %d took another slot than the one released last", i)
		}
	}
	for _, s := range ss {
		if s != w && s.empty() {
			t.Fatalf("a slot idle for %v let its buffers go", 3*slotIdle/4)
		}
	}
	tick(slotIdle / 4)
	s := es.acquire()
	es.release(s)
	for i, o := range ss {
		if o != s && !o.empty() {
			t.Errorf("slot %d idle for %v kept its buffers", i, slotIdle)
		}
	}
	if s.empty() {
		t.Error("the slot in use let its buffers go")
	}
}
