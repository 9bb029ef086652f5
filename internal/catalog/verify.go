package catalog

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/table"
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Path string `json:"path"`
	What string `json:"what"`
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Manifests int   `json:"manifests"`
	Files     int   `json:"files"`
	Bytes     int64 `json:"bytes"`
	Records   int64 `json:"records"`
	// Tables counts the Iceberg tables checked; TableFiles their data files.
	Tables     int       `json:"tables"`
	TableFiles int       `json:"table_files"`
	Problems   []Problem `json:"problems"`
	// Quarantined lists the files recovery set aside under _quarantine/
	// (part files of a checkpoint whose state store was lost before its
	// manifest was published; their batches were resent). Not a problem:
	// no reader of the streams sees them. Kept for an operator.
	Quarantined []string `json:"quarantined"`
}

// Verify reads the whole destination and reports every file no manifest
// names, every manifest entry whose file is missing or whose size, record
// count or CRC-32C differs, files named by two manifests, and manifests
// that cannot be read. It covers every node's manifests. progress, if not
// nil, is called after each file checked. Manifests are read once, past
// the cache: a full scan would only evict what pages use.
func (c *Catalog) Verify(ctx context.Context, progress func(done, total int)) (*VerifyReport, error) {
	all, err := c.files.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep := &VerifyReport{}
	files := map[string]committer.Entry{}
	var manifests, tables []string
	for _, e := range all {
		switch {
		case strings.HasPrefix(e.Path, layout.ManifestDir+"/"):
			manifests = append(manifests, e.Path)
		case strings.HasPrefix(e.Path, layout.QuarantineDir+"/"):
			rep.Quarantined = append(rep.Quarantined, e.Path)
		case strings.HasPrefix(e.Path, layout.StagingDir+"/"), strings.HasPrefix(e.Path, layout.LeaseDir+"/"), strings.HasPrefix(e.Path, layout.StreamDir+"/"), strings.HasPrefix(e.Path, layout.ForgottenDir+"/"):
			// S3 copy mode's staging objects, node leases and stream
			// configurations are not committed data.
		case layout.IsTableMetadata(e.Path):
			// An Iceberg table's metadata (internal/table), checked
			// against the manifests below.
			if stream, _, ok := layout.ParseTableMetadataName(e.Path); ok && !slices.Contains(tables, stream) {
				tables = append(tables, stream)
			}
		default:
			files[e.Path] = e
		}
	}
	rep.Manifests = len(manifests)
	entries, named := c.manifestEntries(ctx, manifests, rep)
	for i, en := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, ok := files[en.f.Path]; !ok {
			rep.Problems = append(rep.Problems, Problem{Path: en.f.Path, What: "missing (named by " + en.manifest + ")"})
			continue
		}
		c.check(ctx, en.f, rep)
		if progress != nil {
			progress(i+1, len(entries))
		}
	}
	for _, stream := range tables {
		c.verifyTable(ctx, stream, named, entries, rep)
	}
	var stray []string
	for p := range files {
		if !named[p] {
			stray = append(stray, p)
		}
	}
	sort.Strings(stray)
	for _, p := range stray {
		what := "in no manifest"
		if layout.IsTempName(p) {
			what = "temp file in the destination"
		}
		rep.Problems = append(rep.Problems, Problem{Path: p, What: what})
	}
	return rep, nil
}

// manifestEntry is one file a manifest names.
type manifestEntry struct {
	manifest string
	f        layout.ManifestFile
}

// manifestEntries reads every manifest, reporting those that cannot be
// read and files named twice, and returns the files they name, once each.
func (c *Catalog) manifestEntries(ctx context.Context, manifests []string, rep *VerifyReport) ([]manifestEntry, map[string]bool) {
	named := map[string]bool{}
	var entries []manifestEntry
	for _, mp := range manifests {
		m, err := layout.ReadManifest(ctx, c.files, mp)
		if err != nil {
			rep.Problems = append(rep.Problems, Problem{Path: mp, What: err.Error()})
			continue
		}
		for _, f := range m.Files {
			if named[f.Path] {
				rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: "named by more than one manifest"})
				continue
			}
			named[f.Path] = true
			entries = append(entries, manifestEntry{mp, f})
		}
	}
	return entries, named
}

