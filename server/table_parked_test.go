package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/tableplant"
	"github.com/eosink/eosink/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/afero"
)

// otherTable is a second table stream, beside tableStream.
const otherTable = "tc"

// openHookDest is a crashingDest that runs hook (once) when a file named
// hookAt is opened: a write made from there lands in the checkpoint open
// while a table commit reads its metadata.
type openHookDest struct {
	*crashingDest
	hookAt string
	hook   atomic.Pointer[func()]
}

func (d *openHookDest) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	if name == d.hookAt {
		if h := d.hook.Swap(nil); h != nil {
			(*h)()
		}
	}
	return d.crashingDest.Open(ctx, name)
}

func parkRig(t *testing.T) (*rig, *openHookDest) { return parkRigOn(t, nil) }

// parkRigOn is parkRig on fs (nil: in memory).
func parkRigOn(t *testing.T, fs afero.Fs) (*rig, *openHookDest) {
	r := newRig(t, fs)
	d := newParkDest()
	r.publishTo(d)
	return r, d
}

// newParkDest is the destination of the parked-table rigs: its hook runs
// when a table commit of tableStream reads its version 2.
func newParkDest() *openHookDest {
	return &openHookDest{crashingDest: &crashingDest{}, hookAt: layout.TableMetadataName(tableStream, 2)}
}

