package server

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/spf13/afero"
)

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
	backup, err := os.ReadFile(r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	e = r.start(nil) // reserves a new block of ids, in the store and the lease
	mustSend(t, e, p, "a", 1, 3)
	// The crash cut the commit before the manifest; the store is replaced
	// by the backup.
	r.loseCommit(r.commit().ID, backup, leaseExpired)

	e = r.start(nil)
	ps := r.initState("p")
	if got := ps.Streams["a"].NextSeq; got != 1 {
		t.Fatalf("after the restore, init says next_seq %d on a, want 1", got)
	}
	p.Epoch = ps.Epoch
	if wr, err := send(e, p, "a", 1, 3); err != nil || wr.Duplicate {
		t.Fatalf("resend a/1: %+v, %v; want accepted anew", wr, err)
	}
	r.commit()
	r.checkQuarantined(invariant.Expect{Must: must, Exact: true}, 1)
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
