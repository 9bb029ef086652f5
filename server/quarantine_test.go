package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
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

// movesThenFails is a destination whose Move number at (from 1) moves the
// file and then reports err, as a rename whose directory sync failed, or
// an S3 copy whose answer was lost, would.
type movesThenFails struct {
	*local.Local
	at    int32
	err   error
	moved atomic.Int32
}

func (m *movesThenFails) Move(ctx context.Context, from, to string) error {
	if err := m.Local.Move(ctx, from, to); err != nil {
		return err
	}
	if m.moved.Add(1) == m.at {
		return m.err
	}
	return nil
}

// TestFirstCommitSetAsideIDsKept: a node's first checkpoint with data was
// cut short before its manifest and its store and lease were lost. The
// start that finds its files must open beyond their id (I8) also when it
// cannot move them all at its first try:
//   - "move-retried": the last move is made but reported failed; the
//     recovery step is retried and its listing no longer shows the files.
//   - "stopped-before-reserving": the start stops (a failed sync) after
//     setting the files aside and before reserving ids in the store and
//     the lease; the next start finds a new store and a lease, readable, that
//     names no ids, and the files under _quarantine/.
//   - "table-streams": the streams have table metadata (another node's
//     table, a shared destination): their files are left where they are.
func TestFirstCommitSetAsideIDsKept(t *testing.T) {
	for _, tc := range []string{"move-retried", "stopped-before-reserving", "table-streams"} {
		t.Run(tc, func(t *testing.T) {
			r := newLeasedRig(t, nil)
			leased := r.tweak
			e := r.start(nil)
			p := r.initProducer("p")
			must := map[invariant.BatchID]bool{}
			for _, s := range []string{"a", "b"} {
				mustSend(t, e, p, s, 0, 3)
				must[invariant.BatchID{Producer: "p", Stream: s, Seq: 0}] = true
			}
			res := r.commit()
			r.loseCommit(res.ID, nil, leaseDeleted)
			switch tc {
			case "move-retried":
				r.tweak = func(c *Config) {
					leased(c)
					c.Committer = &movesThenFails{Local: c.Committer.(*local.Local), at: 2, err: errors.New("injected: moved, reported failed")}
				}
			case "stopped-before-reserving":
				r.tweak = func(c *Config) {
					leased(c)
					c.Committer = &movesThenFails{Local: c.Committer.(*local.Local), at: 2, err: fmt.Errorf("injected: %w", durable.ErrSync)}
				}
				if _, err := r.open(nil, 30*time.Second); !errors.Is(err, durable.ErrSync) {
					t.Fatalf("start with a failing sync: %v, want it stopped with ErrSync", err)
				}
				r.closeStopped(r.e) // the failed sync, said
				r.tweak = leased
			case "table-streams":
				for _, s := range []string{"a", "b"} {
					if err := afero.WriteFile(r.fs, rigDest+"/"+s+"/metadata/version-hint.text", []byte("1"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				r.broken = "the lost checkpoint's files of table streams stay in place, in no manifest"
			}
			e = r.start(nil)
			if open := e.Status().OpenID; open <= res.ID {
				t.Fatalf("after the loss the open checkpoint is %d; the lost one's files named %d (I8)", open, res.ID)
			}
			if tc == "table-streams" {
				return
			}
			ps := r.initState("p")
			p.Epoch = ps.Epoch
			for _, s := range []string{"a", "b"} {
				if wr, err := send(e, p, s, 0, 3); err != nil || wr.Duplicate {
					t.Fatalf("resend %s/0: %+v, %v; want accepted anew", s, wr, err)
				}
			}
			r.commit()
			r.checkQuarantined(invariant.Expect{Must: must, Exact: true}, 2)
		})
	}
}

// TestQuarantineRefusedStarts: what lies where a start sets files aside
// (planted: other content at a file's quarantine name; on a local
// destination also a file named _quarantine/<node>, which MemMapFs does
// not refuse) can make a move fail for good. The start must still become
// ready, leaving the file where it is (eosink verify lists it), and open
// beyond its id (I13, I8).
func TestQuarantineRefusedStarts(t *testing.T) {
	for _, tc := range []string{"other-content-at-name"} {
		t.Run(tc, func(t *testing.T) {
			r := newLeasedRig(t, nil)
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "a", 0, 3)
			res := r.commit()
			r.loseCommit(res.ID, nil, leaseDeleted)
			r.broken = "the lost checkpoint's file stays in place, in no manifest"
			plant(t, r.fs, layout.QuarantineName(rigNode, res.Files[0].Final), []byte("planted\n"))
			e, err := r.open(nil, 5*time.Second)
			if err != nil {
				t.Fatalf("start with the set-aside refused: %v (status %+v)", err, e.Status())
			}
			if open := e.Status().OpenID; open <= res.ID {
				t.Fatalf("open checkpoint %d; the lost one's file named %d (I8)", open, res.ID)
			}
		})
	}
}

// TestFirstStartLeavesCommittedData: a node with a new store and no lease
// finds part files of its name from several checkpoints and no manifest
// of it: not one first checkpoint whose commit was cut short (only one
// checkpoint can have placed files before any manifest), but committed
// data whose manifests are gone — copied without eosink's own folders, a
// node id (the host name by default) used again over a former
// deployment's files. They stay where they are (I7); ids go on beyond
// theirs (I8).
func TestFirstStartLeavesCommittedData(t *testing.T) {
	r := newLeasedRig(t, nil)
	files := []string{
		"a/dt=2026-11-28/hour=10/" + layout.PartName(rigNode, 3, 0, "ndjson"),
		"a/dt=2026-11-28/hour=11/" + layout.PartName(rigNode, 5, 0, "ndjson"),
		"b/dt=2026-11-28/hour=11/" + layout.PartName(rigNode, 5, 1, "ndjson"),
	}
	for _, f := range files {
		plant(t, r.fs, f, []byte("{\"x\":1}\n"))
	}
	r.broken = "a former deployment's files without their manifests"
	e := r.start(nil)
	if open := e.Status().OpenID; open <= 5 {
		t.Fatalf("open checkpoint %d; the destination shows this node's checkpoint 5 (I8)", open)
	}
	for _, f := range files {
		if _, err := r.fs.Stat(rigDest + "/" + f); err != nil {
			t.Fatalf("%s: %v: committed data moved (I7)", f, err)
		}
	}
}

// TestRebuildLeavesCommittedData: the rebuild after a store loss finds
// part files of several checkpoints beyond the newest manifest — their
// manifests removed by hand, not one commit cut short (only the checkpoint
// after the newest manifest can have placed files without one). They are
// committed data: left where they are (I7), not set aside.
func TestRebuildLeavesCommittedData(t *testing.T) {
	r := newLeasedRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	var res []CheckpointResult
	for seq := range int64(3) {
		mustSend(t, e, p, "a", seq, 1)
		res = append(res, r.commit())
	}
	r.stopLosingStore()
	expireLease(t, r.fs)
	for _, c := range res[1:] {
		if err := r.fs.Remove(rigDest + "/" + layout.ManifestName(rigNode, c.ID)); err != nil {
			t.Fatal(err)
		}
	}
	r.broken = "committed files whose manifests were removed"
	e = r.start(nil)
	for _, c := range res[1:] {
		if _, err := r.fs.Stat(rigDest + "/" + c.Files[0].Final); err != nil {
			t.Fatalf("%s: %v: committed data moved (I7)", c.Files[0].Final, err)
		}
	}
	if open := e.Status().OpenID; open <= res[2].ID {
		t.Fatalf("open checkpoint %d; the destination shows %d (I8)", open, res[2].ID)
	}
}

// TestFirstCommitSetAsideThenStartCut: the state store and the lease are
// lost while the node's first checkpoint with data commits (files placed,
// no manifest); the next start sets the files aside (_quarantine/) and is
// cut before it reserves ids in the new store (a full disk, then the
// process killed). The start after finds no part file left in place and
// the lease and store still know no ids; the set-aside files are all that
// shows the lost checkpoint's id, which its clients were answered with: it
// must open beyond it (I8), as the start that set them aside would have.
func TestFirstCommitSetAsideThenStartCut(t *testing.T) {
	for _, lease := range []leaseAfterLoss{leaseUnreadable, leaseDeleted} {
		t.Run("lease-"+lease.String(), func(t *testing.T) {
			r := newLeasedRig(t, nil)
			f := r.withStoreFaults()
			e := r.start(nil)
			p := r.initProducer("p")
			mustSend(t, e, p, "a", 0, 3)
			res := r.commit()
			if len(res.Files) != 1 {
				t.Fatalf("checkpoint: %+v", res)
			}
			r.loseCommit(res.ID, nil, lease)

			// The start sets the files aside, then cannot reserve ids: the
			// disk is full, and the process is killed while it waits.
			f.set(failOp("reserve", recovery.BeforeCommit, errPageENOSPC, 1<<30))
			if _, err := r.open(nil, 300*time.Millisecond); err == nil {
				t.Fatal("the start reserved ids on a full disk")
			}
			r.stop()
			f.mu.Lock()
			fired := len(f.fired)
			f.mu.Unlock()
			if fired == 0 {
				t.Fatal("the start did not come to reserving ids")
			}
			f.set(nil)
			if q, _ := afero.Glob(r.fs, rigDest+"/"+layout.QuarantineDir+"/"+rigNode+"/a/*"); len(q) != 1 {
				t.Fatalf("set aside before the cut: %v, want the lost checkpoint's file", q)
			}

			e = r.start(nil)
			if open := e.Status().OpenID; open <= res.ID {
				t.Fatalf("after the cut start the open checkpoint is %d; the set-aside files named %d, answered to their clients (I8)", open, res.ID)
			}
			ps := r.initState("p")
			p.Epoch = ps.Epoch
			if wr, err := send(e, p, "a", 0, 3); err != nil || wr.Duplicate {
				t.Fatalf("resend a/0: %+v, %v; want accepted anew", wr, err)
			}
			r.commit()
			r.checkQuarantined(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 0}: true}, Exact: true}, 1)
		})
	}
}

