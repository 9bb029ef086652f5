package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

const tableStream = "tb"

var tableConf = streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg,
	Schema: testSchema, Partition: "s={field:s}"}

// crashingDest is the local destination with a "crash" (a failed fsync,
// which stops the engine) at the next manifest publish while armed, and
// at the next publish of table metadata (the table commit's first write)
// while armedTable.
type crashingDest struct {
	*local.Local
	armed      atomic.Bool
	armedTable atomic.Bool
}

func (d *crashingDest) Publish(ctx context.Context, name string, data []byte) error {
	if strings.HasPrefix(name, layout.ManifestDir+"/") && d.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("publish %s: %w: injected crash at the manifest", name, durable.ErrSync)
	}
	if strings.Contains(name, "/metadata/") && d.armedTable.CompareAndSwap(true, false) {
		return fmt.Errorf("publish %s: %w: injected crash at the table commit", name, durable.ErrSync)
	}
	return d.Local.Publish(ctx, name, data)
}

// Stage stages as the local destination does; the crash is at the publish
// of what it staged.
func (d *crashingDest) Stage(ctx context.Context, name string, data []byte) (committer.Staged, error) {
	s, err := d.Local.Stage(ctx, name, data)
	if err != nil {
		return nil, err
	}
	return crashingStaged{Staged: s, d: d, name: name}, nil
}

type crashingStaged struct {
	committer.Staged
	d    *crashingDest
	name string
}

func (s crashingStaged) Publish(ctx context.Context) error {
	if strings.HasPrefix(s.name, layout.ManifestDir+"/") && s.d.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("publish %s: %w: injected crash at the manifest", s.name, durable.ErrSync)
	}
	return s.Staged.Publish(ctx)
}

func tableRig(t *testing.T) (*rig, *crashingDest) {
	r := newRig(t, nil)
	d := &crashingDest{}
	r.publishTo(d)
	return r, d
}

// tableDest is a crashingDest, or a destination embedding one, that a
// rig's engines publish through (rig.publishTo).
type tableDest interface {
	committer.Publisher
	useLocal(fs afero.Fs)
}

// useLocal points d at the rig's local destination on fs.
func (d *crashingDest) useLocal(fs afero.Fs) { d.Local = local.New(fs, rigDest, rigStaging) }

// publishTo has r's engines publish through d, over the local
// destination on each engine's file system, with Iceberg tables there.
// The tweak r had runs after it (a leased rig's takes the publisher as
// its leaser).
func (r *rig) publishTo(d tableDest) {
	before := r.tweak
	r.tweak = func(c *Config) {
		d.useLocal(c.FS)
		c.Publisher, c.TableLocation = d, "file://"+rigDest
		if before != nil {
			before(c)
		}
	}
}

// startTable starts r's engine with the table stream tableStream put
// with conf.
func (r *rig) startTable(conf streamconf.Config) *Engine {
	r.t.Helper()
	e := r.start(nil)
	if _, err := e.PutStream(r.t.Context(), tableStream, conf); err != nil {
		r.t.Fatal(err)
	}
	return e
}

// sendSeqs sends batches from to to of stream (n records each) without a
// producer, and returns what the invariant check must then find: exactly
// those batches.
func sendSeqs(t *testing.T, e *Engine, stream string, from, to int64, n int) invariant.Expect {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		mustSend(t, e, nil, stream, seq, n)
	}
	return exactSeqs("", stream, from, to)
}

// exactSeqs expects exactly producer's batches from to to of stream.
func exactSeqs(producer, stream string, from, to int64) invariant.Expect {
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for seq := from; seq <= to; seq++ {
		exp.Must[invariant.BatchID{Producer: producer, Stream: stream, Seq: seq}] = true
	}
	return exp
}

func snapshotsOf(t *testing.T, d committer.Reader) table.Loaded {
	t.Helper()
	cur, err := table.Load(context.Background(), d, tableStream)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestTableCrashBeforeManifest: the engine stops at the manifest's
// publish, before the table commit (which follows the manifest); the
// replay on the next start finishes the checkpoint and its table holds
// it once: one snapshot, every record.
func TestTableCrashBeforeManifest(t *testing.T) {
	r, d := tableRig(t)
	e := r.startTable(tableConf)
	exp := sendSeqs(t, e, tableStream, 1, 3, 4)
	d.armed.Store(true)
	r.crashCheckpoint(e)
	if cur := snapshotsOf(t, d); cur.Version != 0 {
		t.Fatalf("before the replay: table v%d, want none (the table commit follows the manifest)", cur.Version)
	}
	r.start(nil) // the replay
	wantTable(t, d, "after the replay", 1, 1, "12")
	r.check(exp)
	// The next checkpoint is one more snapshot.
	mustSend(t, r.e, nil, tableStream, 4, 2)
	exp.Must[invariant.BatchID{Stream: tableStream, Seq: 4}] = true
	r.checkpoint()
	if cur := snapshotsOf(t, d); cur.Version != 2 || len(cur.Metadata.Snapshots()) != 2 {
		t.Fatalf("table v%d, want v2 with two snapshots", cur.Version)
	}
	r.check(exp)
}

// TestTablePutRules: a table stream's configuration changes only as its
// table can follow, and a destination without a table location refuses
// table streams.
func TestTablePutRules(t *testing.T) {
	r, _ := tableRig(t)
	e := r.startTable(tableConf)
	ctx := context.Background()
	grown := tableConf
	grown.Schema = &streamconf.Schema{Fields: append(append([]streamconf.Field(nil), testSchema.Fields...), streamconf.Field{Name: "extra", Type: streamconf.TypeString})}
	if _, err := e.PutStream(ctx, tableStream, grown); err != nil {
		t.Fatalf("adding an optional field: %v", err)
	}
	for name, c := range map[string]streamconf.Config{
		"partition":     {Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Schema: grown.Schema, Partition: "x={field:p}"},
		"table":         {Format: streamconf.FormatParquet, Schema: grown.Schema, Partition: grown.Partition},
		"schema.fields": {Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Schema: testSchema, Partition: grown.Partition},
		"schema.fields[5].required": {Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Partition: grown.Partition,
			Schema: &streamconf.Schema{Fields: append(append([]streamconf.Field(nil), grown.Schema.Fields...), streamconf.Field{Name: "req", Type: streamconf.TypeString, Required: true})}},
	} {
		_, err := e.PutStream(ctx, tableStream, c)
		var fe *streamconf.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, strings.Split(name, "[")[0]) {
			t.Errorf("change of %s: %v, want a field error naming it", name, err)
		}
	}
	r.stop()
	r.tweak = nil
	e = r.start(nil)
	var fe *streamconf.FieldError
	if _, err := e.PutStream(ctx, "other", tableConf); !errors.As(err, &fe) || fe.Field != "table" {
		t.Fatalf("a table stream without a table location: %v", err)
	}
}

