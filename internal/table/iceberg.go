package table

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
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
	// PassedOver, when set, is told of each metadata file a commit passed
	// over (Load's Skipped), after it is logged.
	PassedOver func(stream string, s Skip)
	// Bound returns the highest checkpoint of the node a table may hold
	// beyond the one being committed (nil or 0: none). Commits of one
	// node are serial, so a live commit finds none; a replay from a state
	// store restored from an older copy may, up to the ids the node
	// reserved (the store's and its lease's). A later checkpoint beyond it
	// is not believed (see Committed).
	Bound func() uint64
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
	Version  int64     // N of metadata/vN.metadata.json believed current; 0: no table yet
	Metadata *Metadata // nil: no table
	// Top is the highest version found (Version, or above it): versions
	// above Version hold documents that are no metadata of this table
	// (Skipped names them, newest first), or are missing. The next commit
	// writes the first version above Version that is not passed over.
	Top     int64
	Skipped []Skip

	claims []claim // what Skipped's documents claim, until check
}

// claim is what a document that does not parse says it is: Iceberg
// metadata (a format version), of which table.
type claim struct {
	json   bool // a JSON object at all
	format bool
	uuid   string
}

func claimOf(b []byte) claim {
	var c struct {
		Format json.RawMessage `json:"format-version"`
		UUID   string          `json:"table-uuid"`
	}
	if json.Unmarshal(b, &c) != nil {
		return claim{}
	}
	return claim{json: true, format: c.Format != nil, uuid: c.UUID}
}

// Skip is a metadata file Load passed over: it does not parse, and it
// does not claim to be a version of the table.
type Skip struct {
	Version int64
	Name    string
	Err     error
}

// next is the version the next commit publishes: the first above
// Version that Load did not pass over. Never past a gap: versions
// between Version and Top were all looked at (passed over, or missing),
// and a chain without gaps is one a probe from v1 finds whole (a reader,
// or a commit, whose hint is lost).
func (l Loaded) next() int64 {
	v := l.Version + 1
	for l.skipped(v) {
		v++
	}
	return v
}

// skipped reports whether Load passed over version v.
func (l Loaded) skipped(v int64) bool {
	for _, s := range l.Skipped {
		if s.Version == v {
			return true
		}
	}
	return false
}

// maxWalk bounds how many versions Load looks below an unparseable one
// before it looks for the end of the chain from v1 instead.
const maxWalk = 1024

// Load reads stream's newest table metadata: from the version hint on,
// the highest vN.metadata.json that exists (the hint may lag: it is
// written after the metadata). No table is Version 0 and no error.
//
// The destination is untrusted (I13): a document at vN that does not
// parse (or parses as another table's: its location is not the
// stream's), and does not claim to be a version of this table (no JSON
// object, or another table-uuid than the newest version that parses), is
// passed over, reported in Skipped: the table is the newest version below
// it that parses, and the next commit writes the first version above
// that one it did not pass over (Loaded.next). One that claims to
// be this table's (its table-uuid) but does not parse is ErrCorrupt
// naming the file: it may hold another writer's snapshots, which a
// commit past it would drop.
func Load(ctx context.Context, r committer.Reader, stream string) (Loaded, error) {
	v, err := readHint(ctx, r, stream)
	if err != nil {
		return Loaded{}, err
	}
	if v > 0 {
		// A hint naming a version the table lacks (another writer's, a
		// bad restore) is only a hint: probe from the start.
		if ok, err := exists(ctx, r, layout.TableMetadataName(stream, v)); err != nil {
			return Loaded{}, err
		} else if !ok {
			v = 0
		}
	}
	for v < layout.MaxTableVersion {
		ok, err := exists(ctx, r, layout.TableMetadataName(stream, v+1))
		if err != nil {
			return Loaded{}, err
		}
		if !ok {
			break
		}
		v++
	}
	if v == 0 {
		return Loaded{}, nil
	}
	l := Loaded{Top: v}
	from, err := l.walk(ctx, r, stream, v, maxWalk)
	if err != nil || l.Metadata != nil || from == 0 {
		return l, l.check(err)
	}
	// maxWalk versions below a document that does not parse, none does:
	// the chain ends far below (a planted hint and version). Find its
	// end from v1: it has no gaps (each version is published create-only
	// after the one before).
	end, err := chainEnd(ctx, r, stream, from+1)
	if err != nil {
		return Loaded{}, err
	}
	if end > 0 {
		if _, err := l.walk(ctx, r, stream, end, maxWalk); err != nil {
			return Loaded{}, err
		}
	}
	if l.Metadata == nil {
		return Loaded{}, fmt.Errorf("%w: %s does not parse, and no version below it within %d of it or at the end of the chain from v1 does",
			ErrCorrupt, layout.TableMetadataName(stream, l.Top), maxWalk)
	}
	return l, l.check(nil)
}

