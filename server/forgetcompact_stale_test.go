package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

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
