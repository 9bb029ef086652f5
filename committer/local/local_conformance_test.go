package local_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/eosink/eosink/committer/committertest"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
)

func TestConformance(t *testing.T) {
	committertest.Run(t, func(t *testing.T) committertest.Env {
		root := t.TempDir()
		fsys := durable.NewOsFs() // what eosink runs on: renames never replace
		dest, staging := filepath.Join(root, "files"), filepath.Join(root, "staging")
		for _, d := range []string{dest, staging} {
			if err := fsys.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		l := local.New(fsys, dest, staging)
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
