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
		r.t.Fatalf("PUT %s: %v", tableStream, err)
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
	r.putStore(backup)
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

// TestTablePutRefusesForeignTable: a PUT making a stream a table is
// checked against the table the destination already holds at the
// stream's place (another node sharing the destination configured the
// stream otherwise, or another writer made the table): a schema or
// partition spec the table can't take is refused with a 400 naming the
// field, and a table the stream can join is accepted. Before the check
// the PUT was accepted, its batches too, and their checkpoint's table
// commit failed for good (table.ErrIncompatible: an abort verdict after
// "prepared"): the commit was stuck, and with it every later checkpoint
// of the node, every stream's.
func TestTablePutRefusesForeignTable(t *testing.T) {
	r, d := tableRig(t)
	e := r.start(nil)
	ctx := context.Background()
	// Node n0 made the table with column q a double, not an int64.
	theirs := tableConf
	theirs.Schema = &streamconf.Schema{Fields: append([]streamconf.Field(nil), testSchema.Fields...)}
	theirs.Schema.Fields[2].Type = streamconf.TypeDouble
	plant := func(c streamconf.Config, node string) {
		t.Helper()
		ice := &table.Iceberg{Dest: d.Local, Location: "file://" + rigDest,
			Config: func(string) (streamconf.Config, bool) { return c.Defaults(), true }}
		f := committer.File{Stream: tableStream, Final: tableStream + "/s=x/" + layout.PartName(node, 1, 0, "parquet"),
			Bytes: 100, Records: 1, Format: streamconf.FormatParquet, Table: streamconf.TableIceberg}
		if err := ice.Commit(ctx, node, 1, []committer.File{f}); err != nil {
			t.Fatal(err)
		}
	}
	plant(theirs, "n0")
	r.broken = "the test plants table metadata naming a file of another node"
	_, err := e.PutStream(ctx, tableStream, tableConf)
	var fe *streamconf.FieldError
	if !errors.As(err, &fe) || fe.Field != "schema.fields[2]" {
		if err == nil {
			// What followed before the check: accepted, then stuck.
			if _, werr := send(e, nil, tableStream, 1, 2); werr != nil {
				t.Fatalf("PUT accepted; write: %v", werr)
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			res, cerr := e.Checkpoint(cctx)
			t.Fatalf("PUT of a schema the table can't take accepted; its checkpoint: %+v, %v (stuck: %q)", res, cerr, e.Status().Stuck)
		}
		t.Fatalf("PUT of a schema the table can't take: %v, want a field error naming schema.fields[2]", err)
	}
	// A partition spec other than the table's is refused too.
	other := theirs
	other.Partition = "p={field:p}"
	if _, err := e.PutStream(ctx, tableStream, other); !errors.As(err, &fe) || fe.Field != "partition" {
		t.Fatalf("PUT of a partition template other than the table's: %v, want a field error naming partition", err)
	}
	// The stream the table can take (its schema, or one more optional
	// field) is accepted and commits.
	if _, err := e.PutStream(ctx, tableStream, theirs); err != nil {
		t.Fatalf("PUT of the table's own schema: %v", err)
	}
	mustSend(t, e, nil, tableStream, 1, 2)
	r.commit()
}

// TestTableDisplacedFile: something that is not eosink's holds a file
// where a table stream's partition directory goes (<stream>/s=x), so the
// part file's final name is refused for good (ENOTDIR) and the file is
// displaced (<stream>/_displaced/<part>), which exists so that foreign
// content never holds back the node's checkpoints (I13). The checkpoint
// must still commit, and the other stream's batches with it.
func TestTableDisplacedFile(t *testing.T) {
	r, d := tableRig(t)
	e := r.startTable(tableConf)
	ctx := context.Background()
	// Records of invariant.Batch hold "s": the stream name.
	if err := afero.WriteFile(r.fs, rigDest+"/"+tableStream+"/s="+tableStream, []byte("not eosink's"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 2)
	mustSend(t, e, nil, "other", 1, 2)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(cctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint with a table file displaced: %+v, %v (stuck: %q)", res, err, e.Status().Stuck)
	}
	cur := snapshotsOf(t, d)
	if cur.Version != 1 || cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"] != "2" {
		t.Fatalf("table at v%d, want v1 holding the batch's 2 records", cur.Version)
	}
	paths, err := table.DataFiles(ctx, d, tableStream, cur.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || !strings.HasPrefix(paths[0].Path, tableStream+"/_displaced/") {
		t.Fatalf("table data files %v, want the one displaced file", paths)
	}
	if err := r.fs.Remove(rigDest + "/" + tableStream + "/s=" + tableStream); err != nil {
		t.Fatal(err)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: tableStream, Seq: 1}: true, {Stream: "other", Seq: 1}: true}, Exact: true})
}