// A record's partition values make its file's path as long as the
// destination takes (accepted: the write-time check allows it), and the
// state store is lost while that file's checkpoint commits (renamed into
// place, no manifest). The next start moves the file aside under
// _quarantine/<node>/: a path longer than the file's own by
// len("_quarantine/n1/"), over PATH_MAX (an S3 key over 1,024 bytes
// likewise). The move then fails on every try and the node never becomes
// ready: a client's record keeps it from starting (I13).
func TestQuarantineOfLongestPath(t *testing.T) {
	// A deep folder holds the destination: its files' paths reach
	// PATH_MAX with partition values of at most 200 bytes.
	dir := t.TempDir()
	for len(dir) < 800 {
		dir += "/" + strings.Repeat("d", 200)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := newLeasedRig(t, afero.NewBasePathFs(afero.NewOsFs(), dir))
	r.foreign = true
	e := r.start(nil)
	// The file's real path: dir + rigDest + "/" + final, 4,090 bytes
	// (PATH_MAX 4,096 with the NUL); the quarantine adds 15.
	part := layout.PartName(rigNode, 99, 0, "ndjson")
	segs := 4090 - len(dir) - len(rigDest) - 1 - len("ev/") - 1 - len(part)
	const levels = 16
	left := segs - levels*len("fNN=") - (levels - 1) // bytes of values
	var tmpl, vals []string
	for i := range levels {
		n := left / (levels - i)
		left -= n
		tmpl = append(tmpl, fmt.Sprintf("f%02d={field:f%02d}", i, i))
		vals = append(vals, fmt.Sprintf(`"f%02d":"%s"`, i, strings.Repeat("v", n)))
	}
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: strings.Join(tmpl, "/")})
	if _, err := writeLines(e, "ev", "{"+strings.Join(vals, ",")+"}"); err != nil {
		t.Fatalf("write: %v", err)
	}
	res := r.commit()
	if len(res.Files) != 1 {
		t.Fatalf("checkpoint: %+v", res)
	}
	if got := len(dir) + len(rigDest) + 1 + len(res.Files[0].Final); got != 4090 {
		t.Fatalf("the file's real path is %d bytes, want 4090", got)
	}
	r.loseCommit(res.ID, nil, leaseExpired)

	e, err := r.open(nil, 5*time.Second)
	if err != nil {
		why := e.Status().Recovering
		if len(why) > 60 {
			why = why[len(why)-60:] // the paths in it are 4,000 bytes
		}
		r.broken = "the node never started"
		t.Fatalf("start after the loss: %v (...%s)", err, why)
	}
	r.checkQuarantined(invariant.Expect{}, 1)
}

