package server

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
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
	if _, err := send(r.e, nil, stream, seq, 3); err != nil {
		t.Fatal(err)
	}
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
	r, d := parkRig(t)
	e := startParkTables(t, r)
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
			r, d := parkRig(t)
			e := startParkTables(t, r)
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
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
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
	select {
	case <-e.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the engine did not stop on the failed delete of the landed row")
	}
	_ = e.Close() // its error is the injected one
	r.e = nil
	if f.fired == nil || f.fired[0] != "unpark" {
		t.Fatalf("faults fired: %v, want the unpark", f.fired)
	}
	f.set(nil)
	wantTableOf(t, d, tableStream, "after the landing whose row stayed", 2, "6")
	e = r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the landing again", 2, "6")
	r.check(exp)
}

// TestTableParkedByReplay: the engine stops at a checkpoint's table
// commit; before the next start a version claiming the table is planted.
// The replay's Finish parks the stream as the live commit would: the
// start is ready, the other table stream's files of the same checkpoint
// are in its table, and the parked one lands once the file is gone.
func TestTableParkedByReplay(t *testing.T) {
	r, d := parkRig(t)
	e := startParkTables(t, r)
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