// startParkTables starts r's engine with tableStream and otherTable
// configured as the table streams the parked-table tests use.
func startParkTables(t *testing.T, r *rig) *Engine {
	t.Helper()
	e := r.start(nil)
	for _, s := range []string{tableStream, otherTable} {
		if _, err := e.PutStream(context.Background(), s, tableConf); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// startParkRig is parkRig with its engine started by startParkTables.
func startParkRig(t *testing.T) (*rig, *openHookDest, *Engine) {
	t.Helper()
	r, d := parkRig(t)
	return r, d, startParkTables(t, r)
}

// plantClaimingVersion plants stream's v2 as a copy of its v1 that claims
// a format version this node can't read: it names the table's uuid, so
// the commit can't pass over it (table.ErrCorrupt, a permanent failure).
func plantClaimingVersion(t *testing.T, r *rig, stream string) string {
	t.Helper()
	b, err := readFile(r, layout.TableMetadataName(stream, 1))
	if err != nil {
		t.Fatal(err)
	}
	name := layout.TableMetadataName(stream, 2)
	plant(t, r.fs, name, tableplant.Claiming(t, b))
	return name
}

// sendExpected sends batch seq (3 records) of stream to r's engine and
// expects it in exp.
func sendExpected(t *testing.T, r *rig, exp *invariant.Expect, stream string, seq int64) {
	t.Helper()
	mustSend(t, r.e, nil, stream, seq, 3)
	exp.Must[invariant.BatchID{Stream: stream, Seq: seq}] = true
}

// unplant removes the planted version name from r's destination.
func unplant(t *testing.T, r *rig, name string) {
	t.Helper()
	if err := r.fs.Remove(rigDest + "/" + name); err != nil {
		t.Fatal(err)
	}
}

// waitLandedOrStopped waits up to d for no table to be parked or for e
// to stop, whichever comes first.
func waitLandedOrStopped(e *Engine, d time.Duration) {
	deadline := time.Now().Add(d)
	for e.Status().TablesParked != 0 && e.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// wantVerified checks d as `eosink verify` does: no problem, and tables
// tables.
func wantVerified(t *testing.T, d catalog.Reader, tables int, when string) {
	t.Helper()
	cat, err := catalog.New(catalog.Config{Files: d})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cat.Verify(context.Background(), nil)
	if err != nil {
		t.Fatalf("%s: verify: %v", when, err)
	}
	if len(rep.Problems) != 0 || rep.Tables != tables {
		t.Fatalf("%s: verify: %d tables, problems %+v", when, rep.Tables, rep.Problems)
	}
}

func readFile(r *rig, name string) ([]byte, error) {
	f, err := r.fs.Open(rigDest + "/" + name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// tableOf loads stream's table; wantTableOf checks it as wantTable does
// and returns the checkpoints its snapshots name, oldest first.
func wantTableOf(t *testing.T, d committer.Reader, stream, when string, snapshots int, records string) []uint64 {
	t.Helper()
	cur, err := table.Load(context.Background(), d, stream)
	if err != nil {
		t.Fatalf("%s: load table %s: %v", when, stream, err)
	}
	if cur.Metadata == nil {
		t.Fatalf("%s: no table %s", when, stream)
	}
	snaps := cur.Metadata.Snapshots()
	if len(snaps) != snapshots {
		t.Fatalf("%s: table %s has %d snapshots, want %d", when, stream, len(snaps), snapshots)
	}
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != records {
		t.Fatalf("%s: table %s holds %s records, want %s", when, stream, got, records)
	}
	var cks []uint64
	for _, s := range snaps {
		c, _ := strconv.ParseUint(s.Summary.Properties[table.SummaryCheckpoint], 10, 64)
		cks = append(cks, c)
	}
	return cks
}

// checkpointWithin runs a checkpoint that must commit within 5 s: before
// parking, a table commit failing for good held it (and every later
// one) for ever.
func parkedCheckpoint(t *testing.T, e *Engine) CheckpointResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint: %+v, %v (stuck %q)", res, err, e.Status().Stuck)
	}
	return res
}

// restartLands starts r's engine again, waits for its parked rows to
// land, and wants tableStream's table then to hold snapshots snapshots
// of records records (wantTableOf, when).
func restartLands(t *testing.T, r *rig, d committer.Reader, when string, snapshots int, records string) {
	t.Helper()
	e := r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, when, snapshots, records)
}

// waitUnparked waits (up to 5 s) for no table to be parked.
func waitUnparked(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Status().TablesParked != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still parked: %q", e.Status().TableParked)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantParked(t *testing.T, e *Engine, stream string) {
	t.Helper()
	st := e.Status()
	if st.TablesParked != 1 || st.Stuck != "" || !st.Ready {
		t.Fatalf("status: %d tables parked (%q), stuck %q, ready %v; want 1, nothing stuck, ready", st.TablesParked, st.TableParked, st.Stuck, st.Ready)
	}
	if _, err := send(e, nil, stream, 99, 1); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("a write to the parked stream %s: %v, want backpressure", stream, err)
	}
}

// TestTableParked: a version planted in stream A's table that claims its
// uuid and does not parse (table.ErrCorrupt, no retry cures it) parks A:
// the checkpoint holding files of A and B commits, B's later writes wait
// for their commit and get it, A's writes are refused with backpressure,
// the status counts one parked table. Once the planted file is gone, A's
// parked checkpoint lands in A's table once and A's writes are accepted
// again. Failed before: the checkpoint stayed stuck (a permanent stuck
// commit), and B's commits with it.
func TestTableParked(t *testing.T) {
	r, d, e := startParkRig(t)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	sendBoth := func(seq int64) {
		sendExpected(t, r, &exp, tableStream, seq)
		sendExpected(t, r, &exp, otherTable, seq)
	}
	sendBoth(1)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	sendBoth(2)
	parkedCheckpoint(t, e)
	wantParked(t, e, tableStream)
	reg := prometheus.NewRegistry()
	NewMetrics(reg, e.Status)
	if got := series(t, reg)["eosink_tables_parked"]; got != 1 {
		t.Fatalf("eosink_tables_parked %v, want 1", got)
	}
	// B goes on: a write waiting for its commit gets it.
	res, err := send(e, nil, otherTable, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	exp.Must[invariant.BatchID{Stream: otherTable, Seq: 3}] = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _, _ = e.Checkpoint(ctx) }()
	if err := e.Wait(ctx, res.Checkpoint); err != nil {
		t.Fatalf("wait for the commit of stream %s's write while %s is parked: %v", otherTable, tableStream, err)
	}
	wantTableOf(t, d, otherTable, "while A is parked", 3, "9")
	unplant(t, r, planted)
	waitUnparked(t, e)
	if got := series(t, reg)["eosink_tables_parked"]; got != 0 {
		t.Fatalf("eosink_tables_parked %v once unparked, want 0", got)
	}
	if cks := wantTableOf(t, d, tableStream, "after the planted version is gone", 2, "6"); cks[1] != 2 {
		t.Fatalf("A's snapshots name checkpoints %v, want the parked 2 last", cks)
	}
	if _, err := send(e, nil, tableStream, 4, 3); err != nil {
		t.Fatalf("a write to A once unparked: %v", err)
	}
	exp.Must[invariant.BatchID{Stream: tableStream, Seq: 4}] = true
	parkedCheckpoint(t, e)
	wantTableOf(t, d, tableStream, "after the next checkpoint", 3, "9")
	r.check(exp)
}

// TestTableParkedInOrder: two checkpoints of A parked (the one whose
// table commit failed, and the one open meanwhile, which goes behind it)
// land in checkpoint order, each once; with crash, the engine stops while
// the second is prepared (at its manifest) and the next start's replay
// parks it behind the first from the store's rows, refuses A's writes
// from the start, and lands both.
func TestTableParkedInOrder(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run("crash="+strconv.FormatBool(crash), func(t *testing.T) {
			r, d, e := startParkRig(t)
			exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
			must := func(s string, seq int64) { sendExpected(t, r, &exp, s, seq) }
			must(tableStream, 1)
			r.commit()
			planted := plantClaimingVersion(t, r, tableStream)
			must(tableStream, 2)
			must(otherTable, 2)
			// While checkpoint 2's table commit reads the planted version,
			// A's next batch goes into the open checkpoint.
			hook := func() { must(tableStream, 3) }
			d.hook.Store(&hook)
			first := parkedCheckpoint(t, e)
			if d.hook.Load() != nil {
				t.Fatal("the hook did not run")
			}
			wantParked(t, e, tableStream)
			must(otherTable, 3)
			if crash {
				d.armed.Store(true)
				r.crashCheckpoint(e)
				e = r.start(nil)
				wantParked(t, e, tableStream)
			} else {
				parkedCheckpoint(t, e)
			}
			rows, err := e.store.Parked()
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 || rows[0].Checkpoint != first.ID || rows[1].Checkpoint <= first.ID {
				t.Fatalf("parked rows %+v, want A's checkpoint %d and the next", rows, first.ID)
			}
			wantTableOf(t, d, otherTable, "while A is parked", 2, "6")
			unplant(t, r, planted)
			waitUnparked(t, e)
			cks := wantTableOf(t, d, tableStream, "after the planted version is gone", 3, "9")
			if cks[1] != rows[0].Checkpoint || cks[2] != rows[1].Checkpoint {
				t.Fatalf("A's snapshots name checkpoints %v, want ..., %d, %d", cks, rows[0].Checkpoint, rows[1].Checkpoint)
			}
			must(tableStream, 4)
			parkedCheckpoint(t, e)
			wantTableOf(t, d, tableStream, "after the next checkpoint", 4, "12")
			r.check(exp)
		})
	}
}

