package server

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
)

// TestLeaseRenewFailedSyncStops: a failed fsync while the lease is
// renewed in the background stops the engine, as it does on the live
// path and in the replay (I14: one policy, the same in every background
// loop). Failed before: the renewal loop logged "renew node lease
// failed; retrying" for every error but a lost lease, and wrote the
// lease again after the failed fsync.
func TestLeaseRenewFailedSyncStops(t *testing.T) {
	base := faultfs.NewCrashFS()
	var sw faultfs.SwapInjector
	fs := faultfs.NewInjectFS(base, &sw)
	r := leaseRig(t, fs, 300*time.Millisecond, nil)
	e := r.start(nil)
	leaseTmp := strings.ReplaceAll(layout.LeaseName(rigNode), "/", "_")
	var syncs atomic.Int64
	sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpSync && strings.Contains(op.Path, leaseTmp) {
			syncs.Add(1)
			return syscall.EIO
		}
		return nil
	}))
	if !waitFailed(t, e, 5*time.Second) {
		t.Fatalf("engine went on after a failed fsync of its lease (%d failed); status %+v", syncs.Load(), e.Status())
	}
	if !errors.Is(e.Err(), durable.ErrSync) {
		t.Fatalf("engine error %v, want ErrSync", e.Err())
	}
	if n := syncs.Load(); n != 1 {
		t.Fatalf("%d lease fsyncs failed, want 1: a failed fsync is not retried", n)
	}
	sw.Set(nil)
	r.broken = "stopped by a fault"
}
