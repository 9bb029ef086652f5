package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestStaleStateAfterReinit: a producer state read before the producer
// was forgotten (an admin's DELETE) and the client's Init that followed,
// answered after both, must not drop the batches the client sent since:
// its committed_seq counts the forgotten incarnation's batches, not the
// new ones that reuse their numbers. Failed before: the stale state
// dropped batch 0 of the new incarnation from the client's memory
// (kept 0 batches), and after a crash it was never resent (record
// new0-0 committed 0 times).
func TestStaleStateAfterReinit(t *testing.T) {
	r := newRig(t, 0).start()
	c := r.initClient("p")
	var want []string
	for i := range 3 {
		recs, keys := records(fmt.Sprintf("old%d", i), 2)
		want = append(want, keys...)
		if _, err := c.Send(ctx(t), "s", recs); err != nil {
			t.Fatal(err)
		}
	}
	r.checkpoint()
	flush(t, c)
	// The next GET of the producer is answered now but delivered late.
	held, release := make(chan struct{}), make(chan struct{})
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Method != http.MethodGet || req.URL.Path != "/v1/producers/p" {
			return false
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, req)
		r.intercept(nil)
		close(held)
		<-release
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	stale := make(chan error, 1)
	go func() { _, err := c.State(ctx(t)); stale <- err }()
	<-held
	req, _ := http.NewRequest(http.MethodDelete, r.ts.URL+"/v1/producers/p", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE producer: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := c.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	recs, keys := records("new0", 1)
	want = append(want, keys...)
	res, err := c.Send(ctx(t), "s", recs)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-stale:
		if err != nil {
			t.Fatalf("the stale State: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("State never returned")
	}
	if st := c.Stats(); st.Batches != 1 {
		t.Errorf("kept after the stale state: %+v, want the uncommitted batch %d kept", st, res.Seq)
	}
	// The service loses the uncommitted batch; the client's next batch
	// finds out, and the kept one is resent before it.
	r.crash()
	recs, keys = records("new1", 1)
	want = append(want, keys...)
	if _, err := c.Send(ctx(t), "s", recs); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	flush(t, c)
	r.expectOnce("s", want)
}