// TestTableParkedStoreLost: the state store is lost while A is parked,
// and B committed after A's parked checkpoint. The rebuild finishes the
// table commits of each table stream's newest manifests: A's parked one
// fails for good again and is parked again (not a stuck start, not
// lost), A's writes are refused, B goes on; once the planted version is
// gone A's checkpoint lands once. Failed before: the rebuild finished
// only the newest manifest's table commit (B's), so A's parked
// checkpoint was in no table and A's writes were accepted.
func TestTableParkedStoreLost(t *testing.T) {
	r := newLeasedRig(t, nil)
	d := newParkDest()
	r.publishTo(d)
	e := startParkTables(t, r)
	p := r.initProducer("p")
	mustSend(t, e, p, tableStream, 0, 3)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	mustSend(t, e, p, tableStream, 1, 3)
	mustSend(t, e, p, otherTable, 0, 3)
	parkedCheckpoint(t, e)
	wantParked(t, e, tableStream)
	mustSend(t, e, p, otherTable, 1, 3)
	parkedCheckpoint(t, e)
	r.stop()
	r.loseStore()

	e = r.start(nil)
	wantParked(t, e, tableStream)
	wantTableOf(t, d, otherTable, "after the start", 2, "6")
	ps := r.initState("p")
	if a, b := ps.Streams[tableStream].NextSeq, ps.Streams[otherTable].NextSeq; a != 2 || b != 2 {
		t.Fatalf("init after the loss: next_seq %d and %d, want 2 and 2 (every batch committed)", a, b)
	}
	p.Epoch = ps.Epoch
	mustSend(t, e, p, otherTable, 2, 3)
	parkedCheckpoint(t, e)
	unplant(t, r, planted)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the planted version is gone", 2, "6")
	wantTableOf(t, d, otherTable, "after the planted version is gone", 3, "9")
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for _, b := range []struct {
		s string
		n int64
	}{{tableStream, 2}, {otherTable, 3}} {
		for seq := int64(0); seq < b.n; seq++ {
			exp.Must[invariant.BatchID{Producer: "p", Stream: b.s, Seq: seq}] = true
		}
	}
	r.check(exp)
}

