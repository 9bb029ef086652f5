package server

import (
	"testing"

	"github.com/eosink/eosink/committer/local"
)

// TestTableHalfCommittedAfterStoreLoss: the state store is lost while a
// checkpoint of a table stream commits, after its table commit and before
// its manifest (the table commit comes first: docs/design.md "Tables").
// The rebuild from the manifests does not count the checkpoint, so its
// clients resend its batches, which is right for the files (they are set
// aside or reported), but the table's snapshot of the lost checkpoint
// stays: a reader of the table sees those batches twice (I2 for tables).
// recovery.unnamedParts leaves table streams' files in place on purpose
// (moved, they would leave the snapshot naming missing files); nothing
// reconciles the table.
//
// Left skipped: a fix needs the rebuild to learn the lost checkpoint's
// producer ranges from the table (its snapshot summary holds only node
// and checkpoint) or the table commit to follow the manifest (and recovery
// after a loss to finish table commits from manifests): a design change.
func TestTableHalfCommittedAfterStoreLoss(t *testing.T) {
	t.Skip("known defect, not fixed: a table holds a checkpoint the rebuild after a store loss does not count; its resent batches are in the table twice (see the comment)")
	r := newLeasedRig(t, nil)
	leased := r.tweak
	d := &crashingDest{}
	r.tweak = func(c *Config) {
		d.Local = local.New(c.FS, rigDest, rigStaging)
		c.Publisher, c.TableLocation = d, "file://"+rigDest
		leased(c)
	}
	e := r.start(nil)
	if _, err := e.PutStream(t.Context(), tableStream, tableConf); err != nil {
		t.Fatal(err)
	}
	p := r.initProducer("p")
	mustSend(t, e, p, tableStream, 0, 3)
	res := r.commit()
	r.loseCommit(res.ID, nil)
	r.broken = "the lost checkpoint's table files stay in place, named by no manifest"

	e = r.start(nil)
	ps, err := e.InitProducer(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	p.Epoch = ps.Epoch
	next := ps.Streams[tableStream].NextSeq
	for seq := next; seq < 1; seq++ {
		mustSend(t, e, p, tableStream, seq, 3) // the client resends what init says is not committed
	}
	r.commit()
	cur := snapshotsOf(t, d)
	if got := cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"]; got != "3" {
		t.Fatalf("after the loss and the resend (init said next_seq %d), the table holds %s records; the client's one batch has 3", next, got)
	}
}
