package recovery

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// TestFinishDisplacedManifestOlderVersion: a crash after the manifest of
// a checkpoint with a displaced file, published by a version that did not
// keep displaced_from, is replayed by this one, which builds the manifest
// with it: the published one counts as the same (only displaced_from
// differs), and the checkpoint commits. A manifest that differs in
// anything else is still a conflict (ErrConflict), never called published.
func TestFinishDisplacedManifestOlderVersion(t *testing.T) {
	for _, c := range []struct {
		name    string
		change  func(m *layout.Manifest)
		wantErr error
	}{
		{name: "without displaced_from", change: func(*layout.Manifest) {}},
		{name: "other records", change: func(m *layout.Manifest) { m.Files[0].Records++ }, wantErr: committer.ErrConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := openTemp(t)
			defer st.Close()
			fs := afero.NewMemMapFs()
			ck := &Checkpoint{ID: 7, StartedAt: time.Now(), PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
			for i := range 2 {
				temp := fmt.Sprintf("/staging/f%02d.inprogress", i)
				if err := afero.WriteFile(fs, temp, []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				ck.Files = append(ck.Files, committer.File{Stream: "s", Temp: temp, Final: fmt.Sprintf("s/d=%d/part-n1-%020d-%04d.ndjson", i, 7, i), Bytes: 2, Records: 1})
			}
			if err := fs.MkdirAll("/dest/"+ck.Files[1].Final, 0o755); err != nil { // displaced
				t.Fatal(err)
			}
			if err := st.Prepare(ck); err != nil {
				t.Fatal(err)
			}
			// The older version's manifest: the files as committed, the
			// displaced one at its displaced name, without displaced_from.
			old := append([]committer.File(nil), ck.Files...)
			old[1].Final = layout.DisplacedName(old[1].Final)
			m := layout.NewManifest("n1", 7, ck.PreparedAt, old)
			c.change(m)
			body, err := layout.EncodeManifest(m)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(body), "displaced_from") {
				t.Fatal("the older manifest names displaced_from")
			}
			d := local.New(fs, "/dest", "/staging")
			if err := d.Publish(t.Context(), layout.ManifestName("n1", 7), body); err != nil {
				t.Fatal(err)
			}
			fin := Finisher{Store: st, Committer: d, Publisher: d, Node: "n1",
				Displace: func(f committer.File, _ error) (committer.File, bool) {
					f.Final = layout.DisplacedName(f.Final)
					return f, true
				}}
			err = fin.Finish(t.Context(), ck)
			got, gerr := st.Get(7)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || got.State != Prepared {
					t.Fatalf("finish: %v, state %s; want %v and prepared", err, got.State, c.wantErr)
				}
				return
			}
			if err != nil || got.State != Committed {
				t.Fatalf("finish: %v, state %s; want committed", err, got.State)
			}
			if got.Files[1].DisplacedFrom != ck.Files[1].DisplacedFrom || got.Files[1].DisplacedFrom == "" {
				t.Fatalf("committed record's displaced file: %+v", got.Files[1])
			}
		})
	}
}
