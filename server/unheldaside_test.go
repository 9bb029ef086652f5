package server

import (
	"testing"

	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// TestOlderCopyUnheldManifestKeepsCommittedUnnamedFiles: the set-aside a
// start runs when the only manifests newer than its store name no file
// the destination holds (d7ef6fa, setAsideUnnamed) looked after the
// store's newest commit, not after those manifests. An older copy of the
// store (after c1) is put back; since it, c2 committed p's batch b/0
// (answered committed), then c3 committed t/0. Retention removed c2's
// manifest (manifests kept a shorter time than stream b's data) and c3's
// file (stream t kept a shorter time than manifests). c3's manifest is
// then the only newer one, unheld; c2's file is in no manifest and the
// only checkpoint's after the copy, so the start moved it to _quarantine/:
// committed data a client was told committed, moved (I7), and b/0 gone
// from the stream (I2). Checkpoints commit one at a time, each publishing
// its manifest before the next places a file: a file with an id below a
// manifest of this node was committed, never a commit cut short (the
// first start sets aside only after the newest manifest,
// setAsideFirstCommit).
func TestOlderCopyUnheldManifestKeepsCommittedUnnamedFiles(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		_, backup, c2, c3 := r.copyThenTwoCommits(t, [3]string{"a", "b", "t"}, [3]int{1, 1, 1})
		r.stop()
		r.putStore(backup)
		if err := r.fs.Remove(rigDest + "/" + layout.ManifestName(rigNode, c2.ID)); err != nil {
			t.Fatal(err)
		}
		if err := r.fs.Remove(rigDest + "/" + c3.Files[0].Final); err != nil {
			t.Fatal(err)
		}
		r.broken = "retention removed c2's manifest and c3's file"
		r.start(nil)
		if _, err := r.fs.Stat(rigDest + "/" + c2.Files[0].Final); err != nil {
			t.Fatalf("c2's file (p's batch b/0, answered committed) is gone from stream b: set aside by the start (I7): %v", err)
		}
	})
}

// TestUnheldAsideSparesFilesOfUnreadableManifest: the set-aside a start
// runs when the only newer manifests it could read name no file the
// destination holds (setAsideUnnamed, d7ef6fa and b99f4fc) looked after
// the newest of those, not after the newest manifest name. An older copy
// of the store (after c1) is put back; since it, c2 committed p's batch
// t/0 and c3 its batch b/0 (both answered committed). Retention removed
// c2's file (stream t kept a shorter time), and c3's manifest no longer
// decodes (a damaged object; a manifest of another version). c2's
// manifest is then the only one read, unheld, and c3's file — in no
// manifest that decodes, the only checkpoint's after c2 — was moved to
// _quarantine/: committed data moved (I7), b/0 gone from stream b. A
// checkpoint whose manifest name is there published it (checkpoints
// commit one at a time): the rebuild (published) and a new store's first
// start (ours) leave its files, whether its document decodes or not.
func TestUnheldAsideSparesFilesOfUnreadableManifest(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		_, backup, c2, c3 := r.copyThenTwoCommits(t, [3]string{"a", "t", "b"}, [3]int{1, 1, 1})
		r.stop()
		r.putStore(backup)
		if err := r.fs.Remove(rigDest + "/" + c2.Files[0].Final); err != nil {
			t.Fatal(err)
		}
		if err := afero.WriteFile(r.fs, rigDest+"/"+layout.ManifestName(rigNode, c3.ID), []byte("{not a manifest"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.broken = "retention removed c2's file; c3's manifest damaged"
		r.start(nil)
		if _, err := r.fs.Stat(rigDest + "/" + c3.Files[0].Final); err != nil {
			t.Fatalf("c3's file (p's batch b/0, answered committed, its manifest's name published) is gone from stream b: set aside by the start (I7): %v", err)
		}
	})
}
