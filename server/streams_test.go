package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/afero"
)

// testSchema fits invariant's test records.
var testSchema = &streamconf.Schema{Fields: []streamconf.Field{
	{Name: "p", Type: streamconf.TypeString},
	{Name: "s", Type: streamconf.TypeString, Required: true},
	{Name: "q", Type: streamconf.TypeInt64, Required: true},
	{Name: "i", Type: streamconf.TypeInt64, Required: true},
	{Name: "n", Type: streamconf.TypeInt64, Required: true},
}}

// Test streams of the exactly-once tests: one zstd NDJSON stream and one
// Parquet stream besides the default ones.
const (
	zstdStream    = "zs"
	parquetStream = "pq"
)

func configureTestStreams(t testing.TB, e *Engine) {
	t.Helper()
	for s, c := range map[string]streamconf.Config{
		zstdStream:    {Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionZstd},
		parquetStream: {Format: streamconf.FormatParquet, Schema: testSchema},
	} {
		if _, err := e.PutStream(context.Background(), s, c); err != nil {
			t.Fatalf("put stream %s: %v", s, err)
		}
	}
}

// TestStreamConfigBarrierAndRestart: a configuration applies once its
// PUT's barrier committed what was written before (with the old one), each file
// record names its encoding and version, the configuration survives a
// restart, and the invariant checker reads the encoded files back.
func TestStreamConfigBarrierAndRestart(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	seq := int64(0)
	write := func(stream string) {
		t.Helper()
		seq++
		if _, err := send(r.e, nil, stream, seq, 3); err != nil {
			t.Fatalf("write %s: %v", stream, err)
		}
		exp.Must[invariant.BatchID{Stream: stream, Seq: seq}] = true
	}
	write(zstdStream)
	write(parquetStream)
	configureTestStreams(t, e) // its barrier commits both, as they were accepted
	before, err := e.store.Get(e.Status().LastDone)
	if err != nil || len(before.Files) != 2 {
		t.Fatalf("the PUT's barrier: %+v %v, want the two files written before it", before, err)
	}
	for _, f := range before.Files {
		if f.Format != streamconf.FormatNDJSON || f.Compression != streamconf.CompressionNone || f.SchemaVersion != 0 || !strings.HasSuffix(f.Final, ".ndjson") {
			t.Errorf("checkpoint of the barrier wrote %+v; want the defaults", f)
		}
	}
	write(zstdStream)
	write(parquetStream)
	res := r.checkpoint()
	got := map[string]string{}
	for _, f := range res.Files {
		got[f.Stream] = f.Final[strings.LastIndexByte(f.Final, '/')+1:] + " " + f.Format + " " + f.Compression
		if f.SchemaVersion != 1 {
			t.Errorf("%s: schema version %d, want 1", f.Final, f.SchemaVersion)
		}
	}
	if !strings.HasSuffix(got[zstdStream], ".ndjson.zst ndjson zstd") || !strings.HasSuffix(got[parquetStream], ".parquet parquet zstd") {
		t.Fatalf("after the barrier: %v", got)
	}
	r.check(exp)

	r.stop()
	e = r.start(nil)
	if info := e.Stream(parquetStream); info.Config.Version != 1 || info.ActiveVersion != 1 || info.Config.Format != streamconf.FormatParquet {
		t.Fatalf("after restart: %+v", info)
	}
	write(parquetStream)
	res = r.checkpoint()
	if len(res.Files) != 1 || res.Files[0].Format != streamconf.FormatParquet {
		t.Fatalf("after restart: %+v", res.Files)
	}
	r.check(exp)

	// A record that breaks the schema refuses the batch, naming line and
	// field; nothing of it is kept.
	bad := append(invariant.Batch(invariant.BatchID{Stream: parquetStream, Seq: 99}, 1), `{"s":"pq","q":"x","i":0,"n":1}`+"\n"...)
	_, err = e.Write(Write{Stream: parquetStream, Ext: "ndjson", Data: bad, Records: 2})
	var re *RecordError
	if !errors.As(err, &re) || !errors.Is(err, streamconf.ErrSchemaMismatch) || re.Line != 2 || re.Field != "q" {
		t.Fatalf("bad record: %v", err)
	}
	if st := e.Status(); st.OpenRecords != 0 {
		t.Fatalf("a refused batch left %d records", st.OpenRecords)
	}
}

