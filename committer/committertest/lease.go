package committertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/eosink/eosink/committer"
)

// RunLeaser checks the committer.Leaser contract, each case on a fresh,
// empty destination from newLeaser: create-only, compare-and-swap, and
// that of concurrent swaps from one version exactly one wins.
func RunLeaser(t *testing.T, newLeaser func(t *testing.T) committer.Leaser) {
	runParallel(t, newLeaser, []testCase[committer.Leaser]{
		{"CreateOnlyThenSwap", testLeaseCreateSwap},
		{"MissingLease", testLeaseMissing},
		{"ConcurrentSwapsOneWins", testLeaseConcurrent},
		{"ConcurrentCreatesOneWins", testLeaseConcurrentCreate},
	})
}

const leaseName = "_nodes/n1.json"

func testLeaseCreateSwap(t *testing.T, l committer.Leaser) {
	ctx := t.Context()
	v1, err := l.WriteLease(ctx, leaseName, []byte(`{"a":1}`), "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := l.WriteLease(ctx, leaseName, []byte(`{"a":2}`), ""); !errors.Is(err, committer.ErrExists) {
		t.Fatalf("create again: %v, want ErrExists", err)
	}
	data, v, err := l.ReadLease(ctx, leaseName)
	if err != nil || string(data) != `{"a":1}` || v != v1 {
		t.Fatalf("read: %q %q %v, want {\"a\":1} %q", data, v, err, v1)
	}
	v2, err := l.WriteLease(ctx, leaseName, []byte(`{"a":3}`), v1)
	if err != nil {
		t.Fatalf("swap: %v", err)
	}
	if v2 == v1 {
		t.Fatalf("swap kept version %q", v1)
	}
	if _, err := l.WriteLease(ctx, leaseName, []byte(`{"a":4}`), v1); !errors.Is(err, committer.ErrPrecondition) {
		t.Fatalf("swap from a stale version: %v, want ErrPrecondition", err)
	}
	data, v, err = l.ReadLease(ctx, leaseName)
	if err != nil || string(data) != `{"a":3}` || v != v2 {
		t.Fatalf("after a refused swap: %q %q %v, want {\"a\":3} %q", data, v, err, v2)
	}
}

func testLeaseMissing(t *testing.T, l committer.Leaser) {
	ctx := t.Context()
	if _, _, err := l.ReadLease(ctx, leaseName); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("read missing: %v, want ErrNotFound", err)
	}
	if _, err := l.WriteLease(ctx, leaseName, []byte(`{}`), "some-version"); !errors.Is(err, committer.ErrPrecondition) {
		t.Fatalf("swap on missing: %v, want ErrPrecondition", err)
	}
	if _, _, err := l.ReadLease(ctx, leaseName); !errors.Is(err, committer.ErrNotFound) {
		t.Fatalf("a refused swap created the lease: %v", err)
	}
}

func testLeaseConcurrent(t *testing.T, l committer.Leaser) {
	v0, err := l.WriteLease(t.Context(), leaseName, []byte(`{"round":0}`), "")
	if err != nil {
		t.Fatal(err)
	}
	oneWriterWins(t, l, v0, committer.ErrPrecondition, "swaps from one version")
}

func testLeaseConcurrentCreate(t *testing.T, l committer.Leaser) {
	oneWriterWins(t, l, "", committer.ErrExists, "creates")
}

// oneWriterWins runs 8 lease writes over version at once: exactly one
// must succeed, every other must fail with lost.
func oneWriterWins(t *testing.T, l committer.Leaser, version string, lost error, what string) {
	t.Helper()
	ctx := t.Context()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = l.WriteLease(ctx, leaseName, fmt.Appendf(nil, `{"writer":%d}`, i), version)
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, lost):
			t.Errorf("writer %d: %v, want nil or %v", i, err, lost)
		}
	}
	if won != 1 {
		t.Fatalf("%d %s succeeded, want exactly 1 (%v)", won, what, errs)
	}
}
