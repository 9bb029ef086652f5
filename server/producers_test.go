package server

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestProducerExpiry: a producer idle beyond the expiry with nothing
// uncommitted is forgotten (writes get unknown_producer, also after a
// restart, and a new init starts it afresh); one with uncommitted batches
// is kept until they commit.
func TestProducerExpiry(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newRig(t, nil)
	var expired int
	r.tweak = func(c *Config) {
		c.Now, c.ProducerExpiry = clock, time.Hour
		c.Hooks.ProducersExpired = func(n int) { expired += n }
	}
	e := r.start(nil)
	for _, id := range []string{"idle", "busy"} {
		if _, err := e.InitProducer(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	mustSend(t, e, &Producer{ID: "busy"}, "clicks", 0, 2)
	if n, err := e.ExpireProducers(now.Add(30 * time.Minute)); err != nil || n != 0 {
		t.Fatalf("expired %d before the expiry: %v", n, err)
	}
	n, err := e.ExpireProducers(now.Add(2 * time.Hour))
	if err != nil || n != 1 || expired != 1 {
		t.Fatalf("expired %d (hook %d), want 1 (the idle one): %v", n, expired, err)
	}
	if _, err := send(e, &Producer{ID: "idle"}, "clicks", 0, 1); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("write of an expired producer: %v, want unknown producer", err)
	}
	if _, err := send(e, &Producer{ID: "busy"}, "clicks", 1, 1); err != nil {
		t.Fatalf("the busy producer was expired: %v", err)
	}
	if got := e.ProducerCount(); got != 1 {
		t.Fatalf("count %d, want 1", got)
	}
	mu.Lock()
	now = now.Add(3 * time.Hour) // the checkpoint's barrier is its activity
	mu.Unlock()
	r.checkpoint()
	if n, err := e.ExpireProducers(now.Add(30 * time.Minute)); err != nil || n != 0 {
		t.Fatalf("expired %d within the expiry of its last checkpoint: %v", n, err)
	}
	if n, err := e.ExpireProducers(now.Add(2 * time.Hour)); err != nil || n != 1 {
		t.Fatalf("expired %d once committed and idle, want 1: %v", n, err)
	}
	r.stop()
	e = r.start(nil)
	if _, err := send(e, &Producer{ID: "busy"}, "clicks", 2, 1); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("an expired producer came back after a restart: %v", err)
	}
	ps, err := e.InitProducer(t.Context(), "busy")
	// Above its forgotten epoch (0), so a zombie of that incarnation is fenced.
	if err != nil || ps.Epoch != 1 || len(ps.Streams) != 0 {
		t.Fatalf("init after expiry: %+v %v, want epoch 1 and no streams", ps, err)
	}
	if _, err := send(e, &Producer{ID: "busy", Epoch: 0}, "clicks", 0, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("a zombie of the expired incarnation (epoch 0) after the new init: %v, want fenced", err)
	}
	if e.ProducerCount() != 1 {
		t.Fatalf("count after restart and init: %d", e.ProducerCount())
	}
}

// TestDeleteProducer: unknown, busy while uncommitted, forgotten once
// committed.
func TestDeleteProducer(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	if err := e.DeleteProducer(t.Context(), "nobody"); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("delete unknown: %v", err)
	}
	if _, err := e.InitProducer(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, &Producer{ID: "p"}, "clicks", 0, 1)
	if err := e.DeleteProducer(t.Context(), "p"); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("delete with an uncommitted batch: %v", err)
	}
	r.checkpoint()
	if err := e.DeleteProducer(t.Context(), "p"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, ok := e.Producer("p"); ok {
		t.Fatal("still known")
	}
	if ps, _, err := e.ProducersPage("", 10); err != nil || len(ps) != 0 {
		t.Fatalf("still stored: %+v %v", ps, err)
	}
}