// check reads file f and adds it to rep, or a problem if its size, CRC-32C
// or record count differs from its manifest's.
func (c *Catalog) check(ctx context.Context, f layout.ManifestFile, rep *VerifyReport) {
	size, lines, sum, err := scanFile(ctx, c.files, f.Path)
	switch {
	case err != nil:
		rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: err.Error()})
	case size != f.Bytes:
		rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("%d bytes, manifest says %d", size, f.Bytes)})
	case sum != f.CRC32C:
		rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("crc32c %s, manifest says %s", sum, f.CRC32C)})
	case format.Encoded(f.Path):
		// Compressed or Parquet: decode it and count (verify_encoded.go).
		if err := checkEncoded(ctx, c.files, f.Path, size, f.Records); err != nil {
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: err.Error()})
			return
		}
		rep.Files++
		rep.Bytes += size
		rep.Records += f.Records
	case lines != f.Records:
		rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("%d records, manifest says %d", lines, f.Records)})
	default:
		rep.Files++
		rep.Bytes += size
		rep.Records += lines
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// scanFile returns a file's size, line count and CRC-32C (hex).
func scanFile(ctx context.Context, r Reader, name string) (size, lines int64, sum string, err error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return 0, 0, "", fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	h := crc32.New(castagnoli)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			size += int64(n)
			for _, b := range buf[:n] {
				if b == '\n' {
					lines++
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, "", fmt.Errorf("read: %w", rerr)
		}
	}
	return size, lines, fmt.Sprintf("%08x", h.Sum32()), nil
}

// checkpointOf is a node's checkpoint.
type checkpointOf struct {
	node string
	id   uint64
}

// verifyTable checks stream's Iceberg table (its newest metadata) against
// the manifests, both ways. Table to manifests: every data file of its
// current snapshot is a committed file some manifest names, and none is in
// it twice (a reader would read it twice). Manifests to table: every file
// of the stream a manifest names is in the table, added by the snapshot of
// the manifest's checkpoint (one snapshot per checkpoint) — from each
// node's first checkpoint the table shows on: a stream may have become a
// table after its first files, and the files of a node none of whose
// checkpoints is in the table are not checked.
func (c *Catalog) verifyTable(ctx context.Context, stream string, named map[string]bool, entries []manifestEntry, rep *VerifyReport) {
	where := layout.TableHintName(stream)
	cur, err := table.Load(ctx, c.files, stream)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Path: where, What: "table: " + err.Error()})
		return
	}
	for _, sk := range cur.Skipped {
		rep.Problems = append(rep.Problems, Problem{Path: sk.Name, What: "table " + stream + ": metadata that does not parse, passed over (" + sk.Err.Error() + ")"})
	}
	if cur.Version == 0 {
		return
	}
	where = layout.TableMetadataName(stream, cur.Version)
	files, err := table.DataFiles(ctx, c.files, stream, cur.Metadata)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Path: where, What: "table: " + err.Error()})
		return
	}
	added := make(map[string][]int64, len(files)) // data file → the snapshots that added it
	first := map[string]uint64{}                  // node → its lowest checkpoint in the table
	for _, f := range files {
		_, seen := added[f.Path]
		switch {
		case seen:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: "in table " + stream + " twice (" + where + ")"})
		case !named[f.Path]:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: "in table " + stream + " (" + where + ") but in no manifest"})
		}
		added[f.Path] = append(added[f.Path], f.SnapshotID)
		if node, ck, _, _, ok := layout.ParsePartName(path.Base(f.Path)); ok {
			if have, ok := first[node]; !ok || ck < have {
				first[node] = ck
			}
		}
	}
	// A snapshot's own id is table.SnapshotID unless that id was taken
	// (planted): then its summary says whose it is.
	origin := map[int64]checkpointOf{}
	for _, sn := range cur.Metadata.Snapshots() {
		if sn.Summary != nil {
			c, err := strconv.ParseUint(sn.Summary.Properties[table.SummaryCheckpoint], 10, 64)
			if n := sn.Summary.Properties[table.SummaryNode]; err == nil && n != "" {
				origin[sn.SnapshotID] = checkpointOf{n, c}
			}
		}
	}
	for _, en := range entries {
		if en.f.Stream != stream {
			continue
		}
		node, ck, ok := layout.ParseManifestName(en.manifest)
		if from, in := first[node]; !ok || !in || ck < from {
			continue
		}
		ids, in := added[en.f.Path]
		switch want := table.SnapshotID(stream, node, ck); {
		case !in:
			rep.Problems = append(rep.Problems, Problem{Path: en.f.Path, What: fmt.Sprintf("committed by %s but in no snapshot of table %s (%s)", en.manifest, stream, where)})
		case !slices.Contains(ids, want) && !slices.ContainsFunc(ids, func(id int64) bool { return origin[id] == checkpointOf{node, ck} }):
			rep.Problems = append(rep.Problems, Problem{Path: en.f.Path, What: fmt.Sprintf("in table %s added by snapshot %d, not by checkpoint %d's own %d (%s)", stream, ids[0], ck, want, where)})
		}
	}
	rep.Tables++
	rep.TableFiles += len(added)
}
