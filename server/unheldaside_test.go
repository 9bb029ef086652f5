package server

import (
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
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

// TestUnheldAsideThenStartCut: the unheld-manifest set-aside (as in
// TestOlderCopyNewestManifestFilesGoneHalfCommitQuarantined: an older copy
// of the store put back, c2's manifest newer than it and unheld, c3 cut
// between its renames and its manifest) moves c3's file, and the start is
// cut before it reserves ids (a full disk, then a kill). The next start,
// over the same older copy, sees the file set aside already: it moves
// nothing twice, continues ids beyond c3 (I8: c3's id was answered to its
// client), and p's resend of a/1 is taken anew and lands once (I2).
func TestUnheldAsideThenStartCut(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		f := r.withStoreFaults()
		p, backup, c2, c3 := r.copyThenTwoCommits(t, [3]string{"a", "t", "a"}, [3]int{2, 2, 3})
		r.loseCommit(c3.ID, backup, leaseExpired)
		if err := r.fs.Remove(rigDest + "/" + c2.Files[0].Final); err != nil {
			t.Fatal(err)
		}
		f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
		if _, err := r.open(nil, 300*time.Millisecond); err == nil {
			t.Fatal("the start reserved ids on a full disk")
		}
		r.stop()
		f.set(nil)
		if q, _ := afero.Glob(r.fs, rigDest+"/"+layout.QuarantineDir+"/"+rigNode+"/a/*"); len(q) != 1 {
			t.Fatalf("set aside before the cut: %v, want c3's file", q)
		}
		if _, err := r.fs.Stat(rigDest + "/" + c3.Files[0].Final); err == nil {
			t.Fatal("c3's file is still in stream a after the cut start")
		}
		r.broken = "a retention rule removed a file a manifest names"
		r.resendCutBatch(t, p)
		if open := r.e.Status().OpenID; open <= c3.ID {
			t.Fatalf("open checkpoint %d; c3 (%d) was answered to its client (I8)", open, c3.ID)
		}
		rep := r.checker0(invariant.Expect{})
		if len(rep.Quarantined) != 1 {
			t.Fatalf("quarantined %v, want c3's file once", rep.Quarantined)
		}
	})
}
