package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

// TestFinishStagedManifest: the manifest a local publisher stages while
// the files commit is the one published when no file was displaced; a
// displaced file gets a manifest built from where it is (the staged copy
// is discarded); a publisher without its staging directory publishes as
// before; a failed fsync of the staged copy fails the commit, unpublished
// and still prepared (never retried). No case leaves a temp copy behind.
func TestFinishStagedManifest(t *testing.T) {
	const n = 20
	cases := []struct {
		name      string
		par       int
		pubStage  string               // the publisher's staging directory; "" is /staging
		displace  bool                 // file 3's final name holds a directory: it is displaced
		inject    faultfs.InjectorFunc // nil: no fault
		wantErr   error                // nil: committed
		published int                  // calls of Publish (not the staged copy's)
	}{
		{name: "beside the files", par: 8},
		{name: "before the files", par: 1},
		{name: "displaced file", par: 8, displace: true, published: 1},
		{name: "no staging directory", par: 8, pubStage: "/pub", published: 1},
		{name: "failed fsync of the staged copy", par: 8, wantErr: durable.ErrSync,
			inject: func(op faultfs.Op) error {
				if op.Kind == faultfs.OpSync && strings.Contains(op.Path, ".publish") {
					return syscall.EIO
				}
				return nil
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := openTemp(t)
			defer st.Close()
			var fs afero.Fs = faultfs.NewCrashFS() // a missing directory is missing
			if err := fs.MkdirAll("/staging", 0o755); err != nil {
				t.Fatal(err)
			}
			if c.inject != nil {
				fs = faultfs.NewInjectFS(fs, c.inject)
			}
			pubStage := "/staging"
			if c.pubStage != "" {
				pubStage = c.pubStage
			}
			l, pub := local.New(fs, "/dest", "/staging"), &countingPublisher{Local: local.New(fs, "/dest", pubStage)}
			ck := &Checkpoint{ID: 7, StartedAt: time.Now(), PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
			for i := range n {
				temp := fmt.Sprintf("/staging/f%02d.inprogress", i)
				if err := afero.WriteFile(fs, temp, []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				final := fmt.Sprintf("s%d/part-n1-%020d-%04d.ndjson", i%3, 7, i)
				ck.Files = append(ck.Files, committer.File{Stream: "s", Temp: temp, Final: final, Bytes: 2, Records: 1})
			}
			if c.displace {
				if err := fs.MkdirAll("/dest/"+ck.Files[3].Final, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Prepare(ck); err != nil {
				t.Fatal(err)
			}
			fin := Finisher{Store: st, Committer: l, Publisher: pub, Node: "n1", Parallel: c.par,
				Displace: func(f committer.File, _ error) (committer.File, bool) {
					f.Final = strings.Replace(f.Final, "/part-", "/_displaced/part-", 1)
					return f, true
				}}
			err := fin.Finish(t.Context(), ck)
			got, gerr := st.Get(7)
			if gerr != nil {
				t.Fatal(gerr)
			}
			name := "/dest/" + layout.ManifestName("n1", 7)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || got.State != Prepared {
					t.Fatalf("finish: %v, state %s; want %v and prepared", err, got.State, c.wantErr)
				}
				if ok, _ := afero.Exists(fs, name); ok {
					t.Fatal("manifest published although its fsync failed")
				}
			} else {
				if err != nil || got.State != Committed {
					t.Fatalf("finish: %v, state %s; want committed", err, got.State)
				}
				want, err := BuildManifest("n1", got)
				if err != nil {
					t.Fatal(err)
				}
				have, err := afero.ReadFile(fs, name)
				if err != nil || !bytes.Equal(have, want) {
					t.Fatalf("manifest %v:\n%s\nwant\n%s", err, have, want)
				}
				if pub.published != c.published {
					t.Fatalf("Publish called %d times, want %d (the staged copy published otherwise)", pub.published, c.published)
				}
				displaced := strings.Contains(string(have), "_displaced/")
				if displaced != c.displace {
					t.Fatalf("manifest names a displaced file: %v, want %v", displaced, c.displace)
				}
			}
			for _, dir := range []string{"/staging", "/pub"} {
				left, _ := afero.ReadDir(fs, dir)
				for _, fi := range left {
					if strings.Contains(fi.Name(), ".publish") {
						t.Fatalf("%s/%s left behind", dir, fi.Name())
					}
				}
			}
		})
	}
}

// countingPublisher is a local publisher that counts its Publish calls;
// Stage is the local one's.
type countingPublisher struct {
	*local.Local
	published int // Finish publishes from one goroutine
}

func (p *countingPublisher) Publish(ctx context.Context, name string, data []byte) error {
	p.published++
	return p.Local.Publish(ctx, name, data)
}