// TestTableBecameTableStoreLost: a Parquet stream partitioned by ingest
// time becomes a table partitioned by a column (a change PUT accepts:
// the stream was no table), and the state store is lost before the
// stream's next checkpoint. The rebuild finishes the table commits of
// the stream's newest manifests, which hold only files written before it
// was a table, in partitions the table's template can't read: those are
// no table's files. Committing them failed for good and parked the
// stream, whose writes were then refused for ever: no retry lands them,
// and PUT can't make the stream a plain one again.
func TestTableBecameTableStoreLost(t *testing.T) {
	r, _ := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) {
		tw(c)
		c.Leaser, c.LeaseTimeout, c.Listen = local.New(c.FS, rigDest, rigStaging), 200*time.Millisecond, "127.0.0.1:1"
	}
	e := r.start(nil)
	plain := streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema}
	if _, err := e.PutStream(context.Background(), tableStream, plain); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 3)
	r.commit()
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatalf("make the stream a table: %v", err)
	}
	r.stopLosingStore()
	time.Sleep(250 * time.Millisecond) // the crashed holder's lease expires
	e = r.start(nil)
	if st := e.Status(); st.TablesParked != 0 {
		t.Fatalf("after the rebuild: %d tables parked (%s)", st.TablesParked, st.TableParked)
	}
	mustSend(t, e, nil, tableStream, 2, 3)
	r.commit()
}

// tableLeasedRig is a newLeasedRig whose destination is a crashingDest
// with tables.
func tableLeasedRig(t *testing.T) (*rig, *crashingDest) {
	r := newLeasedRig(t, nil)
	d := &crashingDest{}
	r.publishTo(d)
	return r, d
}

// crashCheckpoint runs a checkpoint on e that an armed crashingDest
// fails, waits for the engine to stop (the injected failed fsync), and
// closes it: a crash at that point of the commit.
func (r *rig) crashCheckpoint(e *Engine) {
	r.t.Helper()
	r.checkpointStops(e, 10*time.Second)
	r.closeStopped(e)
}

// checkpointStops runs a checkpoint on e that an injected failure (an
// armed crashingDest's failed fsync) must fail, and waits for the engine
// to stop; within bounds both.
func (r *rig) checkpointStops(e *Engine, within time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := e.Checkpoint(ctx); err == nil {
		r.t.Fatal("checkpoint passed with its injected failure")
	}
	select {
	case <-e.Failed():
	case <-ctx.Done():
		r.t.Fatal("the engine did not stop")
	}
}

// loseStore stops the engine if it runs and removes the state store
// (stopLosingStore), and expires the node's lease (keeping the ids it reserved): a new store's
// start cannot prove the dead process gone otherwise.
func (r *rig) loseStore() {
	r.t.Helper()
	r.stopLosingStore()
	if ok, err := afero.Exists(r.fs, rigDest+"/"+layout.LeaseName(rigNode)); err != nil {
		r.t.Fatal(err)
	} else if ok {
		expireLease(r.t, r.fs)
	}
}

// TestTableHalfCommittedAfterStoreLoss: the state store is lost while a
// checkpoint of a table stream commits, the crash at its manifest's
// publish. With the table commit before the manifest (as it was), the
// table held the checkpoint while the rebuild from the manifests did not
// count it: its clients resent its batches and the table held them twice
// (I2 for tables; this test failed: 6 records). The table commit follows
// the manifest now: a checkpoint without a manifest is in no table.
func TestTableHalfCommittedAfterStoreLoss(t *testing.T) {
	r, d := tableLeasedRig(t)
	e := r.startTable(tableConf)
	p := r.initProducer("p")
	mustSend(t, e, p, tableStream, 0, 3)
	d.armed.Store(true)
	r.crashCheckpoint(e)
	r.loseStore()
	r.broken = "the lost checkpoint's table files stay in place, named by no manifest"

	e = r.start(nil)
	ps := r.initState("p")
	p.Epoch = ps.Epoch
	next := ps.Streams[tableStream].NextSeq
	for seq := next; seq < 1; seq++ {
		mustSend(t, e, p, tableStream, seq, 3) // the client resends what init says is not committed
	}
	r.commit()
	cur := snapshotsOf(t, d)
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != "3" {
		t.Fatalf("after the loss and the resend (init said next_seq %d), the table holds %s records; the client's one batch has 3", next, got)
	}
}

