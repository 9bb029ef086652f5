package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

// hookFS is the OS file system with hooks on a few calls, to pause one
// writer at a chosen point.
type hookFS struct {
	afero.Fs
	onOpen     func(name string) // after a successful Open
	onOpenFile func(name string) // before OpenFile
	onRename   func(name string) // before Rename, with the old name
}

func (h *hookFS) Open(name string) (afero.File, error) {
	f, err := h.Fs.Open(name)
	if err == nil && h.onOpen != nil {
		h.onOpen(name)
	}
	return f, err
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (afero.File, error) {
	if h.onOpenFile != nil {
		h.onOpenFile(name)
	}
	return h.Fs.OpenFile(name, flag, perm)
}

func (h *hookFS) Rename(oldname, newname string) error {
	if h.onRename != nil {
		h.onRename(oldname)
	}
	return h.Fs.Rename(oldname, newname)
}

func (h *hookFS) RenameNoReplace(o, n string) error {
	return h.Fs.(durable.NoReplaceRenamer).RenameNoReplace(o, n)
}

// Two writers of the same node's lease (two processes, two data dirs)
// swap from the same version while a lock of a dead writer is left: P1
// (a restart on the dead writer's data dir) judges the lock dead, P2
// (another data dir) judges it stale. P1 pauses right before it breaks the
// lock, P2 breaks it and takes its own meanwhile. When breaking was
// check-then-remove, P1 then removed P2's fresh lock and both swaps
// succeeded: two writers each believed they took the lease. (Found by
// review; the stale rule had the race before the dead one existed.)
func TestLeaseLockBreakNeverTakesAFreshLock(t *testing.T) {
	for _, mode := range []string{"dead", "stale"} {
		t.Run(mode, func(t *testing.T) {
			root := t.TempDir()
			osfs := durable.NewOsFs()
			dest := filepath.Join(root, "files")
			st1, st2 := filepath.Join(root, "staging1"), filepath.Join(root, "staging2")
			for _, d := range []string{dest + "/_nodes", st1, st2} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			const name = "_nodes/n1.json"
			leasePath := filepath.Join(dest, name)
			lockPath := leasePath + ".lock"
			if err := os.WriteFile(leasePath, []byte(`{"incarnation":"x-dead","v":0}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(lockPath, []byte("x-dead"), 0o644); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Minute) // older than StaleLock
			if err := os.Chtimes(lockPath, old, old); err != nil {
				t.Fatal(err)
			}

			p1AtBreak, p2InCS, p1Done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var once1, once2 sync.Once
			fs1 := &hookFS{Fs: osfs}
			fs1.onRename = func(n string) {
				if n == lockPath {
					once1.Do(func() {
						close(p1AtBreak)
						<-p2InCS
					})
				}
			}
			fs2 := &hookFS{Fs: osfs}
			fs2.onOpen = func(n string) {
				if n == leasePath {
					once2.Do(func() { close(p2InCS) })
				}
			}
			fs2.onOpenFile = func(n string) {
				if strings.HasSuffix(n, ".lease.inprogress") {
					<-p1Done
				}
			}
			p1 := local.New(fs1, dest, st1)
			p2 := local.New(fs2, dest, st2)
			if mode == "dead" {
				p1.SetLockOwner("p1", []string{"x-dead"})
			} else {
				p1.SetLockOwner("p1", nil)
			}
			p2.SetLockOwner("p2", nil)
			_, v0, err := p1.ReadLease(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}

			type res struct {
				v   string
				err error
			}
			r1, r2 := make(chan res, 1), make(chan res, 1)
			go func() {
				v, err := p1.WriteLease(context.Background(), name, []byte(`{"incarnation":"p1"}`), v0)
				r1 <- res{v, err}
			}()
			<-p1AtBreak
			go func() {
				v, err := p2.WriteLease(context.Background(), name, []byte(`{"incarnation":"p2"}`), v0)
				r2 <- res{v, err}
			}()
			a := <-r1
			close(p1Done)
			b := <-r2
			final, _ := os.ReadFile(leasePath)
			t.Logf("P1: %v %v; P2: %v %v; lease now %s", a.v, a.err, b.v, b.err, final)
			if a.err == nil && b.err == nil {
				t.Fatalf("both compare-and-swaps from version %s succeeded: two writers each believe they took the lease", v0)
			}
		})
	}
}