// TestStreamPartitionSplit: a batch whose records fall into several
// event-time partitions goes to each partition's transaction, and a
// batch with a record that can't be placed is refused whole.
func TestStreamPartitionSplit(t *testing.T) {
	r := newRig(t, nil)
	r.foreign = true // records of its own: the end check skips their ranges
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip,
		Partition: "day={time:ts:%Y-%m-%d}/h={time:ts:%H}"}); err != nil {
		t.Fatal(err)
	}
	r.checkpoint() // the barrier
	recs := `{"ts":"2026-11-29T09:10:00Z","v":1}` + "\n" + `{"ts":1764500000000,"v":2}` + "\n" + `{"ts":"2026-11-29T09:59:59Z","v":3}` + "\n"
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: []byte(recs), Records: 3}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: []byte(`{"ts":"2026-11-29T09:10:00Z"}` + "\n" + `{"v":2}` + "\n"), Records: 2})
	var re *RecordError
	if !errors.As(err, &re) || !errors.Is(err, layout.ErrInvalidPartition) || re.Line != 2 || re.Field != "ts" {
		t.Fatalf("missing field: %v", err)
	}
	res := r.checkpoint()
	parts := map[string]int64{}
	for _, f := range res.Files {
		dir := f.Final[:strings.LastIndexByte(f.Final, '/')]
		parts[dir] += f.Records
		if !strings.HasSuffix(f.Final, ".ndjson.gz") {
			t.Errorf("%s: want .ndjson.gz", f.Final)
		}
	}
	want := map[string]int64{"ev/day=2026-11-29/h=09": 2, "ev/day=2025-11-30/h=10": 1}
	if len(parts) != len(want) || parts["ev/day=2026-11-29/h=09"] != 2 || parts["ev/day=2025-11-30/h=10"] != 1 {
		t.Fatalf("partitions %v, want %v", parts, want)
	}
}

// failWrites fails every write to a file whose name holds match.
type failWrites struct{ match string }

func (f failWrites) MaybeError(op faultfs.Op) error {
	if op.Kind == faultfs.OpWrite && strings.Contains(op.Path, f.match) {
		return syscall.EIO
	}
	return nil
}

// TestStreamSplitAppendFails: a batch spanning partitions whose second
// piece fails to append after the first was appended is refused, and the
// open checkpoint aborts (nothing of that batch ever commits, I3); the
// checkpoint after it goes on.
func TestStreamSplitAppendFails(t *testing.T) {
	sw := &faultfs.SwapInjector{}
	fs := faultfs.NewInjectFS(afero.NewMemMapFs(), sw)
	r := newRig(t, fs)
	r.foreign = true                               // records of its own: the end check skips their ranges
	r.tweak = func(c *Config) { c.BufferSize = 8 } // every batch is written at once
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "k={field:k}"}); err != nil {
		t.Fatal(err)
	}
	r.checkpoint()
	id := e.Status().OpenID
	sw.Set(failWrites{match: fmt.Sprintf("-%020d-0001.", id)}) // the second file of the checkpoint: partition b
	two := []byte(`{"k":"a","n":1}` + "\n" + `{"k":"b","n":1}` + "\n")
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: two, Records: 2}); err == nil {
		t.Fatal("the write whose second piece failed was accepted")
	}
	sw.Set(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Wait(ctx, id); !errors.Is(err, ErrAborted) {
		t.Fatalf("checkpoint %d holding half the batch: %v, want aborted", id, err)
	}
	if _, err := e.Write(Write{Stream: "ev", Ext: "ndjson", Data: two, Records: 2}); err != nil {
		t.Fatal(err)
	}
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 2 {
		t.Fatalf("after the abort: %+v", res)
	}
	var records int64
	for _, f := range res.Files {
		records += f.Records
	}
	if records != 2 {
		t.Fatalf("%d records committed, want the retried batch's 2", records)
	}
}

