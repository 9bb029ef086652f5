package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/tableplant"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// TestParkedTableAnswers: through the API, a table stream whose table
// commit fails for good (a version planted in its table that claims the
// table's uuid and does not parse) is parked: a write to it is answered
// 429 backpressure with Retry-After, a write to another table stream
// waiting for its commit (?wait=commit) 200, and /readyz 200. Once the
// planted version is gone, the parked stream's writes are accepted
// again. Failed before parking: the checkpoint holding both streams'
// files stayed stuck, so the wait=commit write timed out (503) and
// /readyz answered 503 (a permanent stuck commit).
func TestParkedTableAnswers(t *testing.T) {
	r := newRig(t, rigOpts{
		// RetryMax: the parked loop's pace, and so the 429's Retry-After.
		engine: func(c *server.Config) {
			c.TableLocation = "file://" + enginetest.Dest
			c.RetryMax = 2500 * time.Millisecond
		},
		api: func(c *Config) { c.WaitTimeout = 5 * time.Second },
	})
	conf := streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg,
		Partition: "k={field:k}", Schema: &streamconf.Schema{Fields: []streamconf.Field{{Name: "k", Type: streamconf.TypeString, Required: true}}}}
	for _, s := range []string{"ta", "tb"} {
		if _, err := r.eng.PutStream(context.Background(), s, conf); err != nil {
			t.Fatal(err)
		}
	}
	write := func(stream, query string) int {
		t.Helper()
		return r.do("POST", "/v1/streams/"+stream+"/records"+query, `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson").Code
	}
	for _, s := range []string{"ta", "tb"} {
		if c := write(s, ""); c != http.StatusAccepted {
			t.Fatalf("write to %s: %d", s, c)
		}
	}
	r.checkpoint()
	// Plant ta's v2: its v1 claiming a format version eosink can't read.
	b, err := afero.ReadFile(r.base, enginetest.Dest+"/"+layout.TableMetadataName("ta", 1))
	if err != nil {
		t.Fatal(err)
	}
	planted := enginetest.Dest + "/" + layout.TableMetadataName("ta", 2)
	if err := afero.WriteFile(r.base, planted, tableplant.Claiming(t, b), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ta", "tb"} {
		if c := write(s, ""); c != http.StatusAccepted {
			t.Fatalf("write to %s: %d", s, c)
		}
	}
	// The checkpoint holding both streams' files commits (within 5 s:
	// before parking it stayed stuck).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := r.eng.Checkpoint(ctx)
	cancel()
	if err != nil || res.State != "committed" {
		t.Fatalf("checkpoint with ta's table commit failing for good: %+v, %v (stuck %q)", res, err, r.eng.Status().Stuck)
	}
	rec := r.do("POST", "/v1/streams/ta/records", `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson")
	expectError(t, rec, http.StatusTooManyRequests, CodeBackpressure)
	if got := rec.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("429 with Retry-After %q, want 3 (the parked loop's 2.5 s, rounded up; not sooner)", got)
	}
	waitCommit(t, r, "tb", "while ta is parked")
	expectStatus(t, r.do("GET", "/readyz", ""), http.StatusOK)
	if err := r.base.Remove(planted); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.eng.Status().TablesParked != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still parked: %s", r.eng.Status().TableParked)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitCommit(t, r, "ta", "once unparked")
}

// waitCommit writes a batch to stream with ?wait=commit, runs a
// checkpoint once it is in, and expects 200.
func waitCommit(t *testing.T, r *rig, stream, when string) {
	t.Helper()
	code := make(chan int, 1)
	go func() {
		code <- r.do("POST", "/v1/streams/"+stream+"/records?wait=commit", `{"k":"x"}`+"\n", "Content-Type", "application/x-ndjson").Code
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.eng.Status().OpenRecords == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the write never reached the engine")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _, _ = r.eng.Checkpoint(ctx) }()
	if c := <-code; c != http.StatusOK {
		t.Fatalf("write to %s with wait=commit %s: %d, want 200", stream, when, c)
	}
}