// TestProducersPagination: pages return every producer exactly once while
// writes, inits and checkpoints go on.
func TestProducersPagination(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	const n = 60
	for i := range n {
		if _, err := e.InitProducer(t.Context(), fmt.Sprintf("p%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := int64(0); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			for i := range n {
				if _, err := send(e, &Producer{ID: fmt.Sprintf("p%03d", i)}, "clicks", seq, 1); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
			if _, err := e.Checkpoint(t.Context()); err != nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
		}
	}()
	for round := range 5 {
		seen := map[string]int{}
		after := ""
		for pages := 0; ; pages++ {
			ps, next, err := e.ProducersPage(after, 7)
			if err != nil || len(ps) > 7 || pages > n {
				t.Fatalf("page after %q: %d %v", after, len(ps), err)
			}
			for _, p := range ps {
				seen[p.ID]++
			}
			if next == "" {
				break
			}
			after = next
		}
		if len(seen) != n {
			t.Fatalf("round %d: saw %d producers, want %d", round, len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("round %d: %s seen %d times", round, id, c)
			}
		}
	}
	close(stop)
	wg.Wait()
	if ps, _, _ := e.ProducersPage("", 1); len(ps) != 1 || ps[0].Streams["clicks"].CommittedSeq < 0 {
		t.Fatalf("first page: %+v", ps)
	}
}

// TestStartLoadsNoProducer: a start reads no producer (its time must not
// grow with the producers kept, issue 12); each is loaded on first use and
// then behaves as before the restart: a committed batch resent is a
// duplicate naming the checkpoint that committed it, the next one is
// accepted, an older epoch is fenced, and the count covers them all.
func TestStartLoadsNoProducer(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	var epochs []int64
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		if _, err := e.InitProducer(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		st, err := e.InitProducer(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, st.Epoch)
		mustSend(t, e, &Producer{ID: id, Epoch: st.Epoch}, "clicks", 0, 1)
	}
	done := r.checkpoint()
	r.stop()

	e = r.start(nil)
	e.ing.mu.Lock()
	loaded := len(e.ing.prods.m)
	e.ing.mu.Unlock()
	if loaded != 0 {
		t.Fatalf("%d producers loaded at start, want 0", loaded)
	}
	if got := e.ProducerCount(); got != 3 {
		t.Fatalf("count %d after a start, want 3", got)
	}
	res, err := send(e, &Producer{ID: "p0", Epoch: epochs[0]}, "clicks", 0, 1)
	if err != nil || !res.Duplicate || !res.Committed || res.Checkpoint != done.ID || res.NextSeq != 1 {
		t.Fatalf("resent committed batch: %+v %v, want a committed duplicate in %d", res, err, done.ID)
	}
	if _, err := send(e, &Producer{ID: "p0", Epoch: epochs[0]}, "clicks", 1, 1); err != nil {
		t.Fatalf("next batch: %v", err)
	}
	if _, err := send(e, &Producer{ID: "p1", Epoch: epochs[1] - 1}, "clicks", 1, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("older epoch: %v, want fenced", err)
	}
	if _, err := send(e, &Producer{ID: "p1", Epoch: epochs[1]}, "clicks", 2, 1); err == nil {
		t.Fatal("a gap was accepted")
	} else if next, ok := isSeqErr(err); !ok || next != 1 {
		t.Fatalf("gap: %v, want expected 1", err)
	}
	if _, err := send(e, &Producer{ID: "nobody"}, "clicks", 0, 1); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("unknown producer: %v", err)
	}
	if st, ok := e.Producer("p2"); !ok || st.Streams["clicks"].NextSeq != 1 || st.Streams["clicks"].CommittedSeq != 0 {
		t.Fatalf("producer p2 (not loaded): %+v %v", st, ok)
	}
	if err := e.DeleteProducer(t.Context(), "p2"); err != nil {
		t.Fatalf("delete a producer not loaded: %v", err)
	}
	if got := e.ProducerCount(); got != 2 {
		t.Fatalf("count %d after a delete, want 2", got)
	}
	if err := e.DeleteProducer(t.Context(), "p2"); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("delete again: %v, want unknown producer", err)
	}
	if res := r.checkpoint(); res.State != "committed" {
		t.Fatalf("checkpoint after the start: %+v", res)
	}
}

// One producer row that does not decode (bit rot, a bad restore) must not
// stop the engine: that producer's calls answer ErrProducerDamaged, every
// other producer is served. Before, its init stopped the whole engine
// (ErrCorrupt → fail), so the client's retries drove a crash loop.
func TestProducerDamagedRowServesTheRest(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	for _, id := range []string{"bad", "good"} {
		st, err := e.InitProducer(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		mustSend(t, e, &Producer{ID: id, Epoch: st.Epoch}, "s", 0, 1)
	}
	r.commit()
	r.stop()
	db, err := bolt.Open(r.storePath, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("producers")).Put([]byte("bad"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	e = r.start(nil)
	if _, err := e.InitProducer(t.Context(), "bad"); !errors.Is(err, ErrProducerDamaged) {
		t.Fatalf("init of the damaged producer: %v, want ErrProducerDamaged", err)
	}
	if _, err := send(e, &Producer{ID: "bad", Epoch: 2}, "s", 1, 1); !errors.Is(err, ErrProducerDamaged) {
		t.Fatalf("write of the damaged producer: %v, want ErrProducerDamaged", err)
	}
	if err := e.DeleteProducer(t.Context(), "bad"); !errors.Is(err, ErrProducerDamaged) {
		t.Fatalf("delete of the damaged producer: %v, want ErrProducerDamaged", err)
	}
	if err := e.Err(); err != nil {
		t.Fatalf("the engine stopped for one damaged producer: %v", err)
	}
	st, err := e.InitProducer(t.Context(), "good")
	if err != nil {
		t.Fatalf("init of another producer: %v", err)
	}
	if s := st.Streams["s"]; s.CommittedSeq != 0 || s.NextSeq != 1 {
		t.Fatalf("the other producer after the restart: %+v", st)
	}
	mustSend(t, e, &Producer{ID: "good", Epoch: st.Epoch}, "s", 1, 1)
	r.commit()
	ps, _, err := e.ProducersPage("", 10)
	if err != nil || len(ps) != 1 || ps[0].ID != "good" {
		t.Fatalf("producer list: %+v %v, want the undamaged one", ps, err)
	}
	if n, err := e.ExpireProducers(e.cfg.Now().Add(1000 * DefaultProducerExpiry)); err != nil || n != 1 {
		t.Fatalf("expiry past a damaged producer: forgot %d, %v; want the other one", n, err)
	}
}
