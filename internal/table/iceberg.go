package table

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
)

// Errors of table commits.
var (
	// ErrIncompatible means the table or a file does not fit the stream's
	// configuration (a schema the table can't take, a file whose path
	// doesn't parse): a retry does not cure it.
	ErrIncompatible = errors.New("table incompatible with the stream")
	// ErrCorrupt means table metadata in the destination that can't be
	// read as Iceberg metadata.
	ErrCorrupt = errors.New("table metadata unreadable")
)

// Summary and property keys eosink writes.
const (
	SummaryNode       = "eosink.node"
	SummaryCheckpoint = "eosink.checkpoint"
	// PropCommittedPrefix + node is a table property holding the node's
	// highest checkpoint committed to the table: expiry can't lose it.
	PropCommittedPrefix = "eosink.committed."
)

// Dest is what the table commit needs of the destination: create-only
// writes (the metadata files), reads, and a compare-and-swap write for
// the version hint. committer/local and committer/s3 implement it.
type Dest interface {
	committer.Publisher
	committer.Reader
	committer.Leaser
}

// Iceberg commits checkpoints' files into their streams' Iceberg tables.
// Safe for concurrent use; several nodes may commit to one table.
type Iceberg struct {
	Dest Dest
	// Location is the destination's absolute URI, without a trailing
	// slash: file:///abs/path or s3://bucket/prefix. Data files and
	// metadata are named in the table by Location + "/" + name.
	Location string
	// Config returns a stream's configuration in force.
	Config func(stream string) (streamconf.Config, bool)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log gets what maintenance did (nil: discarded).
	Log *slog.Logger
	// MaxManifests is how many manifests a snapshot's list may hold before
	// the commit merges the small ones into one (0: DefaultMaxManifests).
	MaxManifests int
	// MaxRaces bounds lost create-only races within one Commit (0: 100).
	MaxRaces int
}

// DefaultMaxManifests is the manifest count that triggers a merge.
const DefaultMaxManifests = 32

// metadataLogKeep is how many earlier metadata files the metadata log names.
const metadataLogKeep = 10