// TestTableCrashAfterManifest: the engine stops after the checkpoint's
// manifest and before its table commit, the state store intact: the
// replay on the next start repeats the commit (the manifest is found
// published with the same bytes) and the table holds the checkpoint once.
func TestTableCrashAfterManifest(t *testing.T) {
	r, d := tableRig(t)
	e := r.startTable(tableConf)
	exp := sendSeqs(t, e, tableStream, 1, 3, 4)
	d.armedTable.Store(true)
	r.crashCheckpoint(e)
	if names := manifestsOf(t, r); len(names) != 1 {
		t.Fatalf("before the replay: manifests %v, want the checkpoint's one", names)
	}
	if cur := snapshotsOf(t, d); cur.Version != 0 {
		t.Fatalf("before the replay: table v%d, want none (the crash was at the table commit)", cur.Version)
	}
	r.start(nil) // the replay
	wantTable(t, d, "after the replay", 1, 1, "12")
	r.check(exp)
}

// TestTableCrashAfterManifestStoreLost: the engine stops after the
// checkpoint's manifest and before its table commit, and the state store
// is lost with it. The rebuild counts the checkpoint (its manifest), so
// init answers it committed and no client resends it; the start finishes
// its table commit from the manifest: the table holds it once, and the
// next checkpoint is one more snapshot.
func TestTableCrashAfterManifestStoreLost(t *testing.T) {
	r, d := tableLeasedRig(t)
	e := r.startTable(tableConf)
	p := r.initProducer("p")
	mustSend(t, e, p, tableStream, 0, 3)
	r.commit() // one checkpoint in the table before: the finish appends to it
	mustSend(t, e, p, tableStream, 1, 3)
	mustSend(t, e, p, tableStream, 2, 3)
	d.armedTable.Store(true)
	r.crashCheckpoint(e)
	if cur := snapshotsOf(t, d); cur.Version != 1 {
		t.Fatalf("before the start: table v%d, want v1 (the crash was at the second checkpoint's table commit)", cur.Version)
	}
	r.loseStore()

	e = r.start(nil)
	wantTable(t, d, "after the start", 2, 2, "9")
	ps := r.initState("p")
	if got := ps.Streams[tableStream].NextSeq; got != 3 {
		t.Fatalf("init after the loss: next_seq %d, want 3 (every batch committed)", got)
	}
	p.Epoch = ps.Epoch
	mustSend(t, e, p, tableStream, 3, 3)
	r.commit()
	wantTable(t, d, "after the next checkpoint", 3, 3, "12")
	r.check(exactSeqs("p", tableStream, 0, 3))
}

// wantTable fails the test unless d's table is at version, with that
// many snapshots, the current one holding records records in all.
func wantTable(t *testing.T, d committer.Reader, when string, version int64, snapshots int, records string) {
	t.Helper()
	cur := snapshotsOf(t, d)
	if n := len(cur.Metadata.Snapshots()); cur.Version != version || n != snapshots {
		t.Fatalf("%s: table v%d with %d snapshots, want v%d with %d", when, cur.Version, n, version, snapshots)
	}
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != records {
		t.Fatalf("%s: the table holds %s records, want %s", when, got, records)
	}
}

// manifestsOf lists the node's published manifests in r's destination.
func manifestsOf(t *testing.T, r *rig) []string {
	t.Helper()
	dir := rigDest + "/" + layout.ManifestDir + "/" + rigNode
	names, err := afero.Glob(r.fs, dir+"/*.json")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTableStoreLostAfterCommit: the state store is lost after a table
// stream's checkpoint committed whole. The start that rebuilds finishes
// the newest manifest's table commit, which finds the checkpoint's own
// snapshot: nothing is appended twice.
func TestTableStoreLostAfterCommit(t *testing.T) {
	r, d := tableLeasedRig(t)
	e := r.startTable(tableConf)
	p := r.initProducer("p")
	mustSend(t, e, p, tableStream, 0, 3)
	r.commit()
	mustSend(t, e, p, tableStream, 1, 3)
	r.commit()
	r.stop()
	r.loseStore()

	e = r.start(nil)
	wantTable(t, d, "after the start", 2, 2, "6")
	if got := r.initState("p").Streams[tableStream].NextSeq; got != 2 {
		t.Fatalf("init after the loss: next_seq %d, want 2", got)
	}
	r.check(exactSeqs("p", tableStream, 0, 1))
}