// TestTableParkedLandsOnce: the state store fails the delete of a parked
// row after its table commit landed (a failed write: the engine stops).
// The next start finds the row, lands it again, which finds the
// checkpoint's snapshot and appends nothing: the table holds it once.
func TestTableParkedLandsOnce(t *testing.T) {
	r, d := parkRig(t)
	f := r.withStoreFaults()
	e := r.startTable(tableConf)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for seq := int64(1); seq <= 2; seq++ {
		sendExpected(t, r, &exp, tableStream, seq)
		if seq == 1 {
			r.commit()
			continue
		}
		planted := plantClaimingVersion(t, r, tableStream)
		parkedCheckpoint(t, e)
		wantParked(t, e, tableStream)
		f.set(failOp("unpark", recovery.BeforeCommit, errPageEIO, 1))
		unplant(t, r, planted)
	}
	if !waitFailed(t, e, 5*time.Second) {
		t.Fatal("the engine did not stop on the failed delete of the landed row")
	}
	r.closeStopped(e)
	if f.fired == nil || f.fired[0] != "unpark" {
		t.Fatalf("faults fired: %v, want the unpark", f.fired)
	}
	f.set(nil)
	wantTableOf(t, d, tableStream, "after the landing whose row stayed", 2, "6")
	restartLands(t, r, d, "after the landing again", 2, "6")
	r.check(exp)
}

// TestTableParkedByReplay: the engine stops at a checkpoint's table
// commit; before the next start a version claiming the table is planted.
// The replay's Finish parks the stream as the live commit would: the
// start is ready, the other table stream's files of the same checkpoint
// are in its table, and the parked one lands once the file is gone.
func TestTableParkedByReplay(t *testing.T) {
	r, d, e := startParkRig(t)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	for seq := int64(1); seq <= 2; seq++ {
		sendExpected(t, r, &exp, tableStream, seq)
		sendExpected(t, r, &exp, otherTable, seq)
		if seq == 1 {
			r.commit()
		}
	}
	d.armedTable.Store(true)
	r.crashCheckpoint(e)
	planted := plantClaimingVersion(t, r, tableStream)
	e = r.start(nil)
	wantParked(t, e, tableStream)
	wantTableOf(t, d, otherTable, "after the replay", 2, "6")
	unplant(t, r, planted)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the planted version is gone", 2, "6")
	r.check(exp)
}

// Adversarial tests of parked tables (docs/tables.md "Parked tables").

// parkAfterOne commits batch 1 of tableStream into its table, plants a
// version claiming it, sends batch 2 and has its checkpoint park the
// stream; it returns the planted file. Both batches go into exp.
func parkAfterOne(t *testing.T, r *rig, e *Engine, exp *invariant.Expect) string {
	t.Helper()
	sendExpected(t, r, exp, tableStream, 1)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	sendExpected(t, r, exp, tableStream, 2)
	parkedCheckpoint(t, e)
	wantParked(t, e, tableStream)
	return planted
}

// TestTableParkedOlderStoreCopyLandsOnce: a copy of the state store taken
// while stream A is parked (its row A/N) comes back after the row landed
// and A's table took later commits, which expired N's snapshot
// (keep_snapshots 1; the node's newest snapshot always stays). The start
// finds the row again; landing it must see that the table holds it (a
// later checkpoint of this node is in A's table: A's later table commits
// came after its rows, in order), not append N's files a second time (I2).
func TestTableParkedOlderStoreCopyLandsOnce(t *testing.T) {
	r, d := parkRig(t)
	conf := tableConf
	conf.KeepSnapshots = 1
	e := r.startTable(conf)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	planted := parkAfterOne(t, r, e, &exp)
	// The copy: A's row is in it.
	r.stop()
	older := r.storeCopy()
	e = r.start(nil)
	unplant(t, r, planted)
	waitUnparked(t, e)
	for seq := int64(3); seq <= 5; seq++ {
		sendExpected(t, r, &exp, tableStream, seq)
		parkedCheckpoint(t, e)
	}
	wantTableOf(t, d, tableStream, "before the older copy comes back", 2, "15")
	r.stop()
	r.putStore(older)
	restartLands(t, r, d, "after the older copy's row landed again", 2, "15")
	r.check(exp)
}