// A checkpoint is renamed into place but its manifest is not published
// (a crash mid-commit), and the state store that prepared it is replaced
// by an older copy (a backup restored after the crash damaged it) taken
// before that checkpoint was prepared. No manifest is newer than the copy
// (the lost checkpoint has none) and the copy is not new, so neither
// trigger of the rebuild fires, and the half-committed files stay beside
// the copies their clients resend: each such batch is in the destination
// twice for readers that list it, and in no manifest once (I2). The lease
// shows ids reserved beyond the copy's, which only an older store shows.
func TestHalfCommittedCheckpointQuarantinedOlderCopy(t *testing.T) {
	r := newLeasedRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	must := map[invariant.BatchID]bool{{Producer: "p", Stream: "a", Seq: 0}: true, {Producer: "p", Stream: "a", Seq: 1}: true}
	mustSend(t, e, p, "a", 0, 2)
	r.commit()
	r.stop()
	backup := r.storeCopy()
	e = r.start(nil) // reserves a new block of ids, in the store and the lease
	mustSend(t, e, p, "a", 1, 3)
	// The crash cut the commit before the manifest; the store is replaced
	// by the backup.
	r.loseCommit(r.commit().ID, backup, leaseExpired)

	r.resendCutBatch(t, p)
	r.checkQuarantined(invariant.Expect{Must: must, Exact: true}, 1)
}