// Commit appends, for each table stream, its files among files to its
// table as one snapshot of (node, checkpoint), unless the table has it
// already: its snapshots or its eosink.committed.<node> property show
// checkpoint or a later one of node (Flink's max-committed-checkpoint
// technique). Files whose Table is not "iceberg" are skipped. Idempotent:
// call it again after any failure or crash.
func (t *Iceberg) Commit(ctx context.Context, node string, checkpoint uint64, files []committer.File) error {
	byStream := map[string][]committer.File{}
	var streams []string
	for _, f := range files {
		if f.Table != streamconf.TableIceberg {
			continue
		}
		if byStream[f.Stream] == nil {
			streams = append(streams, f.Stream)
		}
		byStream[f.Stream] = append(byStream[f.Stream], f)
	}
	sort.Strings(streams)
	var errs []error
	for _, s := range streams {
		if err := t.commitStream(ctx, s, node, checkpoint, byStream[s]); err != nil {
			errs = append(errs, fmt.Errorf("table %s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// Loaded is a table's newest metadata as found in the destination.
type Loaded struct {
	Version  int64     // N of metadata/vN.metadata.json; 0: no table yet
	Metadata *Metadata // nil: no table
}

// Load reads stream's newest table metadata: from the version hint on,
// the highest vN.metadata.json that exists (the hint may lag: it is
// written after the metadata). No table is Version 0 and no error.
func Load(ctx context.Context, r committer.Reader, stream string) (Loaded, error) {
	v, err := readHint(ctx, r, stream)
	if err != nil {
		return Loaded{}, err
	}
	if v > 0 {
		// A hint naming a version the table lacks (another writer's, a
		// bad restore) is only a hint: probe from the start.
		if _, err := readAll(ctx, r, layout.TableMetadataName(stream, v)); errors.Is(err, committer.ErrNotFound) {
			v = 0
		} else if err != nil {
			return Loaded{}, err
		}
	}
	var body []byte
	for {
		b, err := readAll(ctx, r, layout.TableMetadataName(stream, v+1))
		if errors.Is(err, committer.ErrNotFound) {
			break
		}
		if err != nil {
			return Loaded{}, err
		}
		v, body = v+1, b
	}
	if v == 0 {
		return Loaded{}, nil
	}
	if body == nil { // the hint's own version
		if body, err = readAll(ctx, r, layout.TableMetadataName(stream, v)); err != nil {
			return Loaded{}, fmt.Errorf("read table metadata v%d (named by the version hint): %w", v, err)
		}
	}
	md, err := parseMetadata(body)
	if err != nil {
		return Loaded{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, layout.TableMetadataName(stream, v), err)
	}
	return Loaded{Version: v, Metadata: md}, nil
}

// parseMetadata reads metadata from the destination: untrusted (I13).
func parseMetadata(b []byte) (*Metadata, error) { return ParseMetadata(b) }

func readHint(ctx context.Context, r committer.Reader, stream string) (int64, error) {
	b, err := readAll(ctx, r, layout.TableHintName(stream))
	if errors.Is(err, committer.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0, nil // a hint is only a hint: probe from the start
	}
	return v, nil
}

func readAll(ctx context.Context, r committer.Reader, name string) ([]byte, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// Committed reports whether md holds node's checkpoint (or a later one).
func Committed(md *Metadata, node string, checkpoint uint64) bool {
	if v, ok := md.Properties()[PropCommittedPrefix+node]; ok {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n >= checkpoint {
			return true
		}
	}
	for _, s := range md.Snapshots() {
		if n, c, ok := snapshotOrigin(&s); ok && n == node && c >= checkpoint {
			return true
		}
	}
	return false
}

// snapshotOrigin is the node and checkpoint a snapshot's summary names.
func snapshotOrigin(s *Snapshot) (string, uint64, bool) {
	if s.Summary == nil {
		return "", 0, false
	}
	node, ok := s.Summary.Properties[SummaryNode]
	if !ok {
		return "", 0, false
	}
	c, err := strconv.ParseUint(s.Summary.Properties[SummaryCheckpoint], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return node, c, true
}

// SnapshotID is the id of the snapshot of (stream, node, checkpoint): the
// same on every try, positive.
func SnapshotID(stream, node string, checkpoint uint64) int64 {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", stream, node, checkpoint)))
	id := int64(binary.BigEndian.Uint64(h[:8]) >> 1)
	if id == 0 {
		id = 1
	}
	return id
}

func (t *Iceberg) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Iceberg) commitStream(ctx context.Context, stream, node string, checkpoint uint64, files []committer.File) error {
	cfg, ok := t.Config(stream)
	if !ok || !cfg.IsTable() {
		return fmt.Errorf("%w: stream %s has files for its table but is not configured as one", ErrIncompatible, stream)
	}
	tt, err := cfg.TableTemplate()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIncompatible, err)
	}
	races := t.MaxRaces
	if races <= 0 {
		races = 100
	}
	for try := 0; ; try++ {
		cur, err := Load(ctx, t.Dest, stream)
		if err != nil {
			return err
		}
		if cur.Version > 0 && Committed(cur.Metadata, node, checkpoint) {
			return t.writeHint(ctx, stream, cur.Version)
		}
		next, err := t.build(ctx, stream, node, checkpoint, files, cfg, tt, cur)
		if err != nil {
			return err
		}
		body, err := next.MarshalJSON() // not json.Marshal: it would compact other writers' fields
		if err != nil {
			return fmt.Errorf("encode table metadata: %w", err)
		}
		err = t.Dest.Publish(ctx, layout.TableMetadataName(stream, cur.Version+1), body)
		if errors.Is(err, committer.ErrExists) && try < races {
			continue // another node (or a lost answer of ours) took vN+1: reload
		}
		if err != nil {
			return fmt.Errorf("publish table metadata v%d: %w", cur.Version+1, err)
		}
		return t.writeHint(ctx, stream, cur.Version+1)
	}
}

// exists reports whether the table's version v exists (an error other
// than not found counts as existing: the hint is left).
func (t *Iceberg) exists(ctx context.Context, stream string, v int64) bool {
	_, err := readAll(ctx, t.Dest, layout.TableMetadataName(stream, v))
	return !errors.Is(err, committer.ErrNotFound)
}

// writeHint raises the version hint to v, never lowers it.
func (t *Iceberg) writeHint(ctx context.Context, stream string, v int64) error {
	name := layout.TableHintName(stream)
	for try := 0; try < 100; try++ {
		data, ver, err := t.Dest.ReadLease(ctx, name)
		switch {
		case errors.Is(err, committer.ErrNotFound):
			ver = ""
		case err != nil:
			return fmt.Errorf("version hint: %w", err)
		default:
			if have, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); perr == nil && have >= v && t.exists(ctx, stream, have) {
				return nil // never lowered, unless it names a version the table lacks
			}
		}
		_, err = t.Dest.WriteLease(ctx, name, []byte(strconv.FormatInt(v, 10)), ver)
		if errors.Is(err, committer.ErrExists) || errors.Is(err, committer.ErrPrecondition) {
			continue // another writer: look again
		}
		if err != nil {
			return fmt.Errorf("version hint: %w", err)
		}
		return nil
	}
	return fmt.Errorf("version hint: %w: too many concurrent writers", committer.ErrPrecondition)
}

// build makes the next metadata: cur (or a new table) plus one snapshot
// appending files, with its manifest and manifest list written.
func (t *Iceberg) build(ctx context.Context, stream, node string, checkpoint uint64, files []committer.File,
	cfg streamconf.Config, tt *layout.TableTemplate, cur Loaded) (*Metadata, error) {
	want, err := IcebergSchema(cfg.Schema, 0)
	if err != nil {
		return nil, err
	}
	spec, err := PartitionSpec(tt, cfg.Schema)
	if err != nil {
		return nil, err
	}
	loc := t.Location + "/" + stream
	base := cur.Metadata
	var prevLoc string
	if base == nil {
		base, err = newMetadata(want, spec, loc)
		if err != nil {
			return nil, fmt.Errorf("new table metadata: %w", err)
		}
		if err := sameIDs(base.CurrentSchema(), want); err != nil {
			return nil, err
		}
	} else {
		prevLoc = t.Location + "/" + layout.TableMetadataName(stream, cur.Version)
	}
	b := newBuilder(base, prevLoc)
	schema, err := evolve(b, base.CurrentSchema(), want)
	if err != nil {
		return nil, err
	}
	curSpec := base.PartitionSpec()
	if !curSpec.CompatibleWith(&spec) {
		return nil, fmt.Errorf("%w: the table's partition spec %v differs from the stream's %v", ErrIncompatible, curSpec, spec)
	}
	snapID := SnapshotID(stream, node, checkpoint)
	seq := base.LastSequenceNumber() + 1
	var parentID *int64
	var parent *Snapshot
	if s := base.CurrentSnapshot(); s != nil {
		parent, parentID = s, &s.SnapshotID
	}
	// 1. The manifest of this checkpoint's files.
	mf, added, err := t.writeManifest(ctx, stream, node, checkpoint, snapID, files, curSpec, schema, tt, cfg.Schema)
	if err != nil {
		return nil, err
	}
	// 2. The manifest list: it, and the parent's manifests (merged when
	// there are too many).
	manifests := []iceberg.ManifestFile{mf}
	if parent != nil {
		old, err := t.readList(ctx, parent.ManifestList)
		if err != nil {
			return nil, err
		}
		if old, err = t.merge(ctx, stream, snapID, old, curSpec, schema); err != nil {
			return nil, err
		}
		manifests = append(manifests, old...)
	}
	var list bytes.Buffer
	if err := iceberg.WriteManifestList(2, &list, snapID, parentID, &seq, 0, manifests); err != nil {
		return nil, fmt.Errorf("write manifest list: %w", err)
	}
	listName := layout.TableAvroName(stream, "snap", snapID, token())
	if err := t.publishAvro(ctx, listName, list.Bytes()); err != nil {
		return nil, err
	}
	// 3. The snapshot.
	props := iceberg.Properties{
		SummaryNode:        node,
		SummaryCheckpoint:  strconv.FormatUint(checkpoint, 10),
		"added-data-files": strconv.Itoa(len(files)),
		"added-records":    strconv.FormatInt(added.records, 10),
		"added-files-size": strconv.FormatInt(added.bytes, 10),
	}
	totals(props, parent, len(files), added)
	schemaID := schema.ID
	snap := Snapshot{
		SnapshotID: snapID, ParentSnapshotID: parentID, SequenceNumber: seq,
		TimestampMs:  base.notBefore(t.now().UnixMilli()),
		ManifestList: t.Location + "/" + listName,
		Summary:      &Summary{Operation: OpAppend, Properties: props},
		SchemaID:     &schemaID,
	}
	if err := b.addSnapshot(snap); err != nil { // and makes it main's head
		return nil, fmt.Errorf("add snapshot: %w", err)
	}
	committed := PropCommittedPrefix + node
	if have, _ := strconv.ParseUint(base.Properties()[committed], 10, 64); have < checkpoint {
		b.setProperties(map[string]string{committed: strconv.FormatUint(checkpoint, 10)})
	}
	keep := cfg.KeepSnapshots
	if keep <= 0 {
		keep = streamconf.DefaultKeepSnapshots
	}
	if expired := Expirable(base.Snapshots(), snapID, keep-1); len(expired) > 0 {
		if err := b.removeSnapshots(expired); err != nil {
			return nil, fmt.Errorf("expire snapshots: %w", err)
		}
	}
	b.trimMetadataLog(metadataLogKeep)
	md, err := b.build()
	if err != nil {
		return nil, fmt.Errorf("build table metadata: %w", err)
	}
	return md, nil
}

type addedCounts struct{ records, bytes int64 }

// totals sets the summary's running totals from the parent's.
func totals(props iceberg.Properties, parent *Snapshot, files int, a addedCounts) {
	var pf, pr, ps int64
	if parent != nil && parent.Summary != nil {
		pf, _ = strconv.ParseInt(parent.Summary.Properties["total-data-files"], 10, 64)
		pr, _ = strconv.ParseInt(parent.Summary.Properties["total-records"], 10, 64)
		ps, _ = strconv.ParseInt(parent.Summary.Properties["total-files-size"], 10, 64)
	}
	props["total-data-files"] = strconv.FormatInt(pf+int64(files), 10)
	props["total-records"] = strconv.FormatInt(pr+a.records, 10)
	props["total-files-size"] = strconv.FormatInt(ps+a.bytes, 10)
	props["total-delete-files"] = "0"
	props["total-position-deletes"] = "0"
	props["total-equality-deletes"] = "0"
}

// Expirable picks the snapshots to expire so that at most keep remain
// besides the one being added (current): the oldest first, never the
// newest snapshot of any node (its checkpoint is the node's exactly-once
// mark), nor current.
func Expirable(snaps []Snapshot, current int64, keep int) []int64 {
	if len(snaps) <= keep {
		return nil
	}
	newest := map[string]int64{} // node → snapshot id of its highest checkpoint
	high := map[string]uint64{}
	for i := range snaps {
		if n, c, ok := snapshotOrigin(&snaps[i]); ok && (c >= high[n] || newest[n] == 0) {
			newest[n], high[n] = snaps[i].SnapshotID, c
		}
	}
	protected := map[int64]bool{current: true}
	for _, id := range newest {
		protected[id] = true
	}
	order := make([]Snapshot, len(snaps))
	copy(order, snaps)
	sort.SliceStable(order, func(i, j int) bool { return order[i].SequenceNumber < order[j].SequenceNumber })
	var out []int64
	remaining := len(snaps)
	for _, s := range order {
		if remaining <= keep {
			break
		}
		if protected[s.SnapshotID] {
			continue
		}
		out = append(out, s.SnapshotID)
		remaining--
	}
	return out
}

// sameIDs checks that the library kept our field ids (the Parquet files
// carry them).
func sameIDs(have, want *iceberg.Schema) error {
	hf, wf := have.Fields(), want.Fields()
	if len(hf) != len(wf) {
		return fmt.Errorf("%w: table schema has %d fields, want %d", ErrIncompatible, len(hf), len(wf))
	}
	for i := range hf {
		if hf[i].ID != wf[i].ID || hf[i].Name != wf[i].Name {
			return fmt.Errorf("%w: table field %q has id %d, the files say %d", ErrIncompatible, hf[i].Name, hf[i].ID, wf[i].ID)
		}
	}
	return nil
}

// evolve makes the builder's current schema take want's fields: the same,
// or want adds optional fields at the end (a new schema id). A table
// schema with more fields than want (a node with a newer configuration
// wrote it) is kept. Anything else is ErrIncompatible.
func evolve(b *builder, have, want *iceberg.Schema) (*iceberg.Schema, error) {
	if _, err := fits(have, want); err != nil {
		return nil, err
	}
	hf, wf := have.Fields(), want.Fields()
	if len(wf) <= len(hf) {
		return have, nil
	}
	next, err := b.addSchema(iceberg.NewSchema(have.ID+1, wf...))
	if err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	return next, nil
}

// fits is evolve's rule: nil when a table of schema have can take files
// of schema want, else ErrIncompatible and the index of want's field at
// fault.
func fits(have, want *iceberg.Schema) (int, error) {
	hf, wf := have.Fields(), want.Fields()
	n := min(len(hf), len(wf))
	for i := 0; i < n; i++ {
		if hf[i].ID != wf[i].ID || hf[i].Name != wf[i].Name || !hf[i].Type.Equals(wf[i].Type) || hf[i].Required != wf[i].Required {
			return i, fmt.Errorf("%w: column %d is %s %s in the table, %s %s in the stream's schema", ErrIncompatible, i+1, hf[i].Name, hf[i].Type, wf[i].Name, wf[i].Type)
		}
	}
	for i := n; i < len(wf); i++ {
		if wf[i].Required {
			return i, fmt.Errorf("%w: new column %s is required", ErrIncompatible, wf[i].Name)
		}
	}
	return 0, nil
}

// Check tells whether the table the destination holds for stream, if
// any, can take the files of stream configured as cfg (a table stream's
// validated configuration): a *streamconf.FieldError naming the field
// when its schema or partition spec can't (I13: refused when configured,
// not found at commit, where it would hold the node's checkpoints), or
// its metadata doesn't parse. Another error is the destination's.
func (t *Iceberg) Check(ctx context.Context, stream string, cfg streamconf.Config) error {
	cur, err := Load(ctx, t.Dest, stream)
	if errors.Is(err, ErrCorrupt) {
		return &streamconf.FieldError{Field: "table", Message: fmt.Sprintf("the destination's table of the stream can't be read: %v", err)}
	}
	if err != nil || cur.Metadata == nil {
		return err
	}
	tt, err := cfg.TableTemplate()
	if err != nil {
		return &streamconf.FieldError{Field: "partition", Message: err.Error()}
	}
	want, err := IcebergSchema(cfg.Schema, 0)
	if err != nil {
		return &streamconf.FieldError{Field: "schema", Message: err.Error()}
	}
	if i, err := fits(cur.Metadata.CurrentSchema(), want); err != nil {
		return &streamconf.FieldError{Field: fmt.Sprintf("schema.fields[%d]", i),
			Message: fmt.Sprintf("the destination's table of the stream (%s) can't take it: %v", layout.TableMetadataName(stream, cur.Version), err)}
	}
	spec, err := PartitionSpec(tt, cfg.Schema)
	if err != nil {
		return &streamconf.FieldError{Field: "partition", Message: err.Error()}
	}
	if have := cur.Metadata.PartitionSpec(); !have.CompatibleWith(&spec) {
		return &streamconf.FieldError{Field: "partition",
			Message: fmt.Sprintf("the destination's table of the stream (%s) is partitioned %v, the template makes %v", layout.TableMetadataName(stream, cur.Version), have, spec)}
	}
	return nil
}

// writeManifest writes the manifest of one checkpoint's files of stream.
// Its name and bytes depend on (stream, node, checkpoint) and the files
// only, so a retry finds its earlier write and takes it.
func (t *Iceberg) writeManifest(ctx context.Context, stream, node string, checkpoint uint64, snapID int64, files []committer.File,
	spec iceberg.PartitionSpec, schema *iceberg.Schema, tt *layout.TableTemplate, ss *streamconf.Schema) (iceberg.ManifestFile, addedCounts, error) {
	var buf bytes.Buffer
	w, err := iceberg.NewManifestWriter(2, &buf, spec, schema, snapID)
	if err != nil {
		return nil, addedCounts{}, fmt.Errorf("manifest writer: %w", err)
	}
	sorted := append([]committer.File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Final < sorted[j].Final })
	var a addedCounts
	for _, f := range sorted {
		from := f.Final // its partition path: a displaced file has none
		if f.DisplacedFrom != "" {
			from = f.DisplacedFrom
		}
		data, types, err := partitionData(tt, ss, stream, from)
		if err != nil {
			return nil, a, err
		}
		df, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, t.Location+"/"+f.Final, iceberg.ParquetFile,
			data, types, nil, f.Records, f.Bytes)
		if err != nil {
			return nil, a, fmt.Errorf("data file %s: %w", f.Final, err)
		}
		if err := w.Add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snapID, nil, nil, df.Build())); err != nil {
			return nil, a, fmt.Errorf("manifest entry %s: %w", f.Final, err)
		}
		a.records += f.Records
		a.bytes += f.Bytes
	}
	if err := w.Close(); err != nil {
		return nil, a, fmt.Errorf("write manifest: %w", err)
	}
	body, err := uncompressOCF(buf.Bytes())
	if err != nil {
		return nil, a, err
	}
	name := layout.TableManifestName(stream, node, checkpoint)
	if err := t.Dest.Publish(ctx, name, body); err != nil && !errors.Is(err, committer.ErrExists) {
		return nil, a, fmt.Errorf("publish manifest: %w", err)
	} else if err != nil {
		// An earlier try wrote it; if it differs (a schema evolved in
		// between), the entries are the same files: either will do, and
		// its length must be the one in the list.
		have, rerr := readAll(ctx, t.Dest, name)
		if rerr != nil {
			return nil, a, fmt.Errorf("read manifest %s: %w", name, rerr)
		}
		body = have
	}
	mf, err := w.ToManifestFile(t.Location+"/"+name, int64(len(body)))
	if err != nil {
		return nil, a, fmt.Errorf("manifest file: %w", err)
	}
	return mf, a, nil
}

