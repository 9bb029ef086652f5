package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/faultfs"
	"github.com/eosink/eosink/recovery"
)

// TestModel drives the engine with a seeded random mix of writes from
// several producers and streams — in order, duplicates, gaps, stale and
// future epochs, anonymous batches — checkpoints, injected failures,
// process crashes and power cuts, against a model of what must be
// committed. EOSINK_MODEL_STEPS sets the steps (default 10,000),
// EOSINK_MODEL_SEED replays a seed.
func TestModel(t *testing.T) {
	steps := 10_000
	if v := os.Getenv("EOSINK_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("EOSINK_MODEL_STEPS: %v", err)
		}
		steps = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("EOSINK_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("EOSINK_MODEL_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with EOSINK_MODEL_SEED=%d), %d steps", seed, seed, steps)
	stats := runModel(t, seed, steps)
	t.Logf("model: %s", stats)
	fmt.Printf("model test: seed %d, %d steps: %s\n", seed, steps, stats)
}

type modelStats struct {
	writes, dups, gaps, fenced, future, anon, checkpoints, committed, aborted, injected, crashes, powerCuts, checks int
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d writes, %d duplicates, %d gaps, %d stale epochs, %d future epochs, %d anonymous, %d checkpoints (%d committed, %d aborted), %d injected faults, %d crashes, %d power cuts, %d full checks",
		s.writes, s.dups, s.gaps, s.fenced, s.future, s.anon, s.checkpoints, s.committed, s.aborted, s.injected, s.crashes, s.powerCuts, s.checks)
}

