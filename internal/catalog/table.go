package catalog

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/table"
)

// TableSnapshot is one snapshot of a stream's Iceberg table.
type TableSnapshot struct {
	ID         int64
	Sequence   int64
	Time       time.Time
	Node       string // eosink.node of its summary
	Checkpoint uint64 // eosink.checkpoint
	Files      int64  // data files it added
	Records    int64  // records it added
	Current    bool
}

// TableView is a stream's Iceberg table as its newest metadata says.
type TableView struct {
	Version   int64
	Snapshots []TableSnapshot // newest first, at most the limit asked
	Total     int             // snapshots the metadata keeps
	Records   int64           // total-records of the current snapshot
}

// Table reads stream's Iceberg table: its newest limit snapshots. nil
// and no error when the stream is no table. The cost is one metadata
// file, whose size table maintenance bounds (keep_snapshots).
func (c *Catalog) Table(ctx context.Context, stream string, limit int) (*TableView, error) {
	cur, err := table.Load(ctx, c.files, stream)
	if err != nil || cur.Version == 0 {
		return nil, err
	}
	md := cur.Metadata
	v := &TableView{Version: cur.Version, Total: len(md.Snapshots())}
	var current int64
	if s := md.CurrentSnapshot(); s != nil {
		current = s.SnapshotID
		if s.Summary != nil {
			v.Records, _ = strconv.ParseInt(s.Summary.Properties["total-records"], 10, 64)
		}
	}
	for _, s := range md.Snapshots() {
		ts := TableSnapshot{ID: s.SnapshotID, Sequence: s.SequenceNumber, Time: time.UnixMilli(s.TimestampMs).UTC(), Current: s.SnapshotID == current}
		if s.Summary != nil {
			p := s.Summary.Properties
			ts.Node = p[table.SummaryNode]
			ts.Checkpoint, _ = strconv.ParseUint(p[table.SummaryCheckpoint], 10, 64)
			ts.Files, _ = strconv.ParseInt(p["added-data-files"], 10, 64)
			ts.Records, _ = strconv.ParseInt(p["added-records"], 10, 64)
		}
		v.Snapshots = append(v.Snapshots, ts)
	}
	sort.Slice(v.Snapshots, func(i, j int) bool { return v.Snapshots[i].Sequence > v.Snapshots[j].Sequence })
	if len(v.Snapshots) > limit {
		v.Snapshots = v.Snapshots[:limit]
	}
	return v, nil
}
