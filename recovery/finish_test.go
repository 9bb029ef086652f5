package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// TestFinishStagedPowerCutSweep cuts the power before every file system
// operation of a Finish whose manifest is staged while the files commit
// (beside them with Parallel 8, before them with 1; with and without a
// displaced file) and replays the durable state that leaves: the replay
// commits every file the row names, publishes the manifest of the files
// as committed (never the staged copy of a displaced checkpoint), records
// it committed and leaves nothing in the staging directory, the staged
// manifest's temp copy included. A cut after Finish (the record made)
// finds the manifest and the files where the record says. A publisher
// that cannot stage (S3's shape: plain) is swept the same way.
func TestFinishStagedPowerCutSweep(t *testing.T) {
	const n = 6
	for _, pc := range []struct {
		par   int
		plain bool
	}{{1, false}, {8, false}, {8, true}} {
		par, plain := pc.par, pc.plain
		for _, displace := range []bool{false, true} {
			t.Run(fmt.Sprintf("par%d/plain=%v/displace=%v", par, plain, displace), func(t *testing.T) {
				base := faultfs.NewCrashFS()
				ck := stagedCheckpoint(t, base, n, displace)
				var mu sync.Mutex
				var cuts []*faultfs.CrashFS
				var ops []string
				fs := faultfs.NewInjectFS(base, faultfs.InjectorFunc(func(op faultfs.Op) error {
					mu.Lock()
					cuts = append(cuts, base.CrashClone())
					ops = append(ops, op.String())
					mu.Unlock()
					return nil
				}))
				st, prepared := openTemp(t)
				if err := st.Prepare(ck); err != nil {
					t.Fatal(err)
				}
				st.Close()
				tmpl, err := os.ReadFile(prepared) // the store as every cut finds it
				if err != nil {
					t.Fatal(err)
				}
				if st, err = Open(prepared); err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				st.db.NoSync = true
				fin := stagedFinisher(st, fs, par)
				if plain {
					fin.Publisher = unstaged{fin.Publisher.(*local.Local)}
				}
				c := *ck
				if err := fin.Finish(t.Context(), &c); err != nil {
					t.Fatal(err)
				}
				checkStagedOutcome(t, "no cut", base, st, displace)
				after := base.CrashClone()
				rp := Replay{Finisher: stagedFinisher(st, after, par), FS: after, StagingDir: "/staging"}
				if _, err := rp.Run(t.Context()); err != nil {
					t.Fatalf("cut after the record: replay: %v\n%s", err, after)
				}
				checkStagedOutcome(t, "cut after the record", after, st, displace)
				checkDurable(t, "cut after the record", base.CrashClone(), st)
				staged := false
				for _, op := range ops {
					staged = staged || strings.Contains(op, ".publish")
				}
				if !staged {
					t.Fatalf("no operation on a manifest's temp copy: %v", ops)
				}
				for i, cut := range cuts {
					p := filepath.Join(t.TempDir(), "state.db")
					if err := os.WriteFile(p, tmpl, 0o600); err != nil {
						t.Fatal(err)
					}
					st2, err := Open(p)
					if err != nil {
						t.Fatal(err)
					}
					st2.db.NoSync = true
					rp := Replay{Finisher: stagedFinisher(st2, cut, par), FS: cut, StagingDir: "/staging"}
					if _, err := rp.Run(t.Context()); err != nil {
						t.Fatalf("cut before %s: replay: %v\n%s", ops[i], err, cut)
					}
					checkStagedOutcome(t, "cut before "+ops[i], cut, st2, displace)
					checkDurable(t, "cut before "+ops[i]+", replayed, cut again", cut.CrashClone(), st2)
					st2.Close()
				}
			})
		}
	}
}

