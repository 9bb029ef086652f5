package local_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/spf13/afero"
)

// newLocal returns a local committer over a fresh destination and staging
// directory on the OS file system, as eosink runs it (renames never
// replace).
func newLocal(t *testing.T) (l *local.Local, fsys afero.Fs, staging string) {
	t.Helper()
	root := t.TempDir()
	fsys = durable.NewOsFs()
	dest, staging := filepath.Join(root, "files"), filepath.Join(root, "staging")
	for _, d := range []string{dest, staging} {
		if err := fsys.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return local.New(fsys, dest, staging), fsys, staging
}

func TestConformance(t *testing.T) {
	committertest.Run(t, func(t *testing.T) committertest.Env {
		l, fsys, staging := newLocal(t)
		return committertest.Env{
			Committer: l,
			Publisher: l,
			Reader:    l,
			FS:        fsys,
			TempPath: func(final string) string {
				return filepath.Join(staging, strings.ReplaceAll(final, "/", "_")+".inprogress")
			},
		}
	})
}

func TestLeaseConformance(t *testing.T) {
	committertest.RunLeaser(t, func(t *testing.T) committer.Leaser {
		l, _, _ := newLocal(t)
		return l
	})
}
