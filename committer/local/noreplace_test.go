package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/spf13/afero"
)

// racer creates a file at a name just before the first rename, as another
// writer could between Commit's Stat and its rename.
type racer struct {
	fs    afero.Fs
	name  string
	data  string
	fired bool
}

func (r *racer) MaybeError(op faultfs.Op) error {
	if op.Kind == faultfs.OpRename && !r.fired {
		r.fired = true
		if err := afero.WriteFile(r.fs, r.name, []byte(r.data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestCommitNeverReplaces: a final file that appears between Commit's
// check and its rename is never replaced (I7): Commit reports a conflict,
// or succeeds if it holds the same bytes. Publish likewise.
func TestCommitNeverReplaces(t *testing.T) {
	for _, tc := range []struct {
		name, other string
		conflict    bool
	}{
		{"other content", "someone else's\n", true},
		{"same content", "{\"a\":1}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := faultfs.NewCrashFS()
			rc := &racer{fs: base, name: "/dest/s/part-0", data: tc.other}
			fs := faultfs.NewInjectFS(base, rc)
			if err := base.MkdirAll("/staging", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := afero.WriteFile(base, "/staging/part-0.inprogress", []byte("{\"a\":1}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := base.MkdirAll("/dest/s", 0o755); err != nil {
				t.Fatal(err)
			}
			l := New(fs, "/dest", "/staging")
			err := l.Commit(context.Background(), committer.File{Temp: "/staging/part-0.inprogress", Final: "s/part-0", Bytes: 8})
			if got := errors.Is(err, committer.ErrConflict); got != tc.conflict {
				t.Fatalf("commit over a file that appeared: %v, want conflict %t", err, tc.conflict)
			}
			if !tc.conflict && err != nil {
				t.Fatal(err)
			}
			if data, err := afero.ReadFile(base, "/dest/s/part-0"); err != nil || string(data) != tc.other {
				t.Fatalf("final file replaced: %q %v", data, err)
			}
		})
	}
	t.Run("publish", func(t *testing.T) {
		base := faultfs.NewCrashFS()
		rc := &racer{fs: base, name: "/dest/_manifests/n/1.json", data: "theirs"}
		fs := faultfs.NewInjectFS(base, rc)
		if err := base.MkdirAll("/dest/_manifests/n", 0o755); err != nil {
			t.Fatal(err)
		}
		l := New(fs, "/dest", "/staging")
		if err := l.Publish(context.Background(), "_manifests/n/1.json", []byte("ours")); !errors.Is(err, committer.ErrExists) {
			t.Fatalf("publish over a file that appeared: %v", err)
		}
		if data, _ := afero.ReadFile(base, "/dest/_manifests/n/1.json"); string(data) != "theirs" {
			t.Fatalf("manifest replaced: %q", data)
		}
		if left, _ := afero.ReadDir(base, "/staging"); len(left) != 0 {
			t.Fatalf("publish left %d temp files", len(left))
		}
	})
}

// A partition directory removed from the destination by someone else (a
// retention job deleting an old day) while this process remembers it as
// made durable: a later commit into the same partition (late data)
// creates it again. Failed before: Dirs took the remembered directory for
// present, the rename failed with ENOENT on every retry, and the commit
// (prepared, so retried for ever) held back every later checkpoint until a
// restart.
func TestCommitIntoRemovedDirectory(t *testing.T) {
	root := t.TempDir()
	dest, staging := filepath.Join(root, "dest"), filepath.Join(root, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	l := New(afero.NewOsFs(), dest, staging)
	commit := func(i int, final string) error {
		temp := filepath.Join(staging, "f"+string(rune('0'+i))+".inprogress")
		if err := durable.WriteTemp(l.FS, temp, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		return l.Commit(t.Context(), committer.File{Stream: "s", Temp: temp, Final: final, Bytes: 2, Records: 1})
	}
	if err := commit(0, "s/dt=2026-11-01/hour=00/part-n1-00000000000000000001-0000.ndjson"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dest, "s", "dt=2026-11-01")); err != nil {
		t.Fatal(err)
	}
	final := "s/dt=2026-11-01/hour=00/part-n1-00000000000000000002-0000.ndjson"
	if err := commit(1, final); err != nil {
		t.Fatalf("commit into a partition removed since: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, final)); err != nil || string(b) != "x\n" {
		t.Fatalf("committed file: %q %v", b, err)
	}
}