// TestTableParkedLoopStopsWithEngine: the engine stops (a failed fsync at
// a checkpoint of the other stream) while A is parked and its row's retry
// is pending. The park loop must stop with it (I14: a failed fsync stops
// the engine everywhere; the next start's recovery decides), not go on
// committing A's parked checkpoint into its table and deleting the row
// from a store the stopped engine no longer trusts.
func TestTableParkedLoopStopsWithEngine(t *testing.T) {
	r, d, e := startParkRig(t)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	planted := parkAfterOne(t, r, e, &exp)
	// B's next checkpoint stops the engine at its manifest.
	sendExpected(t, r, &exp, otherTable, 2) // prepared: the replay commits it
	d.armed.Store(true)
	r.checkpointStops(e, 5*time.Second)
	// The operator removes the planted version; the stopped engine's
	// loop must not act on it (its retry is due every RetryMax, 5 ms).
	unplant(t, r, planted)
	time.Sleep(200 * time.Millisecond)
	wantTableOf(t, d, tableStream, "after the engine stopped", 1, "3")
	rows, err := e.store.Parked()
	if err != nil || len(rows) != 1 {
		t.Fatalf("parked rows after the engine stopped: %+v, %v; want A's, untouched", rows, err)
	}
	r.closeStopped(e)
	restartLands(t, r, d, "after the restart", 2, "6")
	r.check(exp)
}

// TestTableParkedSchemaEvolves: while A is parked, a PUT of a new
// optional field is refused (its check can't read the table: the planted
// version); once the planted version is gone and before the loop's next
// retry (RetryMax a minute here; a restart lands), it is accepted. The parked checkpoint
// (written under the old schema) lands under the new one, then A's
// writes: every record once, and the destination verifies.
func TestTableParkedSchemaEvolves(t *testing.T) {
	r, d := parkRig(t)
	tw := r.tweak
	r.tweak = func(c *Config) { tw(c); c.RetryMax = time.Minute } // no retry within the test: a restart lands
	e := r.startTable(tableConf)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	planted := parkAfterOne(t, r, e, &exp)
	evolved := tableConf
	evolved.Schema = &streamconf.Schema{Fields: append(append([]streamconf.Field(nil), testSchema.Fields...),
		streamconf.Field{Name: "extra", Type: streamconf.TypeString})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.PutStream(ctx, tableStream, evolved); err == nil {
		t.Fatal("PUT accepted while the table can't be read")
	}
	unplant(t, r, planted)
	if _, err := e.PutStream(ctx, tableStream, evolved); err != nil {
		t.Fatalf("PUT a new optional field once the planted version is gone: %v", err)
	}
	if e.Status().TablesParked != 1 {
		t.Fatal("landed before the PUT: the test did not test what it says")
	}
	r.stop()
	e = r.start(nil) // the loop's first pass lands the row
	waitUnparked(t, e)
	sendExpected(t, r, &exp, tableStream, 3)
	parkedCheckpoint(t, e)
	wantTableOf(t, d, tableStream, "after the landing and a write under the new schema", 3, "9")
	cat, err := catalog.New(catalog.Config{Files: d})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cat.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 || rep.Tables != 1 {
		t.Fatalf("verify: %d tables, problems %+v", rep.Tables, rep.Problems)
	}
	r.check(exp)
}

// TestTableParkedStorePhaseSweep: every state store write of parking and
// landing (A's checkpoint parks, the checkpoint open then parks behind
// it, B commits, the rows land and are deleted) fails in turn, before its
// commit (rolled back) or after it (durable, the error returned), with a
// write error that stops the engine. After a start without faults and
// the rows landed, the destination verifies: every file of A and B a
// manifest names is in its table, added by its checkpoint's own snapshot,
// none twice (catalog.Verify), and A's writes are accepted again.
func TestTableParkedStorePhaseSweep(t *testing.T) {
	for _, phase := range []recovery.Phase{recovery.BeforeCommit, recovery.AfterCommit} {
		for i := 0; ; i++ {
			fired := parkedStoreFault(t, phase, i)
			if !fired {
				break
			}
		}
	}
}

// parkedStoreFault runs the sweep's scenario with the i-th store write
// from the plant on failing at phase; false when there was none.
func parkedStoreFault(t *testing.T, phase recovery.Phase, i int) (fired bool) {
	t.Run(fmt.Sprintf("phase=%d/txn=%d", phase, i), func(t *testing.T) {
		r, d := parkRig(t)
		f := r.withStoreFaults()
		r.broken = "checked by catalog.Verify" // batches cut by the fault are not tracked
		e := r.start(nil)
		for _, s := range []string{tableStream, otherTable} {
			if _, err := e.PutStream(context.Background(), s, tableConf); err != nil {
				t.Fatal(err)
			}
			mustSend(t, e, nil, s, 1, 3)
		}
		r.commit()
		planted := plantClaimingVersion(t, r, tableStream)
		at := f.count() + i
		f.set(func(n int, _ string, ph recovery.Phase) error {
			if n == at && ph == phase {
				return errPageEIO
			}
			return nil
		})
		ckpt := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = e.Checkpoint(ctx)
		}
		_, _ = send(e, nil, tableStream, 2, 3)
		_, _ = send(e, nil, otherTable, 2, 3)
		hook := func() { _, _ = send(e, nil, tableStream, 3, 3) }
		d.hook.Store(&hook)
		ckpt()
		_, _ = send(e, nil, otherTable, 3, 3)
		ckpt()
		unplant(t, r, planted)
		waitLandedOrStopped(e, 2*time.Second)
		fired = len(f.fired) > 0
		f.set(nil)
		r.closeStopped(e)
		e = r.start(nil)
		waitUnparked(t, e)
		if _, err := send(e, nil, tableStream, 4, 3); err != nil {
			t.Fatalf("a write to A once unparked: %v", err)
		}
		parkedCheckpoint(t, e)
		wantVerified(t, d, 2, fmt.Sprintf("fault at store write %d (%v) from the plant, phase %d", i, f.fired, phase))
	})
	return fired
}