// TestStreamEncodeInBackground: zstd and Parquet files encoded by
// background steps (tiny ones, so many run, on goroutines, while writers
// and checkpoints go on concurrently; files roll by encoded size) hold
// every batch exactly once and nothing else; the invariant checker decodes
// them. Run it with -race.
func TestStreamEncodeInBackground(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) {
		c.BufferSize = 64
		c.Encoders = staging.NewEncoders(2, 512)
		c.RollBytes = 8 << 10
	}
	e := r.start(nil)
	configureTestStreams(t, e)
	r.checkpoint()
	var wg sync.WaitGroup
	var mu sync.Mutex
	must := map[invariant.BatchID]bool{}
	for k, s := range []string{zstdStream, parquetStream, zstdStream, parquetStream} {
		ps, err := e.InitProducer(t.Context(), fmt.Sprint("p", k))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			p := &Producer{ID: ps.ID, Epoch: ps.Epoch}
			for seq := int64(0); seq < 400; {
				res, err := send(e, p, s, seq, 5)
				if err != nil {
					if errors.Is(err, ErrBackpressure) {
						time.Sleep(time.Millisecond)
						continue
					}
					t.Errorf("%s seq %d: %v", p.ID, seq, err)
					return
				}
				if res.NextSeq != seq+1 {
					t.Errorf("%s seq %d: next %d", p.ID, seq, res.NextSeq)
					return
				}
				mu.Lock()
				must[invariant.BatchID{Producer: p.ID, Stream: s, Seq: seq}] = true
				mu.Unlock()
				seq++
			}
		})
	}
	stop := make(chan struct{})
	ckpts := make(chan int)
	go func() {
		n := 0
		defer func() { ckpts <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			res, err := checkpointIn(e)
			if err != nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
			if res.State == recovery.Committed && len(res.Files) > 0 {
				n++
			}
		}
	}()
	wg.Wait()
	close(stop)
	if n := <-ckpts; n < 3 {
		t.Logf("only %d checkpoints with files ran beside the writes", n)
	}
	res := r.checkpoint()
	if res.State != recovery.Committed {
		t.Fatalf("final checkpoint %+v", res)
	}
	r.check(invariant.Expect{Must: must, Exact: true})
	if left, _ := afero.ReadDir(r.fs, rigStaging); len(left) != 0 {
		t.Fatalf("%d staging files left", len(left))
	}
}

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

// An older copy of the state store (a volume snapshot restored) must not
// revert a stream to the configuration it had when the copy was taken:
// the destination's document holds a newer version, and the start takes
// it. Failed before: the start read no document of a stream its store
// had, so the stream ran with version 1 (partition a=...) while
// _streams/s.json held version 2 (b=...), and records written for version
// 2 were refused as invalid_partition.
func TestStreamConfigOlderStoreCopy(t *testing.T) {
	r := leaseRig(t, nil, 200*time.Millisecond, nil)
	e := r.start(nil)
	ctx := t.Context()
	if _, err := e.PutStream(ctx, "s", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "a={field:a}"}); err != nil {
		t.Fatal(err)
	}
	backup := r.storeCopy()
	v2, err := e.PutStream(ctx, "s", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "b={field:b}"})
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	r.putStore(backup)
	time.Sleep(250 * time.Millisecond) // the stopped holder's lease expires
	e = r.start(nil)
	got := e.Stream("s")
	if got.Config.Version != 2 || got.ActiveVersion != 2 || got.Config.Partition != v2.Config.Partition {
		t.Fatalf("stream after an older store copy: version %d (active %d) partition %q, want version 2 %q",
			got.Config.Version, got.ActiveVersion, got.Config.Partition, v2.Config.Partition)
	}
}

