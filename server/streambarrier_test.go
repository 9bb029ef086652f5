package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
)

// byK partitions by a field invariant's test records lack: a batch
// accepted without it can't be accepted again under this configuration.
var byK = streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"}

// kRecord is test record (producer p, stream s, seq) with the field k.
func kRecord(p, s string, seq int64) []byte {
	return fmt.Appendf(nil, `{"p":%q,"s":%q,"q":%d,"i":0,"n":1,"k":"x"}`+"\n", p, s, seq)
}

// TestStreamPutActiveAtOnce: with --checkpoint-interval 0 a PUT is in
// force for the next write, without a checkpoint: its partition field is
// required at once. Before, the configuration waited for a barrier that
// nothing would run.
func TestStreamPutActiveAtOnce(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	info, err := e.PutStream(t.Context(), "ev", byK)
	if err != nil {
		t.Fatal(err)
	}
	if info.ActiveVersion != 1 || info.Config.Version != 1 {
		t.Fatalf("PUT answered %+v, want version 1 active", info)
	}
	if _, err := send(e, nil, "ev", 1, 1); !errors.Is(err, layout.ErrInvalidPartition) {
		t.Fatalf("a write without the new partition field after the PUT: %v, want ErrInvalidPartition", err)
	}
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: kRecord("", "ev", 2), Records: 1}); err != nil {
		t.Fatal(err)
	}
	res := r.checkpoint()
	if len(res.Files) != 1 || !strings.HasPrefix(res.Files[0].Final, "ev/k=x/") || res.Files[0].SchemaVersion != 1 {
		t.Fatalf("files %+v, want one under ev/k=x/ of version 1", res.Files)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "ev", Seq: 2}: true}, Exact: true})
}

// TestStreamPutIsABarrier: a PUT answers only once every batch accepted
// under the old configuration is prepared, so a crash right after it
// loses none of them: after the restart the batch is committed (under the
// old configuration), init answers next_seq past it, and the producer
// goes on under the new one. Before, the batch was lost in the crash and
// its resend, judged by the new configuration, was refused for good (a gap
// in the producer's sequence, I12).
func TestStreamPutIsABarrier(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := &Producer{ID: "p"}
	if _, err := e.InitProducer(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, p, "ev", 0, 2)
	if _, err := e.PutStream(t.Context(), "ev", byK); err != nil {
		t.Fatal(err)
	}
	r.stop() // a crash right after the answer
	e = r.start(nil)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "ev", Seq: 0}: true}, Exact: true}
	r.check(exp)
	st := r.initState("p")
	if got := st.Streams["ev"]; got.NextSeq != 1 || got.CommittedSeq != 0 {
		t.Fatalf("init after the crash: %+v, want next_seq 1, committed_seq 0", got)
	}
	// The resend of seq 0 (a client that did not see its answer) is a
	// duplicate, not judged by the new configuration.
	if res, err := send(e, &Producer{ID: "p", Epoch: st.Epoch}, "ev", 0, 2); err != nil || !res.Duplicate || !res.Committed {
		t.Fatalf("resend of seq 0: %+v %v, want a committed duplicate", res, err)
	}
	res, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: kRecord("p", "ev", 1), Records: 1,
		Producer: &Producer{ID: "p", Epoch: st.Epoch, Seq: 1}})
	if err != nil || res.NextSeq != 2 {
		t.Fatalf("seq 1 under the new configuration: %+v %v", res, err)
	}
	c := r.checkpoint()
	if c.State != recovery.Committed || len(c.Files) != 1 || !strings.HasPrefix(c.Files[0].Final, "ev/k=x/") {
		t.Fatalf("checkpoint %+v, want one file under ev/k=x/", c)
	}
	exp.Must[invariant.BatchID{Producer: "p", Stream: "ev", Seq: 1}] = true
	r.check(exp)
}

// TestStreamPutBarrierBounded: a PUT whose barrier can't end (the commit
// before it stuck in an outage) refuses the stream's writes while it
// waits, returns the context's error and changes nothing; writes of the
// stream then go on under the old configuration; a PUT after the outage
// takes effect.
func TestStreamPutBarrierBounded(t *testing.T) {
	var sc *committertest.Stuck
	r := newRig(t, nil)
	r.tweak = func(c *Config) { sc = &committertest.Stuck{Committer: c.Committer}; c.Committer = sc }
	e := r.start(nil)
	mustSend(t, e, nil, "ev", 1, 1)
	sc.On.Store(true)
	done := make(chan CheckpointResult, 1)
	go func() { res, _ := e.Checkpoint(context.Background()); done <- res }()
	waitStuck(t, e)
	mustSend(t, e, nil, "ev", 2, 1)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "ev", Seq: 1}: true, {Stream: "ev", Seq: 2}: true, {Stream: "ev", Seq: 3}: true}, Exact: true}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	put := make(chan error, 1)
	go func() { _, err := e.PutStream(ctx, "ev", byK); put <- err }()
	// While the PUT waits, the stream's writes are refused (they would be
	// accepted under the old configuration); other streams' are not.
	for seq := int64(100); ; seq++ {
		_, err := send(e, nil, "ev", seq, 1)
		if errors.Is(err, ErrBackpressure) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		exp.Must[invariant.BatchID{Stream: "ev", Seq: seq}] = true // before the PUT began
		time.Sleep(time.Millisecond)
	}
	if _, err := send(e, nil, "other", 1, 1); err != nil {
		t.Fatalf("another stream's write during the PUT: %v", err)
	}
	exp.Must[invariant.BatchID{Stream: "other", Seq: 1}] = true
	if err := <-put; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PUT during the outage: %v, want the deadline", err)
	}
	if info := e.Stream("ev"); info.Configured || info.ActiveVersion != 0 {
		t.Fatalf("after a PUT that timed out: %+v, want nothing changed", info)
	}
	if _, err := send(e, nil, "ev", 3, 1); err != nil {
		t.Fatalf("a write under the old configuration after the PUT timed out: %v", err)
	}
	sc.On.Store(false)
	<-done
	if _, err := e.PutStream(t.Context(), "ev", byK); err != nil {
		t.Fatal(err)
	}
	if _, err := send(e, nil, "ev", 4, 1); !errors.Is(err, layout.ErrInvalidPartition) {
		t.Fatalf("a write after the PUT: %v, want ErrInvalidPartition", err)
	}
	r.checkpoint()
	r.check(exp)
}