// walk looks from version v down, at most n versions, for the newest
// that parses, noting the others that exist in l.Skipped. It returns the
// version it stopped above (0: it reached the bottom, or found one).
func (l *Loaded) walk(ctx context.Context, r committer.Reader, stream string, v int64, n int) (int64, error) {
	for ; v > 0 && n > 0; v, n = v-1, n-1 {
		name := layout.TableMetadataName(stream, v)
		b, err := readAll(ctx, r, name)
		if errors.Is(err, committer.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		md, err := parseMetadata(b)
		if err == nil && !strings.HasSuffix(strings.TrimSuffix(md.Location(), "/"), "/"+stream) {
			// Another table's (a copy of another stream's version):
			// building on it would put that table's files in this one.
			err = fmt.Errorf("its location %s is not stream %s's table", md.Location(), stream)
		}
		if err != nil {
			l.Skipped = append(l.Skipped, Skip{Version: v, Name: name, Err: err})
			l.claims = append(l.claims, claimOf(b))
			continue
		}
		l.Version, l.Metadata = v, md
		return 0, nil
	}
	return v, nil
}

// check refuses what Load passed over when it claims to be this table's
// (or, with no version that parses, any table's): ErrCorrupt naming it.
func (l *Loaded) check(err error) error {
	if err != nil {
		return err
	}
	for i, c := range l.claims {
		if !c.json {
			continue // no JSON object: no table's metadata
		}
		s := l.Skipped[i]
		if l.Metadata == nil && (c.format || c.uuid != "") {
			return fmt.Errorf("%w: %s: %w (it claims to be Iceberg table metadata, and no version below it parses)", ErrCorrupt, s.Name, s.Err)
		}
		if l.Metadata != nil && strings.EqualFold(c.uuid, l.Metadata.uuid) {
			return fmt.Errorf("%w: %s: %w (it names this table's uuid %s)", ErrCorrupt, s.Name, s.Err, c.uuid)
		}
	}
	l.claims = nil
	return nil
}

// chainEnd returns the highest version below limit that exists and whose
// next does not (0: none), by galloping from v1 and bisecting: the
// versions a chain of commits wrote are v1, v2, … without a gap.
func chainEnd(ctx context.Context, r committer.Reader, stream string, limit int64) (int64, error) {
	has := func(v int64) (bool, error) { return exists(ctx, r, layout.TableMetadataName(stream, v)) }
	lo, hi := int64(0), int64(1)
	for hi < limit {
		ok, err := has(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	hi = min(hi, limit)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := has(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// exists reports whether name exists, without reading it.
func exists(ctx context.Context, r committer.Reader, name string) (bool, error) {
	rc, _, err := r.Open(ctx, name)
	if errors.Is(err, committer.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_ = rc.Close() // opened for its existence only
	return true, nil
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
	if err != nil || v < 0 || v > layout.MaxTableVersion {
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

// Committed reports whether md holds node's checkpoint: a snapshot whose
// summary names node with checkpoint, or with a later checkpoint up to
// bound (a replay from a state store restored from an older copy finds
// its checkpoint's snapshot expired behind later ones). The proof is a
// snapshot: the table property eosink.committed.<node> alone is not
// believed, and neither is a later checkpoint beyond bound (no commit of
// this node made it: planted, I13). bound 0: only checkpoint's own
// snapshot.
func Committed(md *Metadata, node string, checkpoint, bound uint64) bool {
	for _, s := range md.Snapshots() {
		if n, c, ok := snapshotOrigin(&s); ok && n == node && (c == checkpoint || c > checkpoint && c <= bound) {
			return true
		}
	}
	return false
}

// beyond returns what md claims of node past checkpoint and bound (a
// snapshot's checkpoint, the eosink.committed property) that Committed
// did not believe, for the log; "" when nothing.
func beyond(md *Metadata, node string, checkpoint, bound uint64) string {
	top := max(checkpoint, bound)
	var out []string
	if v, ok := md.Properties()[PropCommittedPrefix+node]; ok {
		if n, err := strconv.ParseUint(v, 10, 64); err != nil || n > top {
			out = append(out, fmt.Sprintf("property %s%s=%q", PropCommittedPrefix, node, v))
		}
	}
	for _, s := range md.Snapshots() {
		if n, c, ok := snapshotOrigin(&s); ok && n == node && c > top {
			out = append(out, fmt.Sprintf("snapshot %d names checkpoint %d", s.SnapshotID, c))
		}
	}
	return strings.Join(out, ", ")
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

// freeSnapshotID is SnapshotID unless base holds a snapshot with that id
// already (planted: the ids derive from public names, I13); then the
// first free one of a sequence derived from it, so a retry against the
// same table picks the same id. Committed goes by the summary, not the id.
func freeSnapshotID(base *Metadata, stream, node string, checkpoint uint64) int64 {
	id := SnapshotID(stream, node, checkpoint)
	for k := 1; base.snapshot(id) != nil; k++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%d", stream, node, checkpoint, k)))
		if id = int64(binary.BigEndian.Uint64(h[:8]) >> 1); id == 0 {
			id = 1
		}
	}
	return id
}

// snapshotTime is now, or the table's newest time if that is ahead (a
// writer's clock ahead of ours, or a time planted far in the future: I13):
// a snapshot older than the table's last update is invalid, and a commit
// that waits for the clock could wait for ever.
func snapshotTime(base *Metadata, now time.Time) int64 {
	ts := max(now.UnixMilli(), base.lastUpdatedMs)
	if n := len(base.snapshotLog); n > 0 {
		ts = max(ts, base.snapshotLog[n-1].TimestampMs)
	}
	return ts
}

// bound is the highest later checkpoint of the node Committed believes:
// the larger of Bound and the one ctx carries (WithBound).
func (t *Iceberg) bound(ctx context.Context) uint64 {
	b, _ := ctx.Value(boundKey{}).(uint64)
	if t.Bound != nil {
		b = max(b, t.Bound())
	}
	return b
}

type boundKey struct{}

// WithBound returns ctx carrying bound, the highest checkpoint of the
// node a table may hold beyond the one being committed for commits made
// with it (as Iceberg.Bound, for one caller): the server's landing of a
// parked stream's table commits, whose table takes the stream's later
// checkpoints only after them, so a later one of the node in the table
// shows the parked one landed (its own snapshot may have expired behind
// it: a state store restored from an older copy holds rows landed since).
func WithBound(ctx context.Context, bound uint64) context.Context {
	return context.WithValue(ctx, boundKey{}, bound)
}

func (t *Iceberg) log() *slog.Logger {
	if t.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.Log
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
		for _, s := range cur.Skipped {
			t.log().Warn("table metadata that does not parse and names no version of the table: passed over, the commit writes around it",
				"stream", stream, "path", s.Name, "err", s.Err, "table_version", cur.Version)
			if t.PassedOver != nil {
				t.PassedOver(stream, s)
			}
		}
		bound := t.bound(ctx)
		if cur.Version > 0 {
			if b := beyond(cur.Metadata, node, checkpoint, bound); b != "" {
				t.log().Warn("table metadata claims checkpoints of this node it never committed: not believed",
					"stream", stream, "checkpoint", checkpoint, "bound", bound, "claims", b, "path", layout.TableMetadataName(stream, cur.Version))
			}
			if Committed(cur.Metadata, node, checkpoint, bound) {
				return t.writeHint(ctx, stream, cur.Version, cur)
			}
		}
		next, err := t.safeBuild(ctx, stream, node, checkpoint, files, cfg, tt, cur)
		if err != nil {
			return err
		}
		body, err := next.MarshalJSON() // not json.Marshal: it would compact other writers' fields
		if err != nil {
			return fmt.Errorf("encode table metadata: %w", err)
		}
		v := cur.next()
		err = t.Dest.Publish(ctx, layout.TableMetadataName(stream, v), body)
		if errors.Is(err, committer.ErrExists) && try < races {
			continue // another node (or a lost answer of ours) took vN+1: reload
		}
		if err != nil {
			return fmt.Errorf("publish table metadata v%d: %w", v, err)
		}
		return t.writeHint(ctx, stream, v, cur)
	}
}

// exists reports whether the table's version v exists (an error other
// than not found counts as existing: the hint is left).
func (t *Iceberg) exists(ctx context.Context, stream string, v int64) bool {
	ok, err := exists(ctx, t.Dest, layout.TableMetadataName(stream, v))
	return ok || err != nil
}

// writeHint raises the version hint to v, never lowers it, unless it
// names a version the table lacks or one cur passed over.
func (t *Iceberg) writeHint(ctx context.Context, stream string, v int64, cur Loaded) error {
	name := layout.TableHintName(stream)
	for try := 0; try < 100; try++ {
		data, ver, err := t.Dest.ReadLease(ctx, name)
		switch {
		case errors.Is(err, committer.ErrNotFound):
			ver = ""
		case err != nil:
			return fmt.Errorf("version hint: %w", err)
		default:
			if have, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); perr == nil && have >= v && !cur.skipped(have) && t.exists(ctx, stream, have) {
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

// baseName names the metadata a commit builds on, for errors.
func baseName(stream string, cur Loaded) string {
	if cur.Version == 0 {
		return "a new table"
	}
	return layout.TableMetadataName(stream, cur.Version)
}

// safeBuild is build, with a panic (a library's, on metadata or Avro
// from the destination: untrusted, I13) turned into ErrCorrupt naming
// the version built on, never the end of the process.
func (t *Iceberg) safeBuild(ctx context.Context, stream, node string, checkpoint uint64, files []committer.File,
	cfg streamconf.Config, tt *layout.TableTemplate, cur Loaded) (md *Metadata, err error) {
	defer func() {
		if p := recover(); p != nil {
			md, err = nil, fmt.Errorf("%w: building on %s panicked: %v", ErrCorrupt, baseName(stream, cur), p)
		}
	}()
	return t.build(ctx, stream, node, checkpoint, files, cfg, tt, cur)
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
	snapID := freeSnapshotID(base, stream, node, checkpoint)
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
			return nil, fmt.Errorf("%s: %w", baseName(stream, cur), err)
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
		TimestampMs:  snapshotTime(base, t.now()),
		ManifestList: t.Location + "/" + listName,
		Summary:      &Summary{Operation: OpAppend, Properties: props},
		SchemaID:     &schemaID,
	}
	// The builder's refusals below are deterministic given base: a retry
	// builds the same, so the failure policy must not retry them for ever
	// unseen (ErrCorrupt: a permanent, visible stuck commit).
	if err := b.addSnapshot(snap); err != nil { // and makes it main's head
		return nil, fmt.Errorf("%w: %s: add snapshot: %w", ErrCorrupt, baseName(stream, cur), err)
	}
	// The property is raised, never lowered, unless it names more than
	// this node could have committed (planted: Committed never believed
	// it).
	committed := PropCommittedPrefix + node
	if have, err := strconv.ParseUint(base.Properties()[committed], 10, 64); err != nil || have < checkpoint || have > max(checkpoint, t.bound(ctx)) {
		b.setProperties(map[string]string{committed: strconv.FormatUint(checkpoint, 10)})
	}
	keep := cfg.KeepSnapshots
	if keep <= 0 {
		keep = streamconf.DefaultKeepSnapshots
	}
	if expired := Expirable(base.Snapshots(), snapID, keep-1); len(expired) > 0 {
		if err := b.removeSnapshots(expired); err != nil {
			return nil, fmt.Errorf("%w: %s: expire snapshots: %w", ErrCorrupt, baseName(stream, cur), err)
		}
	}
	b.trimMetadataLog(metadataLogKeep)
	md, err := b.build()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: build table metadata: %w", ErrCorrupt, baseName(stream, cur), err)
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
// mark), nor current. A node's newest is both its snapshot of the
// highest checkpoint and its last appended (highest sequence number): a
// snapshot planted with a checkpoint far ahead must not leave the node's
// real newest unprotected (Committed does not believe the planted one).
func Expirable(snaps []Snapshot, current int64, keep int) []int64 {
	if len(snaps) <= keep {
		return nil
	}
	type mark struct {
		id  int64
		val int64
	}
	byCkpt, bySeq := map[string]mark{}, map[string]mark{}
	for i := range snaps {
		n, c, ok := snapshotOrigin(&snaps[i])
		if !ok {
			continue
		}
		if m, seen := byCkpt[n]; !seen || uint64(m.val) <= c {
			byCkpt[n] = mark{snaps[i].SnapshotID, int64(c)}
		}
		if m, seen := bySeq[n]; !seen || m.val <= snaps[i].SequenceNumber {
			bySeq[n] = mark{snaps[i].SnapshotID, snaps[i].SequenceNumber}
		}
	}
	protected := map[int64]bool{current: true}
	for _, m := range byCkpt {
		protected[m.id] = true
	}
	for _, m := range bySeq {
		protected[m.id] = true
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
	// The name is fixed per (node, checkpoint), so a retry finds its
	// earlier write. What is found there is ours only if it lists exactly
	// these files as added by this snapshot (an earlier try's: if the
	// schema evolved in between, the entries are the same files, either
	// will do, and its length must be the one in the list). Anything else
	// was planted (I13): taking it would put other files in the table, or
	// none: the next name is tried.
	for n := 0; ; n++ {
		if n == maxManifestNames {
			return nil, a, fmt.Errorf("%w: %s and the next %d names hold other content than checkpoint %d's manifest",
				ErrCorrupt, layout.TableManifestName(stream, node, checkpoint), n-1, checkpoint)
		}
		name := layout.TableManifestNameN(stream, node, checkpoint, n)
		err := t.Dest.Publish(ctx, name, body)
		if err != nil && !errors.Is(err, committer.ErrExists) {
			return nil, a, fmt.Errorf("publish manifest: %w", err)
		}
		if err == nil {
			mf, err := w.ToManifestFile(t.Location+"/"+name, int64(len(body)))
			if err != nil {
				return nil, a, fmt.Errorf("manifest file: %w", err)
			}
			return mf, a, nil
		}
		have, err := readAll(ctx, t.Dest, name)
		if err != nil {
			return nil, a, fmt.Errorf("read manifest %s: %w", name, err)
		}
		mf, err := w.ToManifestFile(t.Location+"/"+name, int64(len(have)))
		if err != nil {
			return nil, a, fmt.Errorf("manifest file: %w", err)
		}
		if t.lists(mf, have, sorted, snapID) {
			return mf, a, nil
		}
		t.log().Warn("table manifest name holds other content than the checkpoint's: writing the next name",
			"stream", stream, "checkpoint", checkpoint, "path", name)
	}
}

// maxManifestNames bounds the names a checkpoint's manifest tries.
const maxManifestNames = 16

// lists reports whether the manifest body (as mf) lists exactly files,
// with their record counts, each added by snapshot snapID.
func (t *Iceberg) lists(mf iceberg.ManifestFile, body []byte, files []committer.File, snapID int64) bool {
	entries, err := readManifest(mf, body)
	if err != nil || len(entries) != len(files) {
		return false
	}
	want := make(map[string]int64, len(files))
	for _, f := range files {
		want[t.Location+"/"+f.Final] = f.Records
	}
	for _, e := range entries {
		df := e.DataFile()
		recs, ok := want[df.FilePath()]
		if !ok || recs != df.Count() || e.SnapshotID() != snapID || e.Status() != iceberg.EntryStatusADDED {
			return false
		}
		delete(want, df.FilePath())
	}
	return len(want) == 0
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
	if errors.Is(err, committer.ErrNotFound) {
		// The current snapshot's files can't be carried forward: a retry
		// finds the same (a damaged or planted version; I14: permanent).
		return nil, fmt.Errorf("%w: the current snapshot's manifest list %s is missing: %w", ErrCorrupt, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	l, err := readManifestList(b)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest list %s: %w", ErrCorrupt, name, err)
	}
	return l, nil
}

// readManifestList and readManifest read Avro files from the destination:
// untrusted (I13). iceberg-go's readers panic on some damage (a manifest
// whose Avro schema renames the partition field: a nil dereference), so
// a panic is an error here, never the end of the process.
func readManifestList(b []byte) (l []iceberg.ManifestFile, err error) {
	defer func() {
		if p := recover(); p != nil {
			l, err = nil, fmt.Errorf("manifest list decoding panicked: %v", p)
		}
	}()
	return iceberg.ReadManifestList(bytes.NewReader(b))
}

func readManifest(m iceberg.ManifestFile, b []byte) (e []iceberg.ManifestEntry, err error) {
	defer func() {
		if p := recover(); p != nil {
			e, err = nil, fmt.Errorf("manifest decoding panicked: %v", p)
		}
	}()
	return iceberg.ReadManifest(m, bytes.NewReader(b), true)
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

// DataFile is one data file entry of a table's current snapshot.
type DataFile struct {
	Path       string // relative to the destination
	SnapshotID int64  // the snapshot that added it
}

// DataFiles returns the data files of md's current snapshot, in manifest
// order, duplicates kept (a reader would read such a file twice: Verify
// reports it). md is stream's table as Load returned it; its locations
// must lie in the destination r reads.
func DataFiles(ctx context.Context, r committer.Reader, stream string, md *Metadata) ([]DataFile, error) {
	s := md.CurrentSnapshot()
	if s == nil {
		return nil, nil
	}
	base, ok := strings.CutSuffix(md.Location(), "/"+stream)
	if !ok {
		return nil, fmt.Errorf("%w: table location %s does not end in /%s", ErrCorrupt, md.Location(), stream)
	}
	t := &Iceberg{Dest: nil, Location: base}
	name, err := t.rel(s.ManifestList)
	if err != nil {
		return nil, err
	}
	b, err := readAll(ctx, r, name)
	if err != nil {
		return nil, fmt.Errorf("read manifest list: %w", err)
	}
	list, err := readManifestList(b)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest list %s: %w", ErrCorrupt, name, err)
	}
	var out []DataFile
	for _, m := range list {
		mn, err := t.rel(m.FilePath())
		if err != nil {
			return nil, err
		}
		mb, err := readAll(ctx, r, mn)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		entries, err := readManifest(m, mb)
		if err != nil {
			return nil, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, mn, err)
		}
		for _, e := range entries {
			p, err := t.rel(e.DataFile().FilePath())
			if err != nil {
				return nil, err
			}
			out = append(out, DataFile{Path: p, SnapshotID: e.SnapshotID()})
		}
	}
	return out, nil
}