func readStreamDocFile(t *testing.T, fs afero.Fs, stream string) (recovery.StreamConfig, bool) {
	t.Helper()
	data, err := afero.ReadFile(fs, rigDest+"/"+layout.StreamConfName(stream))
	if os.IsNotExist(err) {
		return recovery.StreamConfig{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := parseStreamDoc(stream, data)
	if err != nil {
		t.Fatalf("stream document of %s: %v", stream, err)
	}
	return rec, true
}

// A lost state store must not silently revert every stream to the
// defaults: PUT keeps the configuration in the destination too
// (_streams/<stream>.json, versioned), and a start whose store lacks it
// restores it, version and all. Before, the rebuilt node wrote the
// stream's files with the defaults (uncompressed, default partitions).
func TestStreamConfigRestoredAfterStoreLoss(t *testing.T) {
	r := leaseRig(t, nil, 200*time.Millisecond, nil)
	e := r.start(nil)
	c := streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip, Partition: "p={ingest:%Y}"}
	if _, err := e.PutStream(t.Context(), "s", streamconf.Config{Format: streamconf.FormatNDJSON}); err != nil {
		t.Fatal(err)
	}
	info, err := e.PutStream(t.Context(), "s", c)
	if err != nil {
		t.Fatal(err)
	}
	if doc, ok := readStreamDocFile(t, r.fs, "s"); !ok || doc.Config.Version != 2 || !reflect.DeepEqual(doc.Config, info.Config) {
		t.Fatalf("document in the destination %+v (present %v), want version 2 %+v", doc, ok, info.Config)
	}
	r.stopLosingStore()
	time.Sleep(250 * time.Millisecond) // the crashed holder's lease expires
	e = r.start(nil)
	got := e.Stream("s")
	if !got.Configured || got.Config.Version != 2 || !reflect.DeepEqual(got.Config, info.Config) || got.ActiveVersion != 2 {
		t.Fatalf("stream after the store was lost: %+v, want %+v in force", got, info.Config)
	}
	mustSend(t, e, nil, "s", 1, 1)
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 1 || !strings.HasSuffix(res.Files[0].Final, ".ndjson.gz") || !strings.HasPrefix(res.Files[0].Final, "s/p=") {
		t.Fatalf("checkpoint after the restore: %+v, want one gzip file under the configured partition", res)
	}
	// The next PUT continues the restored version.
	if info, err := e.PutStream(t.Context(), "s", streamconf.Config{}); err != nil || info.Config.Version != 3 {
		t.Fatalf("PUT after the restore: %+v %v, want version 3", info, err)
	}
	r.foreign = true // the gzip file is not the checker's plain NDJSON
}

// What the destination holds under _streams/ is checked before it is
// believed: documents that don't parse, name another stream, carry an
// invalid configuration or an absurd version are reported and skipped;
// a configuration the store has and the destination lacks is written back.
func TestStreamConfigBadDocumentsSkipped(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	e := r.start(nil)
	if _, err := e.PutStream(t.Context(), "kept", streamconf.Config{Format: streamconf.FormatText}); err != nil {
		t.Fatal(err)
	}
	r.stop()
	if err := r.fs.Remove(rigDest + "/" + layout.StreamConfName("kept")); err != nil {
		t.Fatal(err)
	}
	good := func(stream string, version int64, format string) []byte {
		data, _ := json.Marshal(recovery.StreamConfig{Stream: stream, Config: streamconf.Config{Version: version, Format: format}, UpdatedAt: time.Now()})
		return data
	}
	plant := map[string][]byte{
		"garbage":   []byte("{not json"),
		"other":     good("elsewhere", 1, streamconf.FormatText),
		"invalid":   good("invalid", 1, "nope"),
		"huge":      good("huge", 1<<62, streamconf.FormatText),
		"zero":      good("zero", 0, streamconf.FormatText),
		"trailing":  append(good("trailing", 1, streamconf.FormatText), []byte(`{"x":1}`)...),
		"fine":      good("fine", 4, streamconf.FormatText),
		"_x":        good("_x", 1, streamconf.FormatText), // not a stream name
		"with.json": []byte("{}"),
	}
	for name, data := range plant {
		if err := afero.WriteFile(r.fs, rigDest+"/"+layout.StreamDir+"/"+name+".json", data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e = r.start(nil)
	for name := range plant {
		if name == "fine" {
			continue
		}
		if st := e.Stream(name); st.Configured {
			t.Errorf("stream %s configured from a bad document: %+v", name, st)
		}
	}
	if st := e.Stream("fine"); !st.Configured || st.Config.Version != 4 || st.Config.Format != streamconf.FormatText {
		t.Errorf("stream fine: %+v, want version 4 restored", st)
	}
	if st := e.Stream("kept"); !st.Configured || st.Config.Format != streamconf.FormatText {
		t.Errorf("stream kept: %+v", st)
	}
	if doc, ok := readStreamDocFile(t, r.fs, "kept"); !ok || doc.Config.Version != 1 {
		t.Errorf("the destination's document of kept was not written back: %+v %v", doc, ok)
	}
	r.broken = "planted documents under _streams/"
}

// TestStreamDocPlantedRefusedChange: a document under _streams/ with a
// version above the store's is restored at start, but one that is a
// change PUT refuses for the stream (a table stream with a required
// column dropped, or no longer a table) must not be: believed, the
// column drop refused every write of the stream's records (a field not
// in the schema) and PUT could not put the table's schema back (a new
// required field), so the stream stayed wedged by a file this node
// never wrote (I13); the table drop left the stream's next files out of
// its table. Failed before: the start put version 7 in force and the
// PUT of the original configuration was refused.
func TestStreamDocPlantedRefusedChange(t *testing.T) {
	dropColumn := tableConfDroppedColumn()
	noTable := tableConf
	noTable.Table = streamconf.TableNone
	for name, planted := range map[string]streamconf.Config{"drop column": dropColumn, "no table": noTable} {
		t.Run(name, func(t *testing.T) {
			r := plantedStreamDocRig(t, time.Hour, planted)
			e := r.start(nil)
			if st := e.Stream(tableStream); st.Config.Version != 1 || !st.Config.IsTable() || len(st.Config.Schema.Fields) != len(testSchema.Fields) {
				t.Fatalf("after the start: version %d, table %v, %d fields in force; want the store's version 1", st.Config.Version, st.Config.IsTable(), len(st.Config.Schema.Fields))
			}
			if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
				t.Fatalf("PUT of the stream's configuration: %v", err)
			}
			mustSend(t, e, nil, tableStream, 2, 3)
			r.commit()
			r.broken = "a planted document under _streams/"
		})
	}
}

// tableConfDroppedColumn is tableConf with its schema's last column
// dropped: a change PUT refuses for a table stream.
func tableConfDroppedColumn() streamconf.Config {
	c := tableConf
	c.Schema = &streamconf.Schema{Fields: testSchema.Fields[:len(testSchema.Fields)-1]}
	return c
}

// plantedStreamDocRig starts a table stream (tableConf) on a rig with a
// node lease of timeout, commits a batch, stops, and plants planted as the
// stream's document at version 7, above the store's 1.
func plantedStreamDocRig(t *testing.T, timeout time.Duration, planted streamconf.Config) *rig {
	t.Helper()
	r, _ := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) {
		tw(c)
		c.Leaser, c.LeaseTimeout, c.Listen = local.New(c.FS, rigDest, rigStaging), timeout, "127.0.0.1:1"
	}
	e := r.startTable(tableConf)
	mustSend(t, e, nil, tableStream, 1, 3)
	r.commit()
	r.stop()
	planted.Version = 7
	data, err := json.Marshal(recovery.StreamConfig{Stream: tableStream, Config: planted, UpdatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(r.fs, rigDest+"/"+layout.StreamConfName(tableStream), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStreamDocRefusedShadowsLaterPuts: a planted document under
// _streams/ that the start refuses (a change PUT refuses: a table's
// column dropped) with a version above the store's stays in the
// destination, and every later PUT of this node, numbered below it, is
// not written there (writeStreamDoc skips a newer document). The store
// lost, the start restores the planted document after all: the column
// drop is in force, the stream's records are refused and PUT cannot put
// the column back (a new required field) — the wedge TestStreamDocPlanted
// RefusedChange was about, one store loss later (I13). Failed before
// (after a lost store: version 7 with 4 fields in force); the start now
// replaces the refused document with the store's configuration.
func TestStreamDocRefusedShadowsLaterPuts(t *testing.T) {
	dropColumn := tableConfDroppedColumn()
	r := plantedStreamDocRig(t, time.Second, dropColumn)
	e := r.startTable(tableConf) // refuses the planted document
	mustSend(t, e, nil, tableStream, 2, 3)
	r.commit()
	r.stop()
	r.storePath = filepath.Join(filepath.Dir(r.storePath), "lost.db") // the store is lost
	e, err := r.open(nil, 8*time.Second)
	if err != nil {
		t.Fatalf("start after the store loss: %v; status %+v", err, e.Status())
	}
	if st := e.Stream(tableStream); len(st.Config.Schema.Fields) != len(testSchema.Fields) {
		t.Errorf("after a lost store: version %d with %d fields in force, want the %d fields PUT last accepted", st.Config.Version, len(st.Config.Schema.Fields), len(testSchema.Fields))
	}
	r.broken = "a planted document under _streams/"
}

// streamSeriesOf returns the stream label values of the per-stream
// counters of name in got, with their values.
func streamSeriesOf(got map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if rest, ok := strings.CutPrefix(k, name+`{stream="`); ok {
			out[strings.TrimSuffix(rest, `"}`)] = v
		}
	}
	return out
}

// TestStreamSeriesCapDefault: with the defaults, writing to many streams
// makes at most DefaultMaxStreamSeries series and one "_other", and no
// record goes uncounted.
func TestStreamSeriesCapDefault(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewMetrics(reg, nil).Hooks()
	const n = 2500
	for i := range n {
		h.Accepted(fmt.Sprintf("s%05d", i), 2, 10)
		h.Duplicate(fmt.Sprintf("s%05d", i))
	}
	got := series(t, reg)
	for _, name := range []string{"eosink_records_ingested_total", "eosink_bytes_ingested_total", "eosink_duplicates_dropped_total"} {
		ss := streamSeriesOf(got, name)
		if len(ss) > 1000+1 {
			t.Errorf("%s: %d stream series, want at most 1001", name, len(ss))
		}
		sum := 0.0
		for _, v := range ss {
			sum += v
		}
		if want := map[string]float64{"eosink_records_ingested_total": 2 * n, "eosink_bytes_ingested_total": 10 * n,
			"eosink_duplicates_dropped_total": n}[name]; sum != want {
			t.Errorf("%s: sums to %v, want %v", name, sum, want)
		}
	}
}

// TestStreamSeriesIdleSwept: series of streams unwritten for StreamIdle are
// deleted, which frees room under the cap for new streams.
func TestStreamSeriesIdleSwept(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	m := NewMetricsWith(reg, nil, MetricsConfig{MaxStreams: 3, StreamIdle: time.Hour, Now: func() time.Time { return now }})
	h := m.Hooks()
	step := func(d time.Duration) { now = now.Add(d) }
	want := func(when string, exp map[string]float64) {
		t.Helper()
		got := streamSeriesOf(series(t, reg), "eosink_records_ingested_total")
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("%s: series %v, want %v", when, got, exp)
		}
	}
	for _, s := range []string{"a", "b", "c", "d", "e", "a"} {
		h.Accepted(s, 1, 1)
	}
	want("past the cap", map[string]float64{"a": 2, "b": 1, "c": 1, "_other": 2})

	step(40 * time.Minute)
	h.Accepted("a", 1, 1)
	h.Accepted("f", 1, 1) // still full
	want("40m later", map[string]float64{"a": 3, "b": 1, "c": 1, "_other": 3})

	step(30 * time.Minute) // b, c idle 70m; _other 30m; a 30m
	h.Checkpoint(CheckpointResult{})
	want("70m: b and c swept", map[string]float64{"a": 3, "_other": 3})
	h.Accepted("g", 1, 1)
	h.Accepted("h", 1, 1)
	h.Accepted("i", 1, 1) // full again: a, g, h
	want("new streams take the freed room", map[string]float64{"a": 3, "g": 1, "h": 1, "_other": 4})

	step(2 * time.Hour)
	h.Checkpoint(CheckpointResult{})
	want("all idle", map[string]float64{})
}
