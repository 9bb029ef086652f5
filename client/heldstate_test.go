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