// stagedCheckpoint writes n staging files to fs, durably as pre-commit
// leaves them, and returns the checkpoint naming them; with displace the
// final name of file 1 is a directory, so the file is displaced.
func stagedCheckpoint(t *testing.T, fs *faultfs.CrashFS, n int, displace bool) *Checkpoint {
	t.Helper()
	for _, d := range []string{"/staging", "/dest"} {
		if err := durable.MkdirAll(fs, d); err != nil {
			t.Fatal(err)
		}
	}
	ck := &Checkpoint{ID: 7, StartedAt: time.Now(), PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	for i := range n {
		temp := fmt.Sprintf("/staging/f%02d.inprogress", i)
		if err := durable.WriteTemp(fs, temp, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		final := fmt.Sprintf("s%d/dt=1/h=%d/part-n1-%020d-%04d.ndjson", i%2, i%3, 7, i)
		ck.Files = append(ck.Files, committer.File{Stream: "s", Temp: temp, Final: final, Bytes: 2, Records: 1})
	}
	if err := durable.SyncDir(fs, "/staging"); err != nil {
		t.Fatal(err)
	}
	if displace {
		if err := durable.MkdirAll(fs, "/dest/"+ck.Files[1].Final); err != nil {
			t.Fatal(err)
		}
	}
	return ck
}

func stagedFinisher(st *Store, fs afero.Fs, par int) Finisher {
	l := local.New(fs, "/dest", "/staging")
	return Finisher{Store: st, Committer: l, Publisher: l, Node: "n1", Parallel: par,
		Displace: func(f committer.File, err error) (committer.File, bool) {
			if errors.Is(err, syscall.EIO) {
				return f, false // transient: never displaced for it
			}
			f.Final = strings.Replace(f.Final, "/part-", "/_displaced/part-", 1)
			return f, true
		}}
}

// checkStagedOutcome checks checkpoint 7 committed in st, every file it
// names final in fs, its manifest the one built from its row, and the
// staging directory empty.
func checkStagedOutcome(t *testing.T, what string, fs *faultfs.CrashFS, st *Store, displace bool) {
	t.Helper()
	got, err := st.Get(7)
	if err != nil || got.State != Committed {
		t.Fatalf("%s: checkpoint %+v %v, want committed", what, got, err)
	}
	for _, f := range got.Files {
		b, err := afero.ReadFile(fs, "/dest/"+f.Final)
		if err != nil || string(b) != "x\n" {
			t.Fatalf("%s: %s: %q %v\n%s", what, f.Final, b, err, fs)
		}
	}
	want, err := BuildManifest("n1", got)
	if err != nil {
		t.Fatal(err)
	}
	have, err := afero.ReadFile(fs, "/dest/"+layout.ManifestName("n1", 7))
	if err != nil || !bytes.Equal(have, want) {
		t.Fatalf("%s: manifest %v:\n%s\nwant\n%s", what, err, have, want)
	}
	if d := bytes.Contains(have, []byte("_displaced/")); d != displace {
		t.Fatalf("%s: manifest names a displaced file: %v, want %v", what, d, displace)
	}
	left, _ := afero.ReadDir(fs, "/staging")
	for _, fi := range left {
		if !strings.HasPrefix(what, "no cut") || strings.Contains(fi.Name(), ".publish") {
			t.Fatalf("%s: /staging/%s left behind", what, fi.Name())
		}
	}
}

// TestFinishStagedFaultSweep fails each file system operation of a Finish
// whose manifest is staged (EIO, once; Parallel 1 and 8, with and without
// a displaced file), then retries it live as the engine does, or after a
// failed fsync (which stops the engine) starts again on the same disk:
// the checkpoint ends committed with its manifest, every file final, and
// nothing left in the staging directory (a live retry sweeps nothing).
func TestFinishStagedFaultSweep(t *testing.T) {
	const n = 6
	for _, par := range []int{1, 8} {
		for _, displace := range []bool{false, true} {
			t.Run(fmt.Sprintf("par%d/displace=%v", par, displace), func(t *testing.T) {
				for k := int64(0); ; k++ {
					base := faultfs.NewCrashFS()
					ck := stagedCheckpoint(t, base, n, displace)
					var mu sync.Mutex
					var failed string
					fs := faultfs.NewInjectFS(base, faultfs.InjectorFunc(func(op faultfs.Op) error {
						mu.Lock()
						defer mu.Unlock()
						if op.Index == k {
							failed = op.String()
							return syscall.EIO
						}
						return nil
					}))
					st := openTempNoSync(t)
					if err := st.Prepare(ck); err != nil {
						t.Fatal(err)
					}
					c := *ck
					fin := stagedFinisher(st, fs, par)
					ferr := fin.Finish(t.Context(), &c)
					mu.Lock()
					what := "EIO at " + failed
					mu.Unlock()
					if failed == "" {
						if ferr != nil {
							t.Fatalf("no fault: %v", ferr)
						}
						st.Close()
						return // every operation was failed once
					}
					if ferr != nil && !errors.Is(ferr, durable.ErrSync) {
						// Retried live, as the engine does (no sweep of
						// the staging directory before it).
						c := *ck
						fin := stagedFinisher(st, base, par)
						if err := fin.Finish(t.Context(), &c); err != nil {
							t.Fatalf("%s (finish: %v): retry: %v\n%s", what, ferr, err, base)
						}
					}
					rp := Replay{Finisher: stagedFinisher(st, base, par), FS: base, StagingDir: "/staging"}
					if ferr != nil && errors.Is(ferr, durable.ErrSync) {
						if _, err := rp.Run(t.Context()); err != nil {
							t.Fatalf("%s (finish: %v): replay: %v\n%s", what, ferr, err, base)
						}
					}
					checkStagedOutcome(t, what, base, st, displace)
					// The process that finished it lost its page cache:
					// what it recorded committed must be durable.
					checkDurable(t, what+", then a power cut", base.CrashClone(), st)
					st.Close()
				}
			})
		}
	}
}

// unstaged is a local publisher seen only as a committer.Publisher and
// committer.Reader, as S3 is: it cannot stage.
type unstaged struct{ l *local.Local }

func (u unstaged) Publish(ctx context.Context, name string, data []byte) error {
	return u.l.Publish(ctx, name, data)
}

func (u unstaged) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	return u.l.List(ctx, prefix)
}

func (u unstaged) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	return u.l.Open(ctx, name)
}

// openTempNoSync is openTemp without fdatasyncs: the sweeps cut the power
// of the destination's file system only (the store's state at each cut is
// known: prepared before the record, committed after), and open hundreds.
func openTempNoSync(t *testing.T) *Store {
	t.Helper()
	st, _ := openTemp(t)
	st.db.NoSync = true
	return st
}

// checkDurable checks that the files and the manifest of checkpoint 7,
// recorded committed in st, are in fs (a power cut's clone).
func checkDurable(t *testing.T, what string, fs afero.Fs, st *Store) {
	t.Helper()
	got, err := st.Get(7)
	if err != nil || got.State != Committed {
		t.Fatalf("%s: checkpoint %+v %v, want committed", what, got, err)
	}
	for _, f := range got.Files {
		if b, err := afero.ReadFile(fs, "/dest/"+f.Final); err != nil || string(b) != "x\n" {
			t.Fatalf("%s: %s: %q %v\n%s", what, f.Final, b, err, fs)
		}
	}
	want, err := BuildManifest("n1", got)
	if err != nil {
		t.Fatal(err)
	}
	if have, err := afero.ReadFile(fs, "/dest/"+layout.ManifestName("n1", 7)); err != nil || !bytes.Equal(have, want) {
		t.Fatalf("%s: manifest %v", what, err)
	}
}
