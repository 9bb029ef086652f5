package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/internal/testing/tableplant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

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
	e := r.start(nil)
	conf := tableConf
	conf.KeepSnapshots = 1
	if _, err := e.PutStream(context.Background(), tableStream, conf); err != nil {
		t.Fatal(err)
	}
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	planted := parkAfterOne(t, r, e, &exp)
	// The copy: A's row is in it.
	r.stop()
	older, err := os.ReadFile(r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	unplant(t, r, planted)
	waitUnparked(t, e)
	for seq := int64(3); seq <= 5; seq++ {
		sendExpected(t, r, &exp, tableStream, seq)
		parkedCheckpoint(t, e)
	}
	wantTableOf(t, d, tableStream, "before the older copy comes back", 2, "15")
	r.stop()
	if err := os.WriteFile(r.storePath, older, 0o600); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the older copy's row landed again", 2, "15")
	r.check(exp)
}

// TestTableParkedLoopStopsWithEngine: the engine stops (a failed fsync at
// a checkpoint of the other stream) while A is parked and its row's retry
// is pending. The park loop must stop with it (I14: a failed fsync stops
// the engine everywhere; the next start's recovery decides), not go on
// committing A's parked checkpoint into its table and deleting the row
// from a store the stopped engine no longer trusts.
func TestTableParkedLoopStopsWithEngine(t *testing.T) {
	r, d := parkRig(t)
	e := startParkTables(t, r)
	exp := invariant.Expect{Must: map[invariant.BatchID]bool{}, Exact: true}
	planted := parkAfterOne(t, r, e, &exp)
	// B's next checkpoint stops the engine at its manifest.
	sendExpected(t, r, &exp, otherTable, 2) // prepared: the replay commits it
	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.Checkpoint(ctx); err == nil {
		t.Fatal("checkpoint passed with its injected failed fsync")
	}
	select {
	case <-e.Failed():
	case <-ctx.Done():
		t.Fatal("the engine did not stop")
	}
	// The operator removes the planted version; the stopped engine's
	// loop must not act on it (its retry is due every RetryMax, 5 ms).
	unplant(t, r, planted)
	time.Sleep(200 * time.Millisecond)
	wantTableOf(t, d, tableStream, "after the engine stopped", 1, "3")
	rows, err := e.store.Parked()
	if err != nil || len(rows) != 1 {
		t.Fatalf("parked rows after the engine stopped: %+v, %v; want A's, untouched", rows, err)
	}
	_ = e.Close() // stopped already: its error is the injected one
	r.e = nil
	e = r.start(nil)
	waitUnparked(t, e)
	wantTableOf(t, d, tableStream, "after the restart", 2, "6")
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
	e := r.start(nil)
	if _, err := e.PutStream(context.Background(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
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
			if _, err := send(e, nil, s, 1, 3); err != nil {
				t.Fatal(err)
			}
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
		_ = e.Close()
		r.e = nil
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
				_ = e.Close()
				r.e = nil
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
		if _, err := send(e, nil, s, 0, 1); err != nil {
			t.Fatal(err)
		}
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := e.Checkpoint(ctx)
			cancel()
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
