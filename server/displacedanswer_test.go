package server

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/recovery"
)

// A displaced part file is named where it is in the checkpoint's answer
// and in its record (GET /v1/checkpoints/{id}), as in its manifest.
// Failed before: both named the refused final name, where no file is (its
// download was 404, or 500 under a file).
func TestDisplacedFileNamedWhereItIs(t *testing.T) {
	r := newRig(t, faultfs.NewCrashFS())
	e := r.start(nil)
	blocker := blockPartition(t, r, e, "s")
	mustSend(t, e, nil, "s", 1, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := e.Checkpoint(ctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint: %+v, %v", res, err)
	}
	stored, err := e.store.Get(res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for what, files := range map[string][]committer.File{"answer": res.Files, "record": stored.Files} {
		if len(files) != 1 {
			t.Fatalf("%s: %d files, want 1", what, len(files))
		}
		if _, _, ok := layout.ParseDisplacedName(files[0].Final); !ok {
			t.Errorf("%s names %s, want its displaced name", what, files[0].Final)
		}
		if _, err := r.fs.Stat(path.Join(rigDest, files[0].Final)); err != nil {
			t.Errorf("%s names %s: %v", what, files[0].Final, err)
		}
	}
	if err := r.fs.Remove(blocker); err != nil {
		t.Fatal(err)
	}
}
