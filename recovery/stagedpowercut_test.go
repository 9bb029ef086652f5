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
