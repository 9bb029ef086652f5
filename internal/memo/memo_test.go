package memo

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCacheKeepsUntilVersionChanges(t *testing.T) {
	c := New[string](1 << 20)
	calls := 0
	get := func(version uint64, key string) string {
		t.Helper()
		v, err := c.Get(version, key, func() (string, int, error) {
			calls++
			return fmt.Sprintf("%s@%d#%d", key, version, calls), 10, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, step := range []struct {
		what    string
		version uint64
		key     string
		want    string
	}{
		{"first", 1, "a", "a@1#1"},
		{"same version: the kept answer", 1, "a", "a@1#1"},
		{"other key", 1, "b", "b@1#2"},
		{"new version: computed again", 2, "a", "a@2#3"},
		// A lookup that took its version before the newest may get the
		// newer answer, never makes the cache go back.
		{"older version: the newer kept answer", 1, "a", "a@2#3"},
		{"after an older lookup", 2, "a", "a@2#3"},
	} {
		if got := get(step.version, step.key); got != step.want {
			t.Fatalf("%s: %s, want %s", step.what, got, step.want)
		}
	}
}

func TestCacheErrorsAndSize(t *testing.T) {
	c := New[int](100)
	boom := errors.New("boom")
	calls := 0
	for range 2 {
		v, err := c.Get(1, "e", func() (int, int, error) { calls++; return 7, 1, boom })
		if !errors.Is(err, boom) || v != 7 {
			t.Fatalf("got %d %v, want 7 and the error", v, err)
		}
	}
	if calls != 2 {
		t.Fatalf("an error was kept: %d computes, want 2", calls)
	}
	for range 2 {
		_, _ = c.Get(1, "big", func() (int, int, error) { calls++; return 1, 101, nil })
	}
	if calls != 4 {
		t.Fatalf("a value larger than the cache was kept: %d computes, want 4", calls)
	}
	for i := range 20 {
		_, _ = c.Get(1, fmt.Sprint(i), func() (int, int, error) { return i, 30, nil })
	}
	c.mu.Lock()
	bytes, n := c.bytes, len(c.m)
	c.mu.Unlock()
	if bytes > 100 || n > 3 {
		t.Fatalf("cache holds %d bytes in %d entries, want at most 100", bytes, n)
	}
}

// Concurrent lookups of a missing key compute it once.
func TestCacheComputesOnce(t *testing.T) {
	c := New[int](1 << 20)
	var calls atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, err := c.Get(3, "k", func() (int, int, error) {
				calls.Add(1)
				<-release
				return 42, 8, nil
			})
			if err != nil || v != 42 {
				t.Errorf("got %d %v", v, err)
			}
		})
	}
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond) // the first compute starts
	}
	time.Sleep(50 * time.Millisecond) // the others join it
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("8 concurrent lookups computed %d times, want 1", n)
	}
	v, _ := c.Get(3, "k", func() (int, int, error) { calls.Add(1); return 0, 8, nil })
	if v != 42 {
		t.Fatalf("kept %d, want 42", v)
	}
}
