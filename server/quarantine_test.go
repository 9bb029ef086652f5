package server

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/spf13/afero"
)

// The disk holding the state store (and the staging files) is lost while a
// checkpoint commits: its files are renamed into place, its manifest is not
// published. The destination then holds files no manifest names, whose
// batches no client was told are committed; the producers rebuilt from the
// manifests resend them. Recovery must set the half-committed files aside
// (_quarantine/<node>/...) so every batch is in the destination once — not
// leave them beside the resent copies. "first": the lost checkpoint was the
// node's first, so no manifest shows the store is behind; only the lease
// does.
//
// The lease may be gone too (deleted, or unreadable): then a first
// checkpoint's files are all that shows a former incarnation of the node
// wrote (no manifest, no reserved ids), and the start still finds them,
// and opens beyond their id (I8).
func TestHalfCommittedCheckpointQuarantined(t *testing.T) {
	for _, first := range []bool{false, true} {
		for _, lease := range []leaseAfterLoss{leaseExpired, leaseUnreadable, leaseDeleted} {
			name := map[bool]string{false: "after-manifests", true: "first"}[first] + "/lease-" + lease.String()
			t.Run(name, func(t *testing.T) { halfCommittedQuarantined(t, first, lease) })
		}
	}
}

func halfCommittedQuarantined(t *testing.T, first bool, lease leaseAfterLoss) {
	r := newLeasedRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	must := map[invariant.BatchID]bool{}
	seq := int64(0)
	if !first {
		mustSend(t, e, p, "a", seq, 2)
		must[invariant.BatchID{Producer: "p", Stream: "a", Seq: seq}] = true
		seq++
		r.commit()
	}
	// The checkpoint the disk loss cuts: two files, in two streams.
	lostA, lostB := seq, int64(0)
	for _, w := range []struct {
		stream string
		seq    int64
	}{{"a", lostA}, {"b", lostB}} {
		mustSend(t, e, p, w.stream, w.seq, 3)
		must[invariant.BatchID{Producer: "p", Stream: w.stream, Seq: w.seq}] = true
	}
	res := r.commit()
	if len(res.Files) != 2 {
		t.Fatalf("checkpoint: %+v", res)
	}
	// Its files are in place; its manifest never was; the disk with the
	// store is gone (a new, empty one takes its place).
	r.loseCommit(res.ID, nil, lease)

	e = r.start(nil)
	if open := e.Status().OpenID; open <= res.ID {
		t.Fatalf("after the loss the open checkpoint is %d; the lost one's files named %d (I8)", open, res.ID)
	}
	ps := r.initState("p")
	p.Epoch = ps.Epoch
	if got := ps.Streams["a"].NextSeq; got != lostA {
		t.Fatalf("after the loss, init says next_seq %d on a; the lost checkpoint held %d", got, lostA)
	}
	// The client resends what it was never told is committed.
	for _, w := range []struct {
		stream string
		seq    int64
	}{{"a", lostA}, {"b", lostB}} {
		wr, err := send(e, p, w.stream, w.seq, 3)
		if err != nil || wr.Duplicate {
			t.Fatalf("resend %s/%d: %+v, %v; want accepted anew", w.stream, w.seq, wr, err)
		}
	}
	r.commit()
	r.checkQuarantined(invariant.Expect{Must: must, Exact: true}, 2)
}

// checkQuarantined checks the destination (rig.check) and that the lost
// checkpoint's n files, and nothing else, were set aside under this node's
// quarantine folder.
func (r *rig) checkQuarantined(exp invariant.Expect, n int) {
	r.t.Helper()
	rep := r.check(exp)
	if len(rep.Quarantined) != n {
		r.t.Fatalf("quarantined %v, want the lost checkpoint's %d files", rep.Quarantined, n)
	}
	for _, q := range rep.Quarantined {
		if !strings.HasPrefix(q, layout.QuarantineDir+"/"+rigNode+"/") {
			r.t.Fatalf("quarantined at %s", q)
		}
	}
}

// newLeasedRig returns a rig whose engines hold the node's lease in the
// destination, at a fixed clock: the store-loss tests need the lease, the
// only record of the lost store's reserved ids that survives it.
func newLeasedRig(t *testing.T, fs afero.Fs) *rig {
	t.Helper()
	r := newRig(t, fs)
	clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	r.tweak = func(c *Config) {
		c.Now = func() time.Time { return clock }
		c.Leaser = c.Publisher.(committer.Leaser)
	}
	return r
}

// loseCommit stops the engine as if a crash cut checkpoint id's commit
// after its renames and before its manifest (the manifest is removed), and
// the state store is lost with it: replaced by backup, or by a new, empty
// store when backup is nil. The node's lease, where there is one
// (newLeasedRig), is damaged as lease says: expired (a new store's start
// cannot prove the dead process gone otherwise), unreadable or deleted.
func (r *rig) loseCommit(id uint64, backup []byte, lease leaseAfterLoss) {
	r.t.Helper()
	r.stop()
	if err := r.fs.Remove(rigDest + "/" + layout.ManifestName(rigNode, id)); err != nil {
		r.t.Fatal(err)
	}
	var err error
	if backup == nil {
		err = os.Remove(r.storePath)
	} else {
		err = os.WriteFile(r.storePath, backup, 0o600)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	damageLease(r.fs, lease, r.t.Fatalf)
}

// expireLease marks the node's lease in the rig's destination expired,
// keeping the ids it reserved, as if the process that held it had died
// long ago (a new store's start cannot prove it dead otherwise).
func expireLease(t testing.TB, fs afero.Fs) {
	t.Helper()
	damageLease(fs, leaseExpired, t.Fatalf)
}
