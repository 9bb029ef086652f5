package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// Table maintenance keeps metadata bounded (I11) as part of each append,
// so no background job is needed and several nodes need no coordination:
//
//   - expiry: a commit that would leave more than keep_snapshots
//     snapshots removes the oldest (Expirable), never the newest of a node;
//     the data files stay in the table (appends only: every file of an
//     expired snapshot is in the current one's manifests), and nothing is
//     deleted from the destination (I7);
//   - merging: a commit whose manifest list would hold more than
//     MaxManifests manifests rewrites the small ones (under
//     mergeTargetBytes) into one, their entries kept as EXISTING with
//     their snapshot ids and sequence numbers (Iceberg's merge append).
//
// Reading a table then costs one metadata file, one manifest list and a
// bounded number of manifests, however many checkpoints it has seen.

// mergeTargetBytes: manifests at least this big are left alone.
const mergeTargetBytes = 8 << 20

// merge returns old with its small data manifests merged into one when
// the new list would hold more than MaxManifests.
func (t *Iceberg) merge(ctx context.Context, stream string, snapID int64, old []iceberg.ManifestFile,
	spec iceberg.PartitionSpec, schema *iceberg.Schema) ([]iceberg.ManifestFile, error) {
	maxN := t.MaxManifests
	if maxN <= 0 {
		maxN = DefaultMaxManifests
	}
	if len(old)+1 <= maxN {
		return old, nil
	}
	var keep, small []iceberg.ManifestFile
	for _, m := range old {
		if m.ManifestContent() == iceberg.ManifestContentData && int(m.PartitionSpecID()) == spec.ID() && m.Length() < mergeTargetBytes {
			small = append(small, m)
		} else {
			keep = append(keep, m)
		}
	}
	// Read them first. One that can't be read (a name outside the
	// destination, Avro that does not decode: damaged or planted, I13)
	// stays in the list as it is, unmerged: the table is no worse than it
	// was, and the commit goes on.
	var readable []iceberg.ManifestFile
	var entries [][]iceberg.ManifestEntry
	for _, m := range small {
		name, err := t.rel(m.FilePath())
		if err != nil {
			t.log().Warn("table manifest outside the destination: left unmerged", "stream", stream, "path", m.FilePath(), "err", err)
			keep = append(keep, m)
			continue
		}
		b, err := readAll(ctx, t.Dest, name)
		if err != nil && !errors.Is(err, committer.ErrNotFound) {
			return nil, fmt.Errorf("merge manifests: read %s: %w", name, err)
		}
		var es []iceberg.ManifestEntry
		if err == nil {
			es, err = readManifest(m, b)
		}
		if err != nil {
			t.log().Warn("table manifest that does not decode: left unmerged", "stream", stream, "path", name, "err", err)
			keep = append(keep, m)
			continue
		}
		readable, entries = append(readable, m), append(entries, es)
	}
	if len(readable) < 2 {
		return old, nil
	}
	var buf bytes.Buffer
	w, err := iceberg.NewManifestWriter(2, &buf, spec, schema, snapID)
	if err != nil {
		return nil, fmt.Errorf("merge manifests: %w", err)
	}
	for _, es := range entries {
		for _, e := range es {
			if err := w.Existing(e); err != nil {
				return nil, fmt.Errorf("merge manifests: %w", err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("merge manifests: %w", err)
	}
	body, err := uncompressOCF(buf.Bytes())
	if err != nil {
		return nil, err
	}
	name := layout.TableAvroName(stream, "merged", snapID, token())
	if err := t.Dest.Publish(ctx, name, body); err != nil {
		return nil, fmt.Errorf("publish merged manifest: %w", err)
	}
	mf, err := w.ToManifestFile(t.Location+"/"+name, int64(len(body)))
	if err != nil {
		return nil, fmt.Errorf("merged manifest file: %w", err)
	}
	return append(keep, mf), nil
}
