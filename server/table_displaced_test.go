package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// TestTableDisplacedFile: something that is not eosink's holds a file
// where a table stream's partition directory goes (<stream>/s=x), so the
// part file's final name is refused for good (ENOTDIR) and the file is
// displaced (<stream>/_displaced/<part>), which exists so that foreign
// content never holds back the node's checkpoints (I13). The checkpoint
// must still commit, and the other stream's batches with it.
func TestTableDisplacedFile(t *testing.T) {
	r, d := tableRig(t)
	e := r.startTable(tableConf)
	ctx := context.Background()
	// Records of invariant.Batch hold "s": the stream name.
	if err := afero.WriteFile(r.fs, rigDest+"/"+tableStream+"/s="+tableStream, []byte("not eosink's"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSend(t, e, nil, tableStream, 1, 2)
	mustSend(t, e, nil, "other", 1, 2)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := e.Checkpoint(cctx)
	if err != nil || res.State != recovery.Committed {
		t.Fatalf("checkpoint with a table file displaced: %+v, %v (stuck: %q)", res, err, e.Status().Stuck)
	}
	cur := snapshotsOf(t, d)
	if cur.Version != 1 || cur.Metadata.CurrentSnapshot().Summary.Properties["total-records"] != "2" {
		t.Fatalf("table at v%d, want v1 holding the batch's 2 records", cur.Version)
	}
	paths, err := table.DataFiles(ctx, d, tableStream, cur.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || !strings.HasPrefix(paths[0].Path, tableStream+"/_displaced/") {
		t.Fatalf("table data files %v, want the one displaced file", paths)
	}
	if err := r.fs.Remove(rigDest + "/" + tableStream + "/s=" + tableStream); err != nil {
		t.Fatal(err)
	}
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: tableStream, Seq: 1}: true, {Stream: "other", Seq: 1}: true}, Exact: true})
}
