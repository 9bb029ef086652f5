package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestInitCutNotFenced: the service takes an Init (it bumps the epoch,
// durably, before the barrier) but the caller's ctx ends before the
// answer arrives. The newer epoch the service then holds is the client's
// own, not another writer's: the client must not fence itself (ErrFenced
// drops the batches it keeps, which the application was told to leave to
// it). Its next call, a Flush (which reads the state) or a Send (answered
// producer_fenced), goes on, and the kept batch lands once.
//
// Found by reading the client while hunting a flake of ./client; the
// client model's cut Inits (reinit with a 1-20 ms ctx) reach it on most
// seeds. Send's own re-init (the service lost confirmed batches) runs
// under the caller's ctx too.
// Failed before: "flush: producer fenced by a newer epoch" and "send s
// seq 1: 409 producer_fenced".
func TestInitCutNotFenced(t *testing.T) {
	for _, next := range []string{"flush", "send"} {
		t.Run(next, func(t *testing.T) {
			r := newRig(t, 0).start()
			c := r.initClient("p")
			want := sendBatches(t, c, "s", 1) // kept, not committed

			ictx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
				if req.Method != http.MethodPost || req.URL.Path != "/v1/producers/p/init" {
					return false
				}
				r.intercept(nil)
				next.ServeHTTP(httptest.NewRecorder(), req) // taken: epoch bumped
				cancel()                                    // the caller gives up before the answer
				<-req.Context().Done()
				return true
			})
			if _, err := c.Init(ictx); !errors.Is(err, context.Canceled) {
				t.Fatalf("init cut by its ctx: %v", err)
			}
			if next == "flush" {
				r.checkpoint()
				if err := c.Flush(ctx(t)); err != nil {
					t.Fatalf("flush after an Init cut by its ctx: %v", err)
				}
			}
			recs, keys := records("after", 1)
			if _, err := c.Send(ctx(t), "s", recs); err != nil {
				t.Fatalf("send after an Init cut by its ctx: %v", err)
			}
			want = append(want, keys...)
			r.checkpoint()
			flush(t, c)
			if st := c.Stats(); st.Batches != 0 {
				t.Fatalf("kept after flush: %+v", st)
			}
			r.expectOnce("s", want)
		})
	}
}
