package format

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// pageSample returns n bytes of the harness's records.
func pageSample(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = append(b, benchRecord(i%300)...)
	}
	return b[:n]
}

// TestPageCodecsHeapAfterOverlap: a codec shared by two encoding slots
// (staging.NewEncoders(2)) whose pages were compressed two at a time once
// holds one zstd encoder again after a second idle, not two for good.
// Before (one zstd.Encoder of concurrency 2, both made at the start) it
// held ~4.4 MB here; after, ~2.2 MB.
func TestPageCodecsHeapAfterOverlap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory blurs the heap")
	}
	page := pageSample(256 << 10)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := int64(ms.HeapAlloc)

	pages := NewPageCodecs(2)
	c, err := pages.codec("")
	if err != nil {
		t.Fatal(err)
	}
	encode := func() {
		if _, err := c.Encode(nil, page); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	for range 2 { // two pages at once, as two files' steps may
		wg.Go(func() {
			for range 8 {
				encode()
			}
		})
	}
	wg.Wait()
	time.Sleep(1100 * time.Millisecond) // the extra one is idle for pageEncoderIdle
	encode()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	held := int64(ms.HeapAlloc) - base
	runtime.KeepAlive(pages)
	t.Logf("page codec of concurrency 2 holds %.2f MB", float64(held)/1e6)
	if held > 3<<20 {
		t.Errorf("page codec holds %.2f MB after a second idle, want one encoder's (~2.2 MB)", float64(held)/1e6)
	}
}

// TestPageCodecsEncoders: encoders are made as pages need them, at most
// concurrency, each writing the bytes one zstd encoder writes; steady
// concurrent use keeps them; one idle for pageEncoderIdle beside another
// is dropped; an occasional overlap waits, a second one within
// pageEncoderIdle makes an encoder.
func TestPageCodecsEncoders(t *testing.T) {
	z, err := newZstdPages(2)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	z.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	ref, err := zstd.NewWriter(nil, pageOptions(1, pageWindow)...)
	if err != nil {
		t.Fatal(err)
	}
	page := pageSample(200 << 10)
	want := ref.EncodeAll(page, nil)

	// Two at once, many times, the clock still: no encoder dropped, at
	// most one made after the first, every frame the same bytes.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			for range 20 {
				got, err := z.Encode(nil, page)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("frame of %d bytes (%v), want %d", len(got), err, len(want))
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if n := z.extras.Load(); n > 1 {
		t.Errorf("%d encoders made after the first, want at most 1 (concurrency 2)", n)
	}
	z.mu.Lock()
	made, idle := z.made, len(z.idle)
	z.mu.Unlock()
	if made > 2 || made != idle {
		t.Fatalf("made %d, idle %d: want at most 2, all idle", made, idle)
	}
	extras := z.extras.Load()

	// An idle one beside another for pageEncoderIdle: dropped at the next
	// return, one kept.
	mu.Lock()
	clock = clock.Add(pageEncoderIdle)
	mu.Unlock()
	if got, _ := z.Encode(nil, page); !bytes.Equal(got, want) {
		t.Fatal("frame differs")
	}
	z.mu.Lock()
	made, idle = z.made, len(z.idle)
	z.mu.Unlock()
	if made != 1 || idle != 1 {
		t.Errorf("after an idle second: made %d, idle %d; want 1, 1", made, idle)
	}

	// A page that finds the encoder in use waits for it, unless a page
	// waited within pageEncoderIdle: then it makes another.
	mu.Lock()
	clock = clock.Add(2 * pageEncoderIdle)
	mu.Unlock()
	extras = z.extras.Load()
	overlap := func() (waited bool) {
		held, err := z.get()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte)
		go func() { got, _ := z.Encode(nil, page); done <- got }()
		var got []byte
		select {
		case got = <-done:
		case <-time.After(50 * time.Millisecond):
			waited = true
		}
		z.put(held)
		if waited {
			got = <-done
		}
		if !bytes.Equal(got, want) {
			t.Fatal("frame differs")
		}
		return waited
	}
	if !overlap() {
		t.Error("a page beside one in progress, none waiting lately: made an encoder rather than wait")
	}
	if n := z.extras.Load(); n != extras {
		t.Errorf("%d encoders made for an occasional overlap", n-extras)
	}
	if overlap() {
		t.Error("a second overlap within pageEncoderIdle waited rather than make an encoder")
	}
	if n := z.extras.Load(); n != extras+1 {
		t.Errorf("%d encoders made for a second overlap, want 1", n-extras)
	}
	mu.Lock()
	clock = clock.Add(pageEncoderIdle)
	mu.Unlock()
	extras = z.extras.Load()

	// One page at a time never makes another.
	for range 5 {
		if got, _ := z.Encode(nil, page); !bytes.Equal(got, want) {
			t.Fatal("frame differs")
		}
	}
	if n := z.extras.Load(); n != extras {
		t.Errorf("%d encoders made for pages one at a time", n-extras)
	}
}