// nthTableCrash is a parkRig destination whose n-th publish of table
// metadata (counted from when armed, n >= 1) fails as a failed fsync
// would: the engine stops.
type nthTableCrash struct {
	*openHookDest
	left atomic.Int32 // publishes to let through before the crash; <0: none armed
}

func (d *nthTableCrash) Publish(ctx context.Context, name string, data []byte) error {
	if strings.Contains(name, "/metadata/") && d.left.Add(-1) == -1 {
		return fmt.Errorf("publish %s: %w: injected crash at a table commit", name, durable.ErrSync)
	}
	return d.openHookDest.Publish(ctx, name, data)
}

// TestTableParkedLandingCrashStoreLost: A parks with two rows (its
// checkpoint and the one open then), B commits meanwhile; once the
// planted version is gone the loop lands the rows, and the engine stops
// at the k-th table publish from there (the metadata or the hint of A's
// first landing, its second, or A's next live commit), with the state store
// lost or kept. After the start, whatever the rebuild or the rows still
// hold lands: every file of A and B is in its table once, by its
// checkpoint's own snapshot (catalog.Verify), and A's records are each
// in the table once.
func TestTableParkedLandingCrashStoreLost(t *testing.T) {
	for k := int32(1); ; k++ {
		crashed := false
		for _, lose := range []bool{false, true} {
			t.Run(fmt.Sprintf("crash=%d/lose=%v", k, lose), func(t *testing.T) {
				r := newLeasedRig(t, nil)
				d := &nthTableCrash{openHookDest: newParkDest()}
				d.left.Store(-1 << 30)
				r.publishTo(d)
				r.broken = "checked by catalog.Verify and the table's records"
				e := startParkTables(t, r)
				p := r.initProducer("p")
				mustSend(t, e, p, tableStream, 0, 3)
				mustSend(t, e, p, otherTable, 0, 3)
				r.commit()
				planted := plantClaimingVersion(t, r, tableStream)
				mustSend(t, e, p, tableStream, 1, 3)
				mustSend(t, e, p, otherTable, 1, 3)
				hook := func() { mustSend(t, e, p, tableStream, 2, 3) }
				d.hook.Store(&hook)
				parkedCheckpoint(t, e)
				mustSend(t, e, p, otherTable, 2, 3)
				parkedCheckpoint(t, e)
				if rows, err := e.store.Parked(); err != nil || len(rows) != 2 {
					t.Fatalf("parked rows %+v, %v; want 2", rows, err)
				}
				d.left.Store(k - 1)
				unplant(t, r, planted)
				waitLandedOrStopped(e, 30*time.Second)
				if e.Err() == nil {
					// Landed: the crash is in A's next live commit, or
					// beyond every publish of it (the sweep's end).
					mustSend(t, e, p, tableStream, 3, 3)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, _ = e.Checkpoint(ctx)
					cancel()
				}
				if e.Err() == nil {
					return
				}
				crashed = true
				r.closeStopped(e)
				if lose {
					r.loseStore()
				}
				e = r.start(nil)
				waitUnparked(t, e)
				ps := r.initState("p")
				a := ps.Streams[tableStream].NextSeq
				if a < 3 {
					t.Fatalf("A's next_seq %d after the start, want 3 or 4 (its three parked-then-landed batches are committed)", a)
				}
				p.Epoch = ps.Epoch
				mustSend(t, e, p, tableStream, a, 3)
				parkedCheckpoint(t, e)
				wantTableOf(t, d, tableStream, "at the end", int(a)+1-0, strconv.FormatInt((a+1)*3, 10))
				wantVerified(t, d, 2, "at the end")
			})
		}
		if !crashed {
			return
		}
	}
}

