package server

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// A start whose store kept up believes, after its newest commit minus 1,
// only forgotten-producers documents its key sealed
// (TestPlantedForgottenDocForgetsLiveProducer). A file planted under the
// node's manifest prefix with a manifest's name beyond the store's newest
// commit — not JSON, so never believed as a manifest
// (TestPlantedManifestIsNotBelieved) — made the start think the store
// behind and rebuild, and a rebuild believes every document: the planted
// forgotten-producers document beside it then forgot the live producer p,
// whose resend of a committed batch was refused unknown_producer (and
// after an init written again, I2). "lease=true": the planted name within
// the ids the lease shows reserved (the node's own next id).
func TestPlantedManifestNameMakesPlantedForgetBelieved(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		e, p, ck := r.startCommitted(t)
		next := e.Status().OpenID
		r.stop()
		plant(t, r.fs, layout.ManifestName(rigNode, next), []byte("<html>"))
		plantForgotten(t, r, ck, "p", p.Epoch)
		r.broken = "a planted manifest" // the checker believes manifests
		wantProducerKept(t, r.start(nil), p, "a file with a manifest's name that is not a manifest made a start whose store kept up rebuild")
	})
}

// After a store loss and its rebuild (the mark: rebuilt through ck), an
// operator removes the node's manifests (rebuilt_through is then beyond
// the newest manifest). A start over the rebuilt store, before its first
// commit, is not another rebuild: a document planted at ck naming the
// live producer p is not believed, p's resend of its committed batch is
// a committed duplicate, and p goes on; the ids go on beyond every id
// answered.
func TestRebuiltThroughBeyondManifests(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		e, p, ck := r.startCommitted(t)
		r.stopLosingStore()
		e = r.start(nil) // rebuilds, marks ck
		open := e.Status().OpenID
		r.stop()
		if through, err := rebuiltThrough(t, r.storePath); err != nil || through != ck {
			t.Fatalf("the mark: %d %v, want %d", through, err, ck)
		}
		if err := r.fs.RemoveAll(rigDest + "/_manifests"); err != nil {
			t.Fatal(err)
		}
		r.broken = "the manifests removed by hand"
		plantForgotten(t, r, ck, "p", p.Epoch)
		e = r.start(nil)
		wantProducerKept(t, e, p, "manifests removed after a rebuild")
		if got := e.Status().OpenID; got <= open {
			t.Fatalf("open checkpoint %d after the restart, %d was open before (I8)", got, open)
		}
		mustSend(t, e, p, "s", 1, 1)
		r.commit()
	})
}

// A manifest planted beyond the store's newest commit that is well formed
// but whose files the destination does not hold (the rebuild skips it:
// TestPlantedManifestIsNotBelieved "ranges without files") made a start
// whose store kept up rebuild all the same, and the rebuild believed a
// planted forgotten-producers document beside it: p forgotten, its resend
// of a committed batch refused (and written again after an init, I2).
func TestPlantedManifestGoneFilesMakesPlantedForgetBelieved(t *testing.T) {
	r := newRig(t, nil)
	e, p, ck := r.startCommitted(t)
	next := e.Status().OpenID
	r.stop()
	m := &layout.Manifest{Checkpoint: next, Node: rigNode, CommittedAt: time.Now().UTC(),
		Files: []layout.ManifestFile{{Path: "a/" + layout.PartName(rigNode, next, 0, "ndjson"), Stream: "a", Bytes: 10, Records: 1,
			Producers: map[string]committer.SeqRanges{"z": {{0, 1}}}}}}
	b, err := layout.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	plant(t, r.fs, m.Name(), b)
	plantForgotten(t, r, ck, "p", p.Epoch)
	r.broken = "a planted manifest" // the checker believes manifests
	wantProducerKept(t, r.start(nil), p, "a planted manifest whose files the destination does not hold made a start whose store kept up rebuild")
}

