package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// forgetHistory is a node's history with every kind of forget the
// rebuild must honour or ignore, left on a CrashFS with the engine that
// made it running (to compact). What the rebuild must derive from it:
//
//   - p0: deleted, never back: forgotten;
//   - p1: deleted, created again and committed, deleted again: two
//     documents, the later one dominates; forgotten;
//   - p2, p3, p4: expired (one document); p3 inited again, nothing
//     committed since: forgotten;
//   - p5: named by a document whose forget did not happen (published, then
//     the producer wrote on at the same epoch): the document is void for
//     it by its own checkpoint, older than documents merged with it;
//     kept;
//   - p6: never forgotten: kept.
type forgetHistory struct {
	r     *rig
	base  *faultfs.CrashFS
	older []byte // a copy of the state store taken half way
	ids   []string
	clock *time.Time
}

func newForgetHistory(t *testing.T) *forgetHistory {
	t.Helper()
	h := &forgetHistory{base: faultfs.NewCrashFS()}
	clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	h.clock = &clock
	h.r = newRig(t, h.base)
	h.r.tweak = func(c *Config) {
		c.Now = func() time.Time { return clock }
		c.ProducerExpiry = time.Hour
	}
	r := h.r
	e := r.start(nil)
	ctx := t.Context()
	must := map[invariant.BatchID]bool{}
	seqs := map[string]int64{}
	prods := map[string]*Producer{}
	write := func(id string) {
		t.Helper()
		p := prods[id]
		mustSend(t, e, p, "s", seqs[p.ID], 1)
		must[invariant.BatchID{Producer: p.ID, Stream: "s", Seq: seqs[p.ID]}] = true
		seqs[p.ID]++
	}
	initAs := func(id, name string) {
		t.Helper()
		p := r.initProducer(id)
		p.ID = name
		prods[id] = p
	}
	for i := range 7 {
		id := fmt.Sprintf("p%d", i)
		h.ids = append(h.ids, id)
		initAs(id, id+"~1")
		write(id)
	}
	r.commit()
	del := func(id string) {
		t.Helper()
		if err := e.DeleteProducer(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	del("p0")
	del("p1")
	initAs("p1", "p1~2")
	write("p1")
	r.commit()
	// p5's forget published, then not done: it writes on at its epoch.
	e.ing.mu.Lock()
	after := e.ing.openID - 1
	e.ing.mu.Unlock()
	st, _ := e.Producer("p5")
	forgot := layout.Forgotten{Node: rigNode, After: after, Producers: map[string]int64{"p5": st.Epoch}}
	if err := e.life.seal.Seal(&forgot); err != nil { // as the node published it
		t.Fatal(err)
	}
	doc, err := json.Marshal(&forgot)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.config(h.base).Publisher.Publish(ctx, layout.ForgottenName(rigNode, after, 900), doc); err != nil {
		t.Fatal(err)
	}
	write("p5")
	r.commit()
	del("p1")
	r.stop()
	if h.older, err = os.ReadFile(r.storePath); err != nil {
		t.Fatal(err)
	}
	e = r.start(nil)
	clock = clock.Add(2 * time.Hour)
	write("p5")
	write("p6")
	r.commit()
	if n, err := e.ExpireProducers(clock); err != nil || n != 3 {
		t.Fatalf("expire: %d, %v; want p2, p3, p4", n, err)
	}
	r.initProducer("p3")
	write("p6")
	r.commit()
	r.last = invariant.Expect{Must: must, Exact: true}
	return h
}

// forgottenDocs counts the regular and merged forgotten-producers
// documents on fs.
func forgottenDocs(t *testing.T, fs afero.Fs) (regular, merged int) {
	t.Helper()
	l := local.New(fs, rigDest, rigStaging)
	es, err := l.List(t.Context(), layout.ForgottenDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		if _, _, _, ok := layout.ParseForgottenName(en.Path); ok {
			regular++
		}
		if _, _, _, ok := layout.ParseForgottenMergedName(en.Path); ok {
			merged++
		}
	}
	return regular, merged
}

// derived is what a start after a store loss derives: each producer's
// state (absent: forgotten) and the epoch a new producer gets (the floor).
type derived struct {
	Producers map[string]ProducerState
	NewEpoch  int64
}

// derive starts a node on fs with its state store lost (or replaced by
// store) and reads what it derived. fs is used up.
func derive(t *testing.T, fs afero.Fs, ids []string, store []byte) derived {
	t.Helper()
	r := newRig(t, fs)
	r.broken = "checked where the history was made"
	if store != nil {
		r.putStore(store)
	}
	e := r.start(nil)
	defer r.stop()
	out := derived{Producers: map[string]ProducerState{}}
	for _, id := range ids {
		if st, ok := e.Producer(id); ok {
			out.Producers[id] = st
		}
	}
	st, err := e.InitProducer(t.Context(), "a-new-one")
	if err != nil {
		t.Fatal(err)
	}
	out.NewEpoch = st.Epoch
	return out
}

// The compaction leaves the rebuild deriving what it derived before: with
// the store lost and with an older copy of it (whose newest commit skips
// some entries), every producer's state and the epoch floor are the same,
// and the regular documents are gone. The history makes a wrong merge
// show: entries given their merged document's checkpoint forget p5,
// entries lost bring p0..p4 back, a lost epoch lowers the floor.
func TestForgottenCompactionSameRebuild(t *testing.T) {
	h := newForgetHistory(t)
	before := h.base.CrashClone()
	reg, merged := forgottenDocs(t, before)
	if reg != 5 || merged != 0 {
		t.Fatalf("history left %d documents and %d merged; want 5 and 0", reg, merged)
	}
	res, err := h.r.e.CompactForgotten(t.Context())
	if err != nil || res.Removed != 5 || res.Written != 1 {
		t.Fatalf("compaction: %+v, %v; want the 5 documents merged into 1", res, err)
	}
	after := copyFS(t, h.base) // the removals are not synced: as a running node sees it
	if reg, merged := forgottenDocs(t, after); reg != 0 || merged != 1 {
		t.Fatalf("after the compaction: %d documents and %d merged; want 0 and 1", reg, merged)
	}
	for _, store := range []struct {
		name string
		data []byte
	}{{"lost", nil}, {"older", h.older}} {
		t.Run(store.name, func(t *testing.T) {
			want := derive(t, before.CrashClone(), h.ids, store.data)
			if store.data == nil {
				for _, id := range []string{"p0", "p1", "p2", "p3", "p4"} {
					if st, ok := want.Producers[id]; ok {
						t.Fatalf("without compaction, the rebuild brought forgotten %s back: %+v", id, st)
					}
				}
			}
			for _, id := range []string{"p5", "p6"} {
				if _, ok := want.Producers[id]; !ok {
					t.Fatalf("without compaction, the rebuild lost %s", id)
				}
			}
			got := derive(t, after.CrashClone(), h.ids, store.data)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the rebuild after compaction derived\n%+v\nbefore it\n%+v", got, want)
			}
		})
	}
	// A second compaction finds nothing to do.
	if res, err := h.r.e.CompactForgotten(t.Context()); err != nil || res.Read != 0 {
		t.Fatalf("second compaction: %+v, %v", res, err)
	}
}

// compactKinds are the operations the compaction sweep fails: the reads,
// the publish (write, sync, rename, directory sync) and the removals.
var compactKinds = sweepKinds

// The fault sweep of the compaction: every filesystem operation of it
// fails in turn (an error, the compaction retried later) or is the last
// before the process dies and the power goes (CrashAfter, then the disk as
// a power cut leaves it); each time the rebuild derives what it derived
// before, and a compaction after the fault leaves no regular document.
// A failed fsync must come back as an error that stops the engine (I14).
func TestForgottenCompactionFaultSweep(t *testing.T) {
	h := newForgetHistory(t)
	h.r.stop()
	store, err := os.ReadFile(h.r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	snap := h.base.CrashClone()
	want := derive(t, snap.CrashClone(), h.ids, nil)
	for _, mode := range []string{"fail", "crash"} {
		kinds := map[faultfs.OpKind]int{}
		for n := int64(0); ; n++ {
			op, ok := compactSweepRun(t, mode, n, snap.CrashClone(), store, h.ids, want)
			if !ok {
				t.Logf("%s: %d operations of the compaction swept: %v", mode, n, kinds)
				break
			}
			kinds[op.Kind]++
			if n > 300 {
				t.Fatalf("%s: more than 300 operations in one compaction", mode)
			}
		}
		if kinds[faultfs.OpSync] == 0 || kinds[faultfs.OpRemove] == 0 || kinds[faultfs.OpRename] == 0 {
			t.Fatalf("%s: swept %v: the sweep missed the publish or the removals", mode, kinds)
		}
	}
}

// compactSweepRun starts the node of the history on fs with its store,
// compacts with operation n failing (mode "fail") or the process dying
// after it ("crash"), then checks what a start after a power cut and a
// store loss derives, and what it derives after another compaction. It
// reports operation n, and whether it happened.
func compactSweepRun(t *testing.T, mode string, n int64, fs *faultfs.CrashFS, store []byte, ids []string, want derived) (faultfs.Op, bool) {
	t.Helper()
	sw := &faultfs.SwapInjector{}
	inj := faultfs.NewInjectFS(fs, sw)
	r := newRig(t, inj)
	r.broken = "checked where the history was made"
	r.putStore(store)
	e := r.start(nil)
	var fired bool
	var op faultfs.Op
	var res ForgottenCompaction
	var err error
	if mode == "fail" {
		f := faultfs.FailNth(n, compactKinds, syscall.EIO)
		sw.Set(f)
		res, err = e.CompactForgotten(t.Context())
		sw.Set(nil)
		op, fired = f.Fired()
	} else {
		c := faultfs.CrashAfter(n, compactKinds)
		var mu sync.Mutex
		var ops []faultfs.Op
		sw.Set(faultfs.InjectorFunc(func(o faultfs.Op) error {
			if compactKinds.Has(o.Kind) {
				mu.Lock()
				ops = append(ops, o)
				mu.Unlock()
			}
			return c.MaybeError(o)
		}))
		res, err = e.CompactForgotten(t.Context())
		sw.Set(nil)
		if fired = c.Crashed(); fired {
			op = ops[n]
		}
	}
	if !fired {
		if err != nil || res.Removed == 0 {
			t.Fatalf("%s %d: a compaction without a fault: %+v, %v", mode, n, res, err)
		}
	}
	if fired && mode == "fail" && err == nil && op.Kind != faultfs.OpRead && op.Kind != faultfs.OpStat && op.Kind != faultfs.OpOpen {
		t.Logf("%s %d: %v failed, the compaction still succeeded", mode, n, op)
	}
	if mode == "fail" && fired && op.Kind == faultfs.OpSync && classify(err) != verdictStop {
		t.Fatalf("%s %d: a failed fsync (%v) came back as %v, which does not stop the engine", mode, n, op, err)
	}
	r.stop()
	cut := fs.CrashClone()
	if got := derive(t, cut.CrashClone(), ids, nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %d (%v, compaction %+v, %v): after a power cut the rebuild derived\n%+v\nwant\n%+v", mode, n, op, res, err, got, want)
	}
	if mode == "fail" {
		// Without a power cut, the node goes on and compacts again.
		if got := derive(t, fs.CrashClone(), ids, nil); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %d: the rebuild derived\n%+v\nwant\n%+v", mode, n, got, want)
		}
	}
	// The next compaction (the next start's store is the one the
	// history left) finishes the work.
	r2 := newRig(t, cut)
	r2.broken = r.broken
	if err := os.WriteFile(r2.storePath, store, 0o600); err != nil {
		t.Fatal(err)
	}
	e2 := r2.start(nil)
	if _, err := e2.CompactForgotten(t.Context()); err != nil {
		t.Fatalf("%s %d: the compaction after the fault: %v", mode, n, err)
	}
	r2.stop()
	if reg, _ := forgottenDocs(t, cut); reg != 0 {
		t.Fatalf("%s %d: %d regular documents left after the compaction that followed", mode, n, reg)
	}
	if got := derive(t, cut.CrashClone(), ids, nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %d: after the next compaction the rebuild derived\n%+v\nwant\n%+v", mode, n, got, want)
	}
	return op, fired
}

// A removal that fails is retried by the next run, and never stops the
// engine or holds back a commit: the loop's error goes through the
// failure policy (a retry verdict), and a checkpoint commits meanwhile.
func TestForgottenCompactionRemoveFailureRetried(t *testing.T) {
	h := newForgetHistory(t)
	r := h.r
	sw := &faultfs.SwapInjector{}
	inj := faultfs.NewInjectFS(h.base, sw)
	r.stop()
	r.fs = inj
	e := r.start(nil)
	f := faultfs.FailNth(0, faultfs.Kinds(faultfs.OpRemove), syscall.EIO)
	sw.Set(f)
	res, err := e.CompactForgotten(t.Context())
	sw.Set(nil)
	if _, fired := f.Fired(); !fired || err == nil || res.Written != 1 || res.Removed != 0 {
		t.Fatalf("compaction with a failing removal: %+v, %v", res, err)
	}
	if v := classify(err); v != verdictRetry {
		t.Fatalf("a failed removal classified %v, want retry", v)
	}
	if e.Err() != nil {
		t.Fatalf("the engine stopped: %v", e.Err())
	}
	p := r.initProducer("p6")
	p.ID = "p6~1"
	mustSend(t, e, p, "s", 0, 1)
	if res := r.checkpoint(); res.State != recovery.Committed {
		t.Fatalf("a checkpoint after the failed compaction: %+v", res)
	}
	r.broken = "p6's new epoch restarts its sequence numbers in the records" // not what this test checks
	res, err = e.CompactForgotten(t.Context())
	if err != nil || res.Removed == 0 {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	if reg, merged := forgottenDocs(t, h.base); reg != 0 || merged == 0 {
		t.Fatalf("after the retry: %d documents, %d merged", reg, merged)
	}
}

// copyFS returns a CrashFS holding what src holds now, all of it synced.
func copyFS(t *testing.T, src afero.Fs) *faultfs.CrashFS {
	t.Helper()
	dst := faultfs.NewCrashFS()
	var dirs []string
	err := afero.Walk(src, "/", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			dirs = append(dirs, p)
			return dst.MkdirAll(p, 0o755)
		}
		data, err := afero.ReadFile(src, p)
		if err != nil {
			return err
		}
		f, err := dst.Create(p)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		f, err := dst.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	return dst
}

// The compaction loop runs by itself once forgottenCompactAt documents
// wait, and not before.
func TestForgottenCompactionLoop(t *testing.T) {
	r := newRig(t, nil)
	r.tweak = func(c *Config) { c.ForgottenCompactInterval = 5 * time.Millisecond }
	e := r.start(nil)
	for i := range forgottenCompactAt {
		id := fmt.Sprintf("p%02d", i)
		r.initProducer(id)
		if i == forgottenCompactAt-1 {
			time.Sleep(50 * time.Millisecond) // runs of the loop with one document too few
			if reg, merged := forgottenDocs(t, r.fs); reg != forgottenCompactAt-1 || merged != 0 {
				t.Fatalf("with %d documents waiting: %d left, %d merged", forgottenCompactAt-1, reg, merged)
			}
		}
		if err := e.DeleteProducer(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		reg, merged := forgottenDocs(t, r.fs)
		if reg == 0 && merged == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop left %d documents, %d merged", reg, merged)
		}
	}
}

// Documents under the node's prefix that it did not write, or that no
// longer parse, sorting first (the lowest checkpoints) and as large as
// one compaction's read budget, do not stop the compaction: it merges
// and removes the node's own documents behind them and leaves them as
// they are. Failed before: the listing's sizes filled the budget with
// them, every run read only them, believed none, and compacted nothing,
// for ever (the node's documents then grow with every forget, I11).
func TestForgottenCompactionPastUnbelievedDocuments(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int
	}{
		{"one-oversize", []int{forgottenCompactBytes + 1}},
		{"budget-of-damaged", func() []int {
			s := make([]int, 17)
			for i := range s {
				s[i] = layout.MaxForgottenDoc - 10
			}
			return s
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newForgetHistory(t)
			pub := h.r.config(h.base).Publisher
			var planted []string
			for i, n := range c.sizes {
				name := layout.ForgottenName(rigNode, 0, i)
				if err := pub.Publish(t.Context(), name, bytes.Repeat([]byte("{"), n)); err != nil {
					t.Fatal(err)
				}
				planted = append(planted, name)
			}
			res, err := h.r.e.CompactForgotten(t.Context())
			if err != nil || res.Removed != 5 || res.Written != 1 {
				t.Fatalf("compaction: %+v, %v; want the node's 5 documents merged into 1", res, err)
			}
			if reg, merged := forgottenDocs(t, h.base); reg != len(planted) || merged != 1 {
				t.Fatalf("after the compaction: %d documents and %d merged; want the %d planted and 1", reg, merged, len(planted))
			}
		})
	}
}

// A document under the node's prefix beyond the ids it may have used
// (planted: the start ignores it, as not its own) is not merged with the
// node's own: the rebuild after a store loss derives after the compaction
// what it derived before. Failed before: the compaction merged it, its
// checkpoint became the merged document's, beyond the start's limit, and
// the start ignored the merged document whole: the producers the node
// forgot (p0..p4) came back from the manifests (I12), and a planted
// document the start ignored was believed once merged (I13).
func TestForgottenCompactionLeavesDocumentsBeyondItsIDs(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  func() (string, any)
	}{
		{"regular", func() (string, any) {
			return layout.ForgottenName(rigNode, layout.MaxCheckpoint, 0),
				&layout.Forgotten{Node: rigNode, After: layout.MaxCheckpoint, Producers: map[string]int64{"zz": 0}}
		}},
		{"merged", func() (string, any) {
			return layout.ForgottenMergedName(rigNode, layout.MaxCheckpoint, layout.MaxCheckpoint, 0),
				&layout.ForgottenMerged{Node: rigNode, Through: layout.MaxCheckpoint, Entries: []layout.ForgottenEntry{{Producer: "p6", After: 1 << 20, Epoch: 1 << 20}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newForgetHistory(t)
			name, doc := c.doc()
			body, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.r.config(h.base).Publisher.Publish(t.Context(), name, body); err != nil {
				t.Fatal(err)
			}
			before := h.base.CrashClone()
			if _, err := h.r.e.CompactForgotten(t.Context()); err != nil {
				t.Fatal(err)
			}
			after := copyFS(t, h.base)
			want := derive(t, before.CrashClone(), h.ids, nil)
			if _, ok := want.Producers["p6"]; !ok {
				t.Fatalf("without compaction, the planted document forgot p6")
			}
			got := derive(t, after.CrashClone(), h.ids, nil)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the rebuild after compaction derived\n%+v\nbefore it\n%+v", got, want)
			}
			if ok, _ := afero.Exists(after, rigDest+"/"+name); !ok {
				t.Fatalf("the compaction removed %s, which the node did not write", name)
			}
		})
	}
}

// Compactions running while producers are deleted (each DELETE publishes
// a document the compaction may or may not have listed) and committed
// between: a rebuild after a store loss brings none of the deleted back
// and keeps every other.
func TestForgottenCompactionBesideDeletes(t *testing.T) {
	base := faultfs.NewCrashFS()
	r := newRig(t, base)
	e := r.start(nil)
	const n = 40
	var ids []string
	for i := range n {
		id := fmt.Sprintf("q%02d", i)
		ids = append(ids, id)
		mustSend(t, e, r.initProducer(id), "s", 0, 1)
	}
	r.commit()
	done := make(chan struct{})
	var compactions, removed int
	go func() {
		defer close(done)
		for i := 0; i < n; i += 2 {
			if err := e.DeleteProducer(t.Context(), ids[i]); err != nil {
				t.Errorf("delete %s: %v", ids[i], err)
				return
			}
			if i%8 == 0 {
				if res := r.checkpoint(); res.State != recovery.Committed {
					t.Errorf("checkpoint: %+v", res)
					return
				}
			}
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		res, err := e.CompactForgotten(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		compactions++
		removed += res.Removed
	}
	if _, err := e.CompactForgotten(t.Context()); err != nil {
		t.Fatal(err)
	}
	if removed == 0 {
		t.Fatalf("%d compactions beside the deletes removed nothing", compactions)
	}
	r.stop()
	// As the disk is (the removals are not synced), and as a power cut
	// leaves it.
	for _, fs := range []afero.Fs{copyFS(t, base), base.CrashClone()} {
		got := derive(t, fs, ids, nil)
		for i, id := range ids {
			if _, ok := got.Producers[id]; ok != (i%2 == 1) {
				t.Fatalf("after %d compactions and a store loss, %s present %v; want %v", compactions, id, ok, i%2 == 1)
			}
		}
	}
}

// removeGate is the rig's local publisher whose Remove of one name waits
// (after the compaction's lease check passed) until released: a process
// stalled there (a host suspended, a request held up).
type removeGate struct {
	*local.Local
	gate    string
	entered chan struct{}
	release chan struct{}
}

func (g *removeGate) Remove(ctx context.Context, name string) error {
	if name == g.gate {
		close(g.entered)
		<-g.release
	}
	return g.Local.Remove(ctx, name)
}

// TestForgottenCompactionStaleRemoveABA: a stale compaction never
// removes a merged document another process published since (ABA).
//
// Process A reads a small merged document M0 (merged-<a0>-0000) and
// stalls in its Remove, past the lease check. Meanwhile the node's next
// process B (lease taken over) compacts twice, as its compaction may:
// first M0 and A's merged document into one, removing them; then, with
// more than 4096 entries split into chunks, a chunk holding only entries
// up to a0 under the first free name of that checkpoint — M0's. A wakes
// and removes it: the only copy of p0's forget is gone, and a rebuild
// after a store loss brings p0 back with its old committed_seq (I12).
// B's two runs are written out by hand here (the chunk split needs 4096
// producers). It failed so while merged names were <through>-<n> (the
// first free one, reused after a removal); now a merged name carries the
// checkpoint its publisher had open, which no other process has
// (layout.ForgottenMergedName), so B's chunk lands elsewhere.
func TestForgottenCompactionStaleRemoveABA(t *testing.T) {
	base := faultfs.NewCrashFS()
	r := newRig(t, base)
	gate := &removeGate{entered: make(chan struct{}), release: make(chan struct{})}
	r.tweak = func(c *Config) {
		gate.Local = local.New(c.FS, rigDest, rigStaging)
		c.Publisher = gate
	}
	e := r.start(nil)
	ctx := t.Context()
	ids := []string{"p0", "p1", "p2"}
	for _, id := range ids {
		mustSend(t, e, r.initProducer(id), "s", 0, 1)
	}
	r.commit()
	if err := e.DeleteProducer(ctx, "p0"); err != nil {
		t.Fatal(err)
	}
	aOpen := e.Status().OpenID
	if res, err := e.CompactForgotten(ctx); err != nil || res.Written != 1 {
		t.Fatalf("first compaction: %+v %v", res, err)
	}
	mustSend(t, e, &Producer{ID: "p2", Epoch: 0}, "s", 1, 1)
	r.commit()
	if err := e.DeleteProducer(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	l := local.New(base, rigDest, rigStaging)
	merged := func() []string {
		es, err := l.List(ctx, layout.ForgottenDir+"/")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, en := range es {
			if _, _, _, ok := layout.ParseForgottenMergedName(en.Path); ok {
				out = append(out, en.Path)
			}
		}
		return out
	}
	m0 := merged()[0]
	_, a0, _, _ := layout.ParseForgottenMergedName(m0)
	if want := layout.ForgottenMergedName(rigNode, a0, aOpen, 0); m0 != want {
		t.Fatalf("A published %s, want %s: a merged name carries its publisher's open checkpoint", m0, want)
	}
	gate.gate = m0
	done := make(chan error, 1)
	go func() { _, err := e.CompactForgotten(ctx); done <- err }() // process A
	<-gate.entered
	// Process B, run 1: everything into one merged document, the rest
	// removed (M0 among them).
	var all []layout.ForgottenEntry
	for _, name := range merged() {
		rc, _, err := l.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := layout.DecodeForgottenMerged(name, rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m.Entries...)
	}
	all = layout.MergeForgotten(all)
	// B names its documents as the engine does, with the checkpoint it
	// has open: beyond every id A used (I8).
	bOpen := a0 + 1<<40
	publish := func(entries []layout.ForgottenEntry) string {
		doc := layout.ForgottenMerged{Node: rigNode, Entries: entries}
		for _, en := range entries {
			doc.Through = max(doc.Through, en.After)
		}
		body, err := json.Marshal(&doc)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; ; n++ {
			name := layout.ForgottenMergedName(rigNode, doc.Through, bOpen, n)
			if ok, _ := afero.Exists(base, rigDest+"/"+name); ok {
				continue
			}
			if err := l.Publish(ctx, name, body); err != nil {
				t.Fatal(err)
			}
			return name
		}
	}
	before := merged()
	mb := publish(all)
	for _, name := range before {
		if err := l.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// Run 2: the entries split into chunks, the first holding only those
	// up to a0 (p0's), under the first free name of a0: M0's.
	var old, rest []layout.ForgottenEntry
	for _, en := range all {
		if en.After <= a0 {
			old = append(old, en)
		} else {
			rest = append(rest, en)
		}
	}
	if got := publish(old); got == m0 {
		t.Fatalf("B's chunk of old entries published under M0's name %s: a merged name reused", got)
	}
	publish(rest)
	if err := l.Remove(ctx, mb); err != nil {
		t.Fatal(err)
	}
	close(gate.release) // A wakes and goes on removing
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.stop()
	got := derive(t, copyFS(t, base), ids, nil)
	for _, id := range []string{"p0", "p1"} {
		if st, ok := got.Producers[id]; ok {
			t.Errorf("deleted %s came back after a store loss: %+v (I12)", id, st)
		}
	}
}
