package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := e.Checkpoint(ctx)
			cancel()
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
