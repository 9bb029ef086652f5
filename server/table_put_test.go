package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/recovery"
)

// TestTablePutRefusesForeignTable: a PUT making a stream a table is
// checked against the table the destination already holds at the
// stream's place (another node sharing the destination configured the
// stream otherwise, or another writer made the table): a schema or
// partition spec the table can't take is refused with a 400 naming the
// field, and a table the stream can join is accepted. Before the check
// the PUT was accepted, its batches too, and their checkpoint's table
// commit failed for good (table.ErrIncompatible: an abort verdict after
// "prepared"): the commit was stuck, and with it every later checkpoint
// of the node, every stream's.
func TestTablePutRefusesForeignTable(t *testing.T) {
	r, d := tableRig(t)
	e := r.start(nil)
	ctx := context.Background()
	// Node n0 made the table with column q a double, not an int64.
	theirs := tableConf
	theirs.Schema = &streamconf.Schema{Fields: append([]streamconf.Field(nil), testSchema.Fields...)}
	theirs.Schema.Fields[2].Type = streamconf.TypeDouble
	plant := func(c streamconf.Config, node string) {
		t.Helper()
		ice := &table.Iceberg{Dest: d.Local, Location: "file://" + rigDest,
			Config: func(string) (streamconf.Config, bool) { return c.Defaults(), true }}
		f := committer.File{Stream: tableStream, Final: tableStream + "/s=x/" + layout.PartName(node, 1, 0, "parquet"),
			Bytes: 100, Records: 1, Format: streamconf.FormatParquet, Table: streamconf.TableIceberg}
		if err := ice.Commit(ctx, node, 1, []committer.File{f}); err != nil {
			t.Fatal(err)
		}
	}
	plant(theirs, "n0")
	r.broken = "the test plants table metadata naming a file of another node"
	_, err := e.PutStream(ctx, tableStream, tableConf)
	var fe *streamconf.FieldError
	if !errors.As(err, &fe) || fe.Field != "schema.fields[2]" {
		if err == nil {
			// What followed before the check: accepted, then stuck.
			if _, werr := send(e, nil, tableStream, 1, 2); werr != nil {
				t.Fatalf("PUT accepted; write: %v", werr)
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			res, cerr := e.Checkpoint(cctx)
			t.Fatalf("PUT of a schema the table can't take accepted; its checkpoint: %+v, %v (stuck: %q)", res, cerr, e.Status().Stuck)
		}
		t.Fatalf("PUT of a schema the table can't take: %v, want a field error naming schema.fields[2]", err)
	}
	// A partition spec other than the table's is refused too.
	other := theirs
	other.Partition = "p={field:p}"
	if _, err := e.PutStream(ctx, tableStream, other); !errors.As(err, &fe) || fe.Field != "partition" {
		t.Fatalf("PUT of a partition template other than the table's: %v, want a field error naming partition", err)
	}
	// The stream the table can take (its schema, or one more optional
	// field) is accepted and commits.
	if _, err := e.PutStream(ctx, tableStream, theirs); err != nil {
		t.Fatalf("PUT of the table's own schema: %v", err)
	}
	if _, err := send(e, nil, tableStream, 1, 2); err != nil {
		t.Fatal(err)
	}
	if res := r.checkpoint(); res.State != recovery.Committed {
		t.Fatalf("checkpoint: %+v", res)
	}
}
