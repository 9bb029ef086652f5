package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
)

// TestStaleStateReadNewerEpochNotFenced: a state read answered before
// the service lost the producer's epoch (its state store lost: rebuilt
// from the manifests, it knows the epoch of the producer's last commit,
// not the Inits after it) is delivered after the client's Init took the lower epoch the service
// now hands out. The read's epoch is newer than the client's, but the
// read is stale (an Init answered since it was sent): nothing in it is
// believed, fencing included. Before, the client took itself for fenced
// for good (ErrFenced, every later call refused: I12), as
// TestClientModel found with EOSINK_CLIENT_MODEL_SEED=502 and 504
// (EOSINK_CLIENT_MODEL_STEPS=2000): "held state read of p1: producer
// fenced by a newer epoch".
func TestStaleStateReadNewerEpochNotFenced(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	recs, _ := records("w0", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint() // committed at the first epoch
	flush(t, c)
	for range 2 { // epochs only the state store knows
		if _, err := c.Init(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	old, err := c.State(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// The read is answered now and delivered once released.
	answered, let, read := holdStateRead(t, r, c, true)
	<-answered
	r.er.StorePath = filepath.Join(t.TempDir(), "state-lost.db")
	r.crash()
	r.er.WaitReady()
	st, err := c.Init(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch >= old.Epoch {
		t.Fatalf("epoch after the store's loss %d, before %d: the test needs a lower one", st.Epoch, old.Epoch)
	}
	let()
	if err := <-read; errors.Is(err, client.ErrFenced) {
		t.Fatalf("stale state read (epoch %d, read before the Init that took %d): %v", old.Epoch, st.Epoch, err)
	}
	recs, _ = records("w1", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatalf("send after the stale read: %v", err)
	}
	r.checkpoint()
	flush(t, c)
}

// holdStateRead has c read producer p's state, held at the service until
// let is called: answered there first and then held (answerFirst), or
// held and then answered. reached is closed once the read is held; read
// gets State's error.
func holdStateRead(t *testing.T, r *rig, c *client.Client, answerFirst bool) (reached <-chan struct{}, let func(), read <-chan error) {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let = func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Method != http.MethodGet || req.URL.Path != "/v1/producers/p" {
			return false
		}
		r.intercept(nil)
		if !answerFirst {
			close(held)
			<-release
			next.ServeHTTP(w, req)
			return true
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, req)
		close(held)
		<-release
		copyAnswer(w, rec)
		return true
	})
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := c.State(ctx)
		errc <- err
	}()
	return held, let, errc
}

// TestStaleStateReadSameEpochAfterForget: a state read answered before
// the service lost its store and an admin deleted the producer is
// delivered after the client's Init that followed, which took the same
// epoch number as the read (the rebuilt store's epoch floor is lower, the
// DELETE raises it back to the read's epoch). The read is stale (an Init
// answered since it was sent) although its epoch is the client's: its
// committed_seq counts the forgotten incarnation's batches. Believed, it
// set the stream's committed to 0 while the new incarnation's seq 0 was
// not yet sent, and Flush then returned nil with that batch kept, never
// seen committed, as TestClientModel found with
// EOSINK_CLIENT_MODEL_SEED=701 and 702 (EOSINK_CLIENT_MODEL_STEPS=2000):
// "flush p0 returned nil with {Batches:1 ...} kept".
func TestStaleStateReadSameEpochAfterForget(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	recs, want := records("a0", 1)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	for range 2 { // epochs only the state store knows
		if _, err := c.Init(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	answered, let, read := holdStateRead(t, r, c, true)
	<-answered
	old := c.Epoch() // the read's epoch, its committed_seq 0
	r.er.StorePath = filepath.Join(t.TempDir(), "state-lost.db")
	r.crash()
	r.er.WaitReady()
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, r.ts.URL+"/v1/producers/p", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE producer: %v %v", resp, err)
	}
	resp.Body.Close()
	st, err := c.Init(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != old || len(st.Streams) != 0 {
		t.Fatalf("init after the DELETE: %+v; the test needs epoch %d again, no streams", st, old)
	}
	let()
	if err := <-read; err != nil {
		t.Fatalf("stale state read: %v", err)
	}
	recs, keys := records("b0", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	if st := c.Stats(); st.Batches != 0 {
		t.Fatalf("flush returned nil with %+v kept", st)
	}
	r.expectOnce("s", want)
}