func runModel(t *testing.T, seed uint64, steps int) modelStats {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	base := faultfs.NewCrashFS()
	sw := &swapInjector{}
	inj := faultfs.NewInjectFS(base, sw)
	r := newRig(t, inj)
	hour := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clock := hour
	r.tweak = func(c *Config) {
		c.Parallel = 1 + rng.IntN(3)
		c.Now = func() time.Time { return clock }
		c.RollBytes = 600 // small files: rolls happen
		c.BufferSize = 128
	}
	e := r.start(nil)
	m := newModel()
	producers := []string{"p0", "p1", "p2", "p3"}
	streams := []string{"s0", "s1", "s2"}
	var st modelStats
	var crash *faultfs.CrashAfterInjector
	var trace []string
	note := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf(format, args...))
		if len(trace) > 40 {
			trace = trace[1:]
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format+"\nlast steps:\n  %s", append(append([]any{seed}, args...), strings.Join(trace, "\n  "))...)
	}

	// restart stops the engine as a crash would, optionally power-cuts,
	// starts again and checks I5. A checkpoint whose result the crash hid
	// (pending) is decided by the store: prepared means it committed.
	var pendingID uint64
	var pendingSnap map[[2]string]int64
	restart := func(powerCut bool) {
		r.stop()
		sw.set(nil)
		crash = nil
		if powerCut {
			base = base.CrashClone()
			inj = faultfs.NewInjectFS(base, sw)
			st.powerCuts++
		} else {
			st.crashes++
		}
		r.fs = inj
		e = r.start(nil)
		note("restart power=%v", powerCut)
		if pendingID != 0 {
			c, err := e.Store().Get(pendingID)
			if err == nil && c.State != recovery.Aborted {
				for k, v := range pendingSnap {
					m.prepared[k] = v
				}
			}
			pendingID, pendingSnap = 0, nil
		}
		for k := range m.next {
			m.next[k] = m.prepared[k]
		}
		m.resolveAnon(t, e)
		checkI5(t, m, e, fail)
	}
	fullCheck := func() {
		m.resolveAnon(t, e)
		r.fs = base // the checker reads the disk without faults
		rep := r.checker0(m.expect())
		r.fs = inj
		if err := rep.Err(); err != nil {
			fail("step check: %v", err)
		}
		st.checks++
	}

	for step := range steps {
		if crash != nil && crash.Crashed() || e.Err() != nil {
			restart(rng.IntN(2) == 0)
		}
		p := producers[rng.IntN(len(producers))]
		s := streams[rng.IntN(len(streams))]
		k := [2]string{p, s}
		_, inited := m.epoch[p]
		switch x := rng.IntN(100); {
		case !inited || x < 2: // (re-)init: new epoch, fences the old
			ps, err := e.InitProducer(t.Context(), p)
			if err != nil {
				fail("init %s: %v", p, err)
			}
			if inited && ps.Epoch != m.epoch[p]+1 {
				fail("init %s: epoch %d after %d", p, ps.Epoch, m.epoch[p])
			}
			m.epoch[p] = ps.Epoch
		case x < 60:
			st.writes++
			err := m.write(t, e, p, s, 1+rng.IntN(4))
			note("write %v seq %d: %v", k, m.next[k], err)
		case x < 66: // duplicate
			if m.next[k] == 0 {
				continue
			}
			st.dups++
			seq := rng.Int64N(m.next[k])
			res, err := send(e, &Producer{ID: p, Epoch: m.epoch[p]}, s, seq, 1)
			if err != nil || !res.Duplicate || res.NextSeq != m.next[k] {
				fail("duplicate %v/%d: %+v %v", k, seq, res, err)
			}
			if want := seq < m.prepared[k] && m.prepared[k] > 0; res.Committed && !want {
				fail("duplicate %v/%d reported committed, prepared next is %d", k, seq, m.prepared[k])
			}
		case x < 70: // gap
			st.gaps++
			seq := m.next[k] + 1 + rng.Int64N(3)
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p]}, s, seq, 1)
			if exp, ok := isSeqErr(err); !ok || exp != m.next[k] {
				fail("gap %v/%d: %v, want expected_seq %d", k, seq, err, m.next[k])
			}
		case x < 72: // stale epoch
			if m.epoch[p] == 0 {
				continue
			}
			st.fenced++
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p] - 1}, s, m.next[k], 1)
			if !errors.Is(err, ErrFenced) {
				fail("stale epoch: %v", err)
			}
		case x < 73:
			st.future++
			_, err := send(e, &Producer{ID: p, Epoch: m.epoch[p] + 1}, s, m.next[k], 1)
			if !errors.Is(err, ErrInvalidEpoch) {
				fail("future epoch: %v", err)
			}
		case x < 78:
			st.anon++
			_ = m.writeAnon(e, s)
		case x < 88: // checkpoint
			st.checkpoints++
			id := e.Status().OpenID
			snap := m.snapshot()
			armed := crash // the poller must not read the variable the loop reassigns
			res, err := checkpointUntil(e, func() bool { return armed != nil && armed.Crashed() })
			note("checkpoint %d: %s %v %v", id, res.State, res.Error, err)
			switch {
			case err == nil && res.State == recovery.Committed:
				st.committed++
				m.checkpointed(snap, true)
				m.resolveAnon(t, e)
			case err == nil:
				st.aborted++
				m.checkpointed(snap, false)
				m.resolveAnon(t, e)
			default:
				pendingID, pendingSnap = id, snap
				restart(rng.IntN(2) == 0)
			}
		case x < 92: // inject one failure a few operations ahead
			if crash != nil {
				continue
			}
			st.injected++
			errno := []error{syscall.EIO, syscall.ENOSPC}[rng.IntN(2)]
			kinds := sweepKinds
			if rng.IntN(2) == 0 {
				kinds = faultfs.Kinds([]faultfs.OpKind{faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpOpen, faultfs.OpClose}[rng.IntN(5)])
			}
			if rng.IntN(4) == 0 {
				n := rng.Int64N(8)
				sw.set(faultfs.ShortWriteNth(n, errno))
				note("short write %d", n)
			} else {
				n := rng.Int64N(20)
				sw.set(faultfs.FailNth(n, kinds, errno))
				note("fail %d of %s", n, kinds)
			}
		case x < 94: // a crash a few operations ahead
			if crash != nil {
				continue
			}
			crash = faultfs.CrashAfter(rng.Int64N(40), sweepKinds)
			sw.set(crash)
			note("crash armed")
		case x < 96:
			restart(rng.IntN(2) == 0)
		case x < 97: // the hour turns: new partitions
			clock = clock.Add(time.Hour)
		default:
			if crash == nil {
				fullCheck()
			}
		}
		if step%500 == 499 && crash == nil && e.Err() == nil {
			// Quiesce: a committed checkpoint, then everything must match.
			sw.set(nil)
			res, err := checkpointUntil(e, func() bool { return false })
			if err == nil && res.State == recovery.Committed {
				m.checkpointed(m.snapshot(), true)
				fullCheck()
			}
		}
	}
	// The end: no faults, one last checkpoint, exact check, staging empty.
	restart(false)
	sw.set(nil)
	res := r.checkpoint()
	if res.State != recovery.Committed {
		fail("final checkpoint: %+v", res)
	}
	m.checkpointed(m.snapshot(), true)
	fullCheck()
	return st
}

func checkI5(t *testing.T, m *model, e *Engine, fail func(string, ...any)) {
	t.Helper()
	for k, want := range m.prepared {
		st, ok := e.Producer(k[0])
		if !ok {
			fail("I5: producer %s lost", k[0])
		}
		got, ok := st.Streams[k[1]]
		if !ok {
			got.CommittedSeq = -1
		}
		if got.NextSeq != want || got.CommittedSeq != want-1 {
			fail("I5: %s/%s next %d committed %d, want next %d committed %d", k[0], k[1], got.NextSeq, got.CommittedSeq, want, want-1)
		}
	}
}