// TestOlderCopyNewestManifestFilesGoneHalfCommitQuarantined: an older
// copy of the store (after checkpoint c1) is put back after a crash cut
// checkpoint c3's commit between its renames and its manifest. Between
// them, c2 committed into stream t, whose files a retention rule (say a
// bucket lifecycle rule on t/) removed since. c2's manifest is the only
// one newer than the copy, and the destination holds none of its files:
// 190a9ad counts the store as not behind then (manifestHeld), so the
// start did not rebuild and left c3's half-committed file (no manifest,
// its batch never answered committed) beside the copy p resends: a/1 in
// the destination twice (I2). Before 190a9ad (and 1a24847) the newer
// manifest's name made the start rebuild, whose set-aside moved c3's file
// to _quarantine/. "lease=true": the lease shows no ids beyond the copy's
// (c2 and c3 used ids of the block reserved before the copy).
func TestOlderCopyNewestManifestFilesGoneHalfCommitQuarantined(t *testing.T) {
	withAndWithoutLease(t, func(t *testing.T, r *rig) {
		p, backup, c2, c3 := r.copyThenTwoCommits(t, [3]string{"a", "t", "a"}, [3]int{2, 2, 3})
		r.loseCommit(c3.ID, backup, leaseExpired)
		// Retention removed stream t's files.
		if err := r.fs.Remove(rigDest + "/" + c2.Files[0].Final); err != nil {
			t.Fatal(err)
		}
		r.broken = "a retention rule removed a file a manifest names"
		r.resendCutBatch(t, p)
		rep := r.checker0(invariant.Expect{})
		if _, err := r.fs.Stat(rigDest + "/" + c3.Files[0].Final); err == nil {
			t.Fatalf("c3's half-committed file (in no manifest, its batch a/1 resent and committed again) is still in stream a: a/1 twice for readers that list the stream (I2); problems %v", rep.Problems)
		}
		if len(rep.Quarantined) != 1 {
			t.Fatalf("quarantined %v, want c3's file", rep.Quarantined)
		}
	})
}

// openFails is the rig's local destination whose Open fails with a
// transient error the first time it opens each name that fail picks.
type openFails struct {
	*local.Local
	fail   func(name string) bool
	mu     sync.Mutex
	failed map[string]bool
}

func (o *openFails) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	o.mu.Lock()
	first := o.fail(name) && !o.failed[name]
	if first {
		o.failed[name] = true
	}
	o.mu.Unlock()
	if first {
		return nil, committer.Entry{}, fmt.Errorf("%w: injected: open %s: connection reset", committer.ErrTransient, name)
	}
	return o.Local.Open(ctx, name)
}

// TestBehindCheckRetriesTransientReads: an older copy of the store (after
// c1) is put back; c2, committed since, holds p's batch 1. The start's
// reads of c2's manifest and then of its file fail once each (a GET cut,
// a connection reset): neither is taken for "not a manifest the rebuild
// would believe" (the store kept up: no rebuild, p's batch 1 accepted and
// written again, I2); the step is retried, the store rebuilt, and p's
// resend of batch 1 is a committed duplicate.
func TestBehindCheckRetriesTransientReads(t *testing.T) {
	for _, what := range []string{"manifest", "file"} {
		t.Run(what, func(t *testing.T) {
			r := newRig(t, nil)
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "s", 0, 1)
			r.commit()
			backup := r.storeCopy()
			mustSend(t, e, p, "s", 1, 1)
			c2 := r.commit()
			r.stop()
			r.putStore(backup)
			pick := func(name string) bool { return name == layout.ManifestName(rigNode, c2.ID) }
			if what == "file" {
				pick = func(name string) bool { return name == c2.Files[0].Final }
			}
			of := &openFails{fail: pick, failed: map[string]bool{}}
			r.tweak = func(c *Config) {
				of.Local = local.New(c.FS, rigDest, rigStaging)
				c.Publisher = of
			}
			e = r.start(nil)
			if len(of.failed) != 1 {
				t.Fatalf("the start's reads failed %d times, want once", len(of.failed))
			}
			if res, err := send(e, p, "s", 1, 1); err != nil || !res.Duplicate || !res.Committed {
				t.Fatalf("resend of batch 1, committed in c2 after the copy: %+v, %v; want a committed duplicate (I2)", res, err)
			}
			r.commit()
			r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true, {Producer: "p", Stream: "s", Seq: 1}: true}, Exact: true})
		})
	}
}

// copyThenTwoCommits starts r, inits producer p and commits three of its
// batches, one a checkpoint (c1, c2, c3), on streams[i] with recs[i]
// records (its next seq on that stream), taking a copy of the live state
// store (backup) after c1. c2 and c3 hold one file each.
func (r *rig) copyThenTwoCommits(t *testing.T, streams [3]string, recs [3]int) (p *Producer, backup []byte, c2, c3 CheckpointResult) {
	t.Helper()
	e := r.start(nil)
	p = r.initProducer("p")
	seqs := map[string]int64{}
	var cs [3]CheckpointResult
	for i, s := range streams {
		mustSend(t, e, p, s, seqs[s], recs[i])
		seqs[s]++
		cs[i] = r.commit()
		if i == 0 {
			backup = r.storeCopy() // a backup of the live store, after c1
		}
	}
	if len(cs[1].Files) != 1 || len(cs[2].Files) != 1 {
		t.Fatalf("checkpoints: %+v, %+v", cs[1], cs[2])
	}
	return p, backup, cs[1], cs[2]
}
