package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/server"
)

// TestSendKeyed: answers lost after the service took the batch, a crash
// before its checkpoint and an aborted wait are all retried under the same
// key, and every batch is committed exactly once; another batch under a
// used key is ErrKeyReused.
func TestSendKeyed(t *testing.T) {
	r := newRig(t, 0)
	r.engine = func(c *server.Config) { c.CommitLinger = time.Millisecond }
	r.start()
	c, err := client.New(r.ts.URL, client.WithRetry(client.Retry{Min: time.Millisecond, Max: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Int64
	r.intercept(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		if req.Header.Get("Idempotency-Key") == "" || lost.Load() >= 3 {
			return false
		}
		lost.Add(1)
		next.ServeHTTP(httptest.NewRecorder(), req) // the service takes it; the answer is lost
		hijackClose(w)
		return true
	})
	var want []string
	recs, keys := records("a", 3)
	want = append(want, keys...)
	res, err := c.SendKeyed(ctx(t), "s", "batch-a", recs)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate {
		t.Fatalf("retry after a lost answer: %+v, want a duplicate", res)
	}
	r.intercept(nil)

	// Accepted, then lost in a crash before any checkpoint: SendKeyedWait's
	// retry is accepted anew and committed once.
	recs, keys = records("b", 2)
	want = append(want, keys...)
	if _, err := c.SendKeyed(ctx(t), "s", "batch-b", recs); err != nil {
		t.Fatal(err)
	}
	r.crash()
	res, err = c.SendKeyedWait(ctx(t), "s", "batch-b", recs)
	if err != nil || !res.Committed {
		t.Fatalf("send after the crash: %+v %v", res, err)
	}
	res, err = c.SendKeyedWait(ctx(t), "s", "batch-b", recs[:1])
	if !errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("other records under a used key: %+v %v, want ErrKeyReused", res, err)
	}
	res, err = c.SendKeyedWait(ctx(t), "s", "batch-b", recs)
	if err != nil || !res.Committed || !res.Duplicate {
		t.Fatalf("batch b again: %+v %v, want a committed duplicate", res, err)
	}
	// Batch a was lost in the crash with its key: sent again, it is new.
	res, err = c.SendKeyedWait(ctx(t), "s", "batch-a", mustRecords("a", 3))
	if err != nil || !res.Committed || res.Duplicate {
		t.Fatalf("batch a after the crash: %+v %v, want committed anew", res, err)
	}
	r.checkpoint()
	r.expectOnce("s", want)
}

func mustRecords(tag string, n int) [][]byte {
	recs, _ := records(tag, n)
	return recs
}

// TestContentKey: the content key names the records, not the call.
func TestContentKey(t *testing.T) {
	a, err := client.ContentKey(mustRecords("x", 2))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := client.ContentKey(mustRecords("x", 2))
	c, _ := client.ContentKey(mustRecords("y", 2))
	if a != b || a == c || len(a) != 64 {
		t.Fatalf("keys %s %s %s", a, b, c)
	}
}
