package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

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
