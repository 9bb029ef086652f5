package local_test

import (
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
)

func TestLeaseConformance(t *testing.T) {
	committertest.RunLeaser(t, func(t *testing.T) committer.Leaser {
		root := t.TempDir()
		fsys := durable.NewOsFs()
		dest, staging := filepath.Join(root, "files"), filepath.Join(root, "staging")
		for _, d := range []string{dest, staging} {
			if err := fsys.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return local.New(fsys, dest, staging)
	})
}