// resendCutBatch starts r over a store put back from before p's batch
// a/1 (3 records) was committed in a checkpoint a crash cut before its
// manifest: init says next_seq 1 on a, p resends a/1, taken anew, and it
// commits.
func (r *rig) resendCutBatch(t *testing.T, p *Producer) {
	t.Helper()
	e := r.start(nil)
	ps := r.initState("p")
	if got := ps.Streams["a"].NextSeq; got != 1 {
		t.Fatalf("after the restore, init says next_seq %d on a, want 1", got)
	}
	p.Epoch = ps.Epoch
	if wr, err := send(e, p, "a", 1, 3); err != nil || wr.Duplicate {
		t.Fatalf("resend a/1: %+v, %v; want accepted anew", wr, err)
	}
	r.commit()
}

// A committed checkpoint's manifest is missing (deleted by an operator's
// clean-up or a bucket rule; eosink itself never deletes one), and later
// the state store is lost. Checkpoints commit one at a time and each
// publishes its manifest before the next renames a file, so only files of
// checkpoints after the newest manifest can be half-committed; but the
// start moves every part file of this node whose checkpoint has no
// manifest, so the files of that committed checkpoint — whose batches
// clients were told are committed (200), and which the rebuilt producers
// count as committed through the later manifests, so nobody resends them
// — leave the stream for _quarantine/, and eosink verify calls that "not a
// problem" (I7: committed data is never deleted or rewritten).
func TestQuarantineSparesCheckpointsBeforeNewestManifest(t *testing.T) {
	r := newRig(t, nil)
	e := r.start(nil)
	p := r.initProducer("p")
	var first CheckpointResult
	for q := range int64(2) {
		if wr := mustSend(t, e, p, "a", q, 2); wr.Duplicate {
			t.Fatalf("send: %+v", wr)
		}
		res := r.commit()
		if len(res.Files) != 1 {
			t.Fatalf("checkpoint: %+v", res)
		}
		if q == 0 {
			first = res
		}
	}
	// The manifest lost is the first checkpoint's, not the last's.
	r.loseCommit(first.ID, nil, leaseExpired)
	r.broken = "a committed checkpoint's manifest was deleted"
	r.start(nil)
	if got := r.initState("p").Streams["a"].NextSeq; got != 2 {
		t.Fatalf("after the loss, init says next_seq %d; 0 and 1 were committed", got)
	}
	if _, err := r.fs.Stat(rigDest + "/" + first.Files[0].Final); err != nil {
		t.Fatalf("the committed file of the checkpoint whose manifest is missing: %v (I7)", err)
	}
}
