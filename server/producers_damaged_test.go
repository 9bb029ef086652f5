package server

import (
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
)

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
