package recovery

import (
	"errors"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// A manifest that exists already is "published" only when it holds the
// bytes this checkpoint's manifest has (an earlier try of the same
// Finish); other bytes — a checkpoint id reused after the state store was
// lost — are a conflict, never success.
func TestFinishComparesExistingManifest(t *testing.T) {
	cases := []struct {
		name     string
		existing func(own []byte) []byte // nil: no manifest yet
		conflict bool
	}{
		{"absent", nil, false},
		{"same bytes", func(own []byte) []byte { return own }, false},
		{"other bytes", func([]byte) []byte { return []byte(`{"checkpoint": 3, "node": "n1", "files": []}`) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := openTemp(t)
			defer st.Close()
			fs := afero.NewMemMapFs()
			l := local.New(fs, "/dest", "/staging")
			if err := afero.WriteFile(fs, "/staging/a.inprogress", []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := &Checkpoint{ID: 3, StartedAt: time.Now(), PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC),
				Files: []committer.File{{Stream: "s", Temp: "/staging/a.inprogress", Final: "s/part-n1-00000000000000000003-0000.ndjson", Bytes: 2, Records: 1}}}
			if err := st.Prepare(ck); err != nil {
				t.Fatal(err)
			}
			own, err := BuildManifest("n1", ck)
			if err != nil {
				t.Fatal(err)
			}
			if c.existing != nil {
				if err := l.Publish(t.Context(), layout.ManifestName("n1", 3), c.existing(own)); err != nil {
					t.Fatal(err)
				}
			}
			fin := Finisher{Store: st, Committer: l, Publisher: l, Node: "n1"}
			err = fin.Finish(t.Context(), ck)
			got, gerr := st.Get(3)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if c.conflict {
				if !errors.Is(err, committer.ErrConflict) {
					t.Fatalf("finish: %v, want ErrConflict", err)
				}
				if got.State != Prepared {
					t.Fatalf("state after a manifest conflict: %s, want prepared", got.State)
				}
				return
			}
			if err != nil || got.State != Committed {
				t.Fatalf("finish: %v, state %s; want committed", err, got.State)
			}
		})
	}
}
