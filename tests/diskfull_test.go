package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// mountTmpfs mounts a tmpfs of size at a new directory and unmounts it at
// cleanup (registered first, so it runs after the service is stopped).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (mount -t tmpfs); CI runs the tests as root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount -t tmpfs -o size=%s: %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", name, err)
			}
			return name
		}
	}
}

// TestDiskFull runs the service with its whole data directory (state store,
// staging, destination) on a 4 MiB tmpfs, fills it, and checks that eosink
// answers 507 and says why on /readyz instead of exiting, and that once
// space is back everything sent is committed exactly once. It also checks
// that an idle service writes nothing.
func TestDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "4m")
	data := filepath.Join(mnt, "data")
	p := newProc(t, workDir(t), procConfig{DataDir: data, Args: []string{"--checkpoint-interval", "50ms", "--node", "e2e"}})
	p.StartReady()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Idle: 10 periodic checkpoints with nothing to commit write nothing.
	store := filepath.Join(data, "state.db")
	before, err := os.Stat(store)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if after, err := os.Stat(store); err != nil || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Fatalf("idle service wrote its state store: %v -> %v (%v)", before.ModTime(), after.ModTime(), err)
	}

	const stream = "full"
	prod := mustRawProducer(ctx, t, p.URL, "dfull")
	var mu sync.Mutex
	statuses := map[string]int{}
	prod.Observe = func(a answer) {
		mu.Lock()
		statuses[fmt.Sprintf("%d %s", a.Status, a.Code)]++
		mu.Unlock()
	}
	want := map[batchKey]int{}
	rng, _ := testRand(t)
	body := func(seq int64, n, pad int) []byte {
		k := batchKey{P: prod.ID(), S: stream, Q: seq}
		recs := makeRecords(rng, k, n, pad)
		want[k] = len(recs)
		return ndjson(recs)
	}
	for seq := range int64(5) {
		if _, err := prod.SendBody(ctx, stream, seq, body(seq, 3, 32), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	filler := fill(t, mnt)
	t.Logf("filled %s", mnt)

	// The state store: inits of new producers need room sooner or later.
	full := 0
	for i := 0; i < 2000 && full == 0; i++ {
		err := p.call(ctx, http.MethodPost, fmt.Sprintf("/v1/producers/fill-%04d/init", i), nil, nil)
		var he *httpError
		switch {
		case err == nil:
		case errors.As(err, &he) && he.Status == http.StatusInsufficientStorage && he.Body.Error == "insufficient_storage":
			full++
		default:
			t.Fatalf("init %d on a full disk: %v; log %s:\n%s", i, err, p.LogPath, p.logTail(20))
		}
	}
	if full == 0 {
		t.Fatal("2000 inits on a full disk: never 507")
	}
	// Staging: a batch larger than the staging buffer (256 KiB; this one
	// is about 400 KB) is written at once.
	big := prod.post(ctx, stream, &rawBatch{seq: prod.Next(stream), body: ndjson(makeRecords(rng, batchKey{P: prod.ID(), S: stream, Q: -1}, 8000, 0))}, 0, false)
	if big.Status != http.StatusInsufficientStorage || big.Code != "insufficient_storage" {
		t.Fatalf("large write on a full disk: %d %s %v", big.Status, big.Code, big.Err)
	}
	// /readyz says why.
	err = p.call(ctx, http.MethodGet, "/readyz", nil, nil)
	var he *httpError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || he.Body.Error != "insufficient_storage" ||
		!strings.Contains(he.Body.Message, "no space left on device") {
		t.Fatalf("/readyz on a full disk: %v", err)
	}
	// Writes go on being refused or aborted (and resent) while it lasts;
	// the service stays up.
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for seq := int64(5); seq < 25; seq++ {
			if _, err := prod.SendBody(ctx, stream, seq, body(seq, 5, 200), false); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	time.Sleep(time.Second)
	if !p.Running() {
		t.Fatalf("eosink exited on a full disk (%s); log %s:\n%s", p.exitStatus(), p.LogPath, p.logTail(30))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t.Logf("removed the filler; %d batches confirmed meanwhile", sent.Load())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, why := p.Ready(ctx); !ok {
		t.Fatalf("/readyz once space is back: %s", why)
	}
	if !p.Running() {
		t.Fatalf("eosink exited (%s)", p.exitStatus())
	}
	mu.Lock()
	sj, _ := json.Marshal(statuses)
	mu.Unlock()
	t.Logf("write answers: %s; %d inits answered 507", sj, full)
	if code := p.Term(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	requireDest(t, invariant.LocalDest(filepath.Join(data, "files")), want, true)
}