// TestTablePlantedMetadataHoldsNothingBack: a document that is no table
// metadata planted as a table stream's next version, with the version
// hint naming it, holds back no checkpoint (I13): the next checkpoint
// commits, its table snapshot past the planted version, and nothing is
// stuck. Failed before: the commit was ErrCorrupt, retried for ever as a
// permanent stuck commit, and every later checkpoint of every stream
// waited behind it.
func TestTablePlantedMetadataHoldsNothingBack(t *testing.T) {
	r, d := tableRig(t)
	e := r.startTable(tableConf)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for seq := int64(1); seq <= 2; seq++ {
		sendExpected(t, r, &exp, tableStream, seq)
		sendExpected(t, r, &exp, "a", seq)
		if seq == 1 {
			r.commit()
			plant(t, r.fs, layout.TableMetadataName(tableStream, 2), []byte("<html>not metadata</html>"))
			plant(t, r.fs, layout.TableHintName(tableStream), []byte("2"))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := e.Checkpoint(ctx)
		cancel()
		if err != nil || res.State != recovery.Committed {
			t.Fatalf("checkpoint after a planted table version: %+v, %v (stuck %q)", res, err, e.Status().Stuck)
		}
	}
	if st := e.Status(); st.Stuck != "" || st.TablePassedOver != 1 {
		t.Fatalf("stuck %q, table metadata passed over %d; want none and 1", st.Stuck, st.TablePassedOver)
	}
	cur := snapshotsOf(t, d)
	if cur.Version != 3 || len(cur.Metadata.Snapshots()) != 2 {
		t.Fatalf("table v%d with %d snapshots, want v3 (past the planted v2) with two", cur.Version, len(cur.Metadata.Snapshots()))
	}
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != "6" {
		t.Fatalf("table holds %s records, want 6", got)
	}
	r.check(exp)
}

// TestTableReplayFromOlderStoreCopy: a state store restored from a copy
// taken while checkpoint N was prepared, after N's table commit, replays
// N when later checkpoints are in the table and N's own snapshot has
// been expired: the replay believes the node's later snapshot (within the
// ids it reserved: Iceberg.Bound during the replay) and appends nothing
// twice. Live commits believe only a checkpoint's own snapshot (planted
// marks, internal/table TestPlantedCommittedMarks); this is the case the
// max-committed rule is for. Checked by mutation: without the Bound
// wiring, the replay appended N's files again (a duplicate in the table).
func TestTableReplayFromOlderStoreCopy(t *testing.T) {
	r, d := tableRig(t)
	conf := tableConf
	conf.KeepSnapshots = 2
	e := r.startTable(conf)
	r.broken = "an older store copy: the invariant check runs at the end"
	mustSend(t, e, nil, tableStream, 1, 3)
	d.armed.Store(true)
	r.crashCheckpoint(e)
	backup, err := os.ReadFile(r.storePath) // N prepared, its table commit done
	if err != nil {
		t.Fatal(err)
	}
	e = r.start(nil) // the replay commits N
	for seq := int64(2); seq <= 5; seq++ {
		mustSend(t, e, nil, tableStream, seq, 3)
		r.commit()
	}
	cur := snapshotsOf(t, d)
	for _, s := range cur.Metadata.Snapshots() {
		if s.Summary.Properties[table.SummaryCheckpoint] == "1" {
			t.Fatalf("checkpoint 1's snapshot not expired: keep %d, %d snapshots", conf.KeepSnapshots, len(cur.Metadata.Snapshots()))
		}
	}
	version := cur.Version
	r.stop()
	if err := os.WriteFile(r.storePath, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(nil) // replays N from the copy
	cur = snapshotsOf(t, d)
	if cur.Version != version {
		t.Fatalf("the replay from the older copy made table v%d, want v%d unchanged", cur.Version, version)
	}
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != "15" {
		t.Fatalf("table holds %s records, want 15", got)
	}
	r.broken = ""
	r.check(exactSeqs("", tableStream, 1, 5))
}