// plantNext plants, create-only, the next version of stream's table as
// a copy of its current one claiming a format version eosink can't read
// (it names the table's uuid: the commit can't pass over it). It returns
// the name, or "" when the version was taken meanwhile.
func plantNext(t *testing.T, r *rig, d committer.Reader, stream string) string {
	t.Helper()
	cur, err := table.Load(context.Background(), d, stream)
	if err != nil || cur.Version == 0 {
		return "" // planted already, or no table yet
	}
	b, err := readFile(r, layout.TableMetadataName(stream, cur.Version))
	if err != nil {
		return ""
	}
	b = tableplant.Claiming(t, b)
	name := layout.TableMetadataName(stream, cur.Version+1)
	f, err := r.fs.OpenFile(rigDest+"/"+name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return ""
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestTableParkedConcurrentProducers: producers write two table streams
// without pause (a refused write is resent later with the same sequence
// number) while checkpoints run back to back and a version claiming A's
// table is planted and removed again and again, so A parks and unparks
// under load, its rows landing while checkpoints with A's files commit.
// A stream never has more than two rows (the rebuild's bound), and at
// the end every accepted batch is in the files exactly once and every
// file of A and B in its table once, by its checkpoint's own snapshot.
func TestTableParkedConcurrentProducers(t *testing.T) {
	// A real directory: its create-only rename (RENAME_NOREPLACE) and the
	// plant's O_EXCL create are atomic, as the race between a commit and
	// a plant needs; the in-memory file system's are a check then an act.
	r, d := parkRigOn(t, noReplaceFs(t.TempDir()))
	e := r.start(nil)
	for _, s := range []string{tableStream, otherTable} {
		if _, err := e.PutStream(context.Background(), s, tableConf); err != nil {
			t.Fatal(err)
		}
		mustSend(t, e, nil, s, 0, 1)
	}
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{
		{Stream: tableStream, Seq: 0}: true, {Stream: otherTable, Seq: 0}: true}, Exact: true}
	r.commit()
	stop := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		p := r.initProducer(fmt.Sprintf("p%d", i))
		s := []string{tableStream, otherTable}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(0); ; {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := send(e, p, s, seq, 2); err != nil {
					if !errors.Is(err, ErrBackpressure) {
						t.Errorf("%s/%d: %v", s, seq, err)
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				exp.Must[invariant.BatchID{Producer: p.ID, Stream: s, Seq: seq}] = true
				mu.Unlock()
				seq++
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := checkpointIn(e)
			if err != nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
		}
	}()
	maxRows := 0
	start := time.Now()
	for el := time.Since(start); el < time.Second || maxRows == 0 && el < 10*time.Second; el = time.Since(start) {
		if planted := plantNext(t, r, d, tableStream); planted != "" {
			for j := 0; j < 10; j++ {
				rows, err := e.store.Parked()
				if err != nil {
					t.Fatal(err)
				}
				maxRows = max(maxRows, len(rows))
				time.Sleep(2 * time.Millisecond)
			}
			unplant(t, r, planted)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	parkedCheckpoint(t, e)
	waitUnparked(t, e)
	parkedCheckpoint(t, e)
	if maxRows > 2 {
		t.Fatalf("%d parked rows at once, want at most 2 (the rebuild's bound)", maxRows)
	}
	if maxRows == 0 {
		t.Fatal("A never parked: the test tested nothing")
	}
	wantVerified(t, d, 2, "at the end")
	t.Logf("%d batches, at most %d parked rows", len(exp.Must), maxRows)
	r.check(exp)
}

// noReplaceFs is the OS file system below dir, with the kernel's
// create-only rename (durable.OsFs) under its path mapping.
func noReplaceFs(dir string) afero.Fs {
	return &baseNoReplace{BasePathFs: afero.NewBasePathFs(durable.NewOsFs(), dir).(*afero.BasePathFs)}
}

type baseNoReplace struct{ *afero.BasePathFs }

func (b *baseNoReplace) RenameNoReplace(oldname, newname string) error {
	o, err := b.RealPath(oldname)
	if err != nil {
		return err
	}
	n, err := b.RealPath(newname)
	if err != nil {
		return err
	}
	return durable.RenameNoReplace(durable.NewOsFs(), o, n)
}

// TestTableParkedStoreFaultSweep fails each state store write transaction
// of a workload that parks a table stream and lands its commits in turn
// (refused for space before it writes, EIO before it writes, a failed
// fdatasync after its commit), restarts the engine when the fault
// stopped it, lets the parked commits land and checks the destination as
// `eosink verify` does: each table holds each committed checkpoint's
// files of its stream once, from its own snapshot, and nothing else; no
// file is missing or in no manifest; nothing stays parked.
func TestTableParkedStoreFaultSweep(t *testing.T) {
	txns := parkedSweepRun(t, "", -1)
	if txns < 5 {
		t.Fatalf("the workload runs only %d state store write transactions", txns)
	}
	modes := []string{"sync-eio", "enospc", "eio"}
	for _, mode := range modes {
		for n := 0; n < txns; n++ {
			parkedSweepRun(t, mode, n)
			if t.Failed() {
				return
			}
		}
	}
	t.Logf("parked tables store fault sweep: %d transactions, modes %v", txns, modes)
}

// parkedSweepRun runs the workload, failing its n-th store write
// transaction after the setup as mode says (n < 0: none), and returns
// how many the workload ran.
func parkedSweepRun(t *testing.T, mode string, n int) int {
	t.Helper()
	r, _ := parkRig(t)
	f := r.withStoreFaults()
	e := startParkTables(t, r)
	seq := int64(0)
	sendAll := func(streams ...string) {
		for _, s := range streams {
			seq++
			_, _ = send(e, nil, s, seq, 3) // refused under a fault: not counted
		}
	}
	try := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = e.Checkpoint(ctx)
		cancel()
	}
	sendAll(tableStream, otherTable)
	r.commit()
	planted := plantClaimingVersion(t, r, tableStream)
	base := f.count()
	where := fmt.Sprintf("mode %s, transaction %d", mode, n)
	if n >= 0 {
		var err error
		phase := recovery.BeforeCommit
		switch mode {
		case "enospc":
			err = errPageENOSPC
		case "eio":
			err = errPageEIO
		case "sync-eio":
			err, phase = syscall.EIO, recovery.AfterCommit
		}
		f.set(func(i int, _ string, ph recovery.Phase) error {
			if i == base+n && ph == phase {
				return err
			}
			return nil
		})
	}
	sendAll(tableStream, otherTable)
	try()
	sendAll(otherTable)
	try()
	unplant(t, r, planted)
	waitLandedOrStopped(e, 2*time.Second)
	ran := f.count() - base
	f.set(nil)
	f.mu.Lock()
	fired := len(f.fired)
	f.mu.Unlock()
	if n >= 0 && fired == 0 {
		t.Fatalf("%s: the fault never fired", where)
	}
	if e.Err() != nil {
		r.closeStopped(e)
		e = r.start(nil)
	}
	try() // what an aborted or stopped checkpoint left open
	deadline := time.Now().Add(5 * time.Second)
	for e.Status().TablesParked != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still parked: %s", where, e.Status().TableParked)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := e.Status(); st.Stuck != "" {
		t.Fatalf("%s: stuck %q", where, st.Stuck)
	}
	r.stop()
	wantVerified(t, local.New(r.fs, rigDest, rigStaging), 2, where)
	return ran
}

// TestParkKickNotLostAfterWait: a kick (a table commit just parked) sent
// after the park loop's timed wait returned must still be there for the
// loop's next wait. The loop reads the store before it waits, so a kick
// consumed by nobody leaves a freshly parked row unretried (and its
// stream's writes refused) until some later park kicks again. Failed
// before: the wait's helper goroutine, not yet scheduled when the timer
// ended the wait, picked between its cancelled context and the kick at
// random and swallowed the kick about half the time.
func TestParkKickNotLostAfterWait(t *testing.T) {
	lc := &lifecycle{e: &Engine{}, parkKick: make(chan struct{}, 1)}
	lc.e.health.failed = make(chan struct{})
	ctx := context.Background()
	for i := range 300 {
		if !lc.waitParkKick(ctx, time.Nanosecond) {
			t.Fatal("the wait reported the end")
		}
		select {
		case lc.parkKick <- struct{}{}:
		default:
			t.Fatal("a kick is pending before any was sent")
		}
		time.Sleep(200 * time.Microsecond) // a stale helper would run now
		select {
		case <-lc.parkKick:
		default:
			t.Fatalf("wait %d: the kick sent after the wait returned was swallowed", i)
		}
	}
}
