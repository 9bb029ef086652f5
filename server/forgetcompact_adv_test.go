package server

import (
	"bytes"
	"testing"

	"github.com/eosink/eosink/internal/layout"
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