// publishAvro uncompresses an Avro file and publishes it create-only.
func (t *Iceberg) publishAvro(ctx context.Context, name string, ocf []byte) error {
	body, err := uncompressOCF(ocf)
	if err != nil {
		return err
	}
	if err := t.Dest.Publish(ctx, name, body); err != nil {
		return fmt.Errorf("publish %s: %w", path.Base(name), err)
	}
	return nil
}

// readList reads a manifest list named by its absolute location.
func (t *Iceberg) readList(ctx context.Context, loc string) ([]iceberg.ManifestFile, error) {
	name, err := t.rel(loc)
	if err != nil {
		return nil, err
	}
	b, err := readAll(ctx, t.Dest, name)
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	l, err := iceberg.ReadManifestList(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest list %s: %w", ErrCorrupt, name, err)
	}
	return l, nil
}

// rel turns an absolute location in this destination into a name.
func (t *Iceberg) rel(loc string) (string, error) {
	name, ok := strings.CutPrefix(loc, t.Location+"/")
	if !ok {
		return "", fmt.Errorf("%w: location %s is outside the destination %s", ErrIncompatible, loc, t.Location)
	}
	return name, nil
}

// token is a unique part of a name written once per try.
func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DataFiles returns the destination-relative names of the data files in
// md's current snapshot, in manifest order, duplicates kept (a reader
// would read such a file twice: Verify reports it). md is stream's table
// as Load returned it; its locations must lie in the destination r reads.
func DataFiles(ctx context.Context, r committer.Reader, stream string, md *Metadata) ([]string, error) {
	s := md.CurrentSnapshot()
	if s == nil {
		return nil, nil
	}
	base, ok := strings.CutSuffix(md.Location(), "/"+stream)
	if !ok {
		return nil, fmt.Errorf("%w: table location %s does not end in /%s", ErrCorrupt, md.Location(), stream)
	}
	t := &Iceberg{Dest: nil, Location: base}
	rel := func(loc string) (string, error) { return t.rel(loc) }
	name, err := rel(s.ManifestList)
	if err != nil {
		return nil, err
	}
	b, err := readAll(ctx, r, name)
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	list, err := iceberg.ReadManifestList(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest list %s: %w", ErrCorrupt, name, err)
	}
	var out []string
	for _, m := range list {
		mn, err := rel(m.FilePath())
		if err != nil {
			return nil, err
		}
		mb, err := readAll(ctx, r, mn)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		entries, err := iceberg.ReadManifest(m, bytes.NewReader(mb), true)
		if err != nil {
			return nil, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, mn, err)
		}
		for _, e := range entries {
			p, err := rel(e.DataFile().FilePath())
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}
