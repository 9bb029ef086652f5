package server

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/spf13/afero"
)

// TestMaxOpenFiles: at most MaxOpenFiles transactions (open staging files)
// per checkpoint; the next one is refused with backpressure and starts a
// checkpoint early, after which writes go on. With interval 0 too: the
// limit protects the process, whatever the checkpoint schedule.
func TestMaxOpenFiles(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour} {
		r := newRig(t, nil)
		r.tweak = func(c *Config) { c.MaxOpenFiles = 3; c.CheckpointInterval = interval }
		e := r.start(nil)
		streams := []string{"a", "b", "c", "d", "e"}
		must := map[invariant.BatchID]bool{}
		refused := 0
		for i, s := range streams {
			for {
				_, err := send(e, nil, s, int64(i), 2)
				if err == nil {
					must[invariant.BatchID{Stream: s, Seq: int64(i)}] = true
					break
				}
				if !errors.Is(err, ErrBackpressure) {
					t.Fatalf("interval %v: write to stream %s: %v, want backpressure", interval, s, err)
				}
				if st := e.Status(); st.OpenFiles > 3 {
					t.Fatalf("%d files open, limit 3", st.OpenFiles)
				}
				refused++
				time.Sleep(time.Millisecond)
				if refused > 5000 {
					t.Fatalf("interval %v: stream %s refused for 5 s: no early checkpoint", interval, s)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("interval %v: 5 streams, limit 3, never refused", interval)
		}
		r.commit()
		r.check(invariant.Expect{Must: must, Exact: true})
		r.stop()
	}
}

// TestTooManyOpenFiles: a staging file that cannot be opened for lack of
// file descriptors is backpressure (429), not an internal error.
func TestTooManyOpenFiles(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		base := afero.NewMemMapFs()
		var sw faultfs.SwapInjector
		fs := faultfs.NewInjectFS(base, &sw)
		r := newRig(t, fs)
		e := r.start(nil)
		sw.Set(faultfs.FailNth(0, faultfs.Kinds(faultfs.OpOpen), errno))
		if _, err := send(e, nil, "s", 1, 2); !errors.Is(err, ErrBackpressure) {
			t.Fatalf("%v: write: %v, want backpressure", errno, err)
		}
		sw.Set(nil)
		if _, err := send(e, nil, "s", 2, 2); err != nil {
			t.Fatalf("%v: write after: %v", errno, err)
		}
		r.checkpoint()
		r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 2}: true}, Exact: true})
		r.stop()
	}
}
