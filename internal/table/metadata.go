package table

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// This file is eosink's own model of Iceberg v2 table metadata
// (https://iceberg.apache.org/spec/#table-metadata-fields). It replaces
// iceberg-go's table package, whose import alone (substrait, arrow
// compute, grpc, otel) cost every eosink process ~180 ms and ~30 MB at
// start. The rules it follows are iceberg-go v0.7.0's MetadataBuilder's
// for what eosink does (one appended snapshot, main branch, properties,
// expiry, schema evolution by added columns), so its output is the same.
//
// Everything the model does not change is kept as the raw JSON it was
// read as: other writers may share a table, and their statistics, sort
// orders, tags, branches, snapshot fields and schema details survive our
// commits byte for byte.

// Summary operations and refs eosink writes.
const (
	OpAppend   = "append"
	MainBranch = "main"
)

// PropMetadataPreviousVersionsMax bounds the metadata log (the spec's
// table property; default 100).
const PropMetadataPreviousVersionsMax = "write.metadata.previous-versions-max"

const oneMinuteMs = 60_000

// Summary is a snapshot's summary: its operation and its other keys.
type Summary struct {
	Operation  string
	Properties map[string]string
}

// MarshalJSON writes the summary as one object, operation included.
func (s Summary) MarshalJSON() ([]byte, error) {
	m := make(map[string]string, len(s.Properties)+1)
	maps.Copy(m, s.Properties)
	m["operation"] = s.Operation
	return json.Marshal(m)
}

// UnmarshalJSON reads a summary as iceberg-go does: a summary without an
// operation is an overwrite (Java's compatibility rule), an empty one is
// an error.
func (s *Summary) UnmarshalJSON(b []byte) error {
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	op, ok := m["operation"]
	switch {
	case !ok && len(m) > 0:
		s.Operation = "overwrite"
	case !ok:
		s.Operation = ""
	case op == "":
		return errors.New("snapshot summary has an empty operation")
	default:
		s.Operation = op
		delete(m, "operation")
	}
	s.Properties = m
	return nil
}

// Snapshot is one snapshot of a table. A snapshot read from a metadata
// file is written back as the bytes it was read as.
type Snapshot struct {
	SnapshotID       int64    `json:"snapshot-id"`
	ParentSnapshotID *int64   `json:"parent-snapshot-id,omitempty"`
	SequenceNumber   int64    `json:"sequence-number"`
	TimestampMs      int64    `json:"timestamp-ms"`
	ManifestList     string   `json:"manifest-list,omitempty"`
	Summary          *Summary `json:"summary,omitempty"`
	SchemaID         *int     `json:"schema-id,omitempty"`

	raw json.RawMessage
}

type snapshotFields Snapshot // without the methods

// MarshalJSON writes a read snapshot's bytes, or the modelled fields.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	if s.raw != nil {
		return s.raw, nil
	}
	return json.Marshal(snapshotFields(s))
}

// UnmarshalJSON reads the modelled fields and keeps the bytes.
func (s *Snapshot) UnmarshalJSON(b []byte) error {
	var f snapshotFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	var req struct {
		ID  *int64 `json:"snapshot-id"`
		TS  *int64 `json:"timestamp-ms"`
		Seq *int64 `json:"sequence-number"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return err
	}
	if req.ID == nil || req.TS == nil {
		return errors.New("snapshot without snapshot-id or timestamp-ms")
	}
	*s = Snapshot(f)
	s.raw = bytes.Clone(b)
	return nil
}

type snapshotLogEntry struct {
	SnapshotID  int64 `json:"snapshot-id"`
	TimestampMs int64 `json:"timestamp-ms"`
}

type metadataLogEntry struct {
	MetadataFile string `json:"metadata-file"`
	TimestampMs  int64  `json:"timestamp-ms"`
}

type snapshotRef struct {
	SnapshotID *int64 `json:"snapshot-id"`
	Type       string `json:"type"`
}

// Metadata is a table's metadata (format version 2). The zero value is
// no table; use ParseMetadata or the commit path to make one.
type Metadata struct {
	raw map[string]json.RawMessage // every field as read; modelled ones are rewritten

	uuid            string
	location        string
	lastUpdatedMs   int64
	lastColumnID    int
	schemas         []*iceberg.Schema
	schemasRaw      []json.RawMessage
	currentSchemaID int
	specs           []iceberg.PartitionSpec
	defaultSpecID   int
	props           map[string]string
	lastSeq         int64
	snapshots       []Snapshot
	current         *int64
	refs            map[string]json.RawMessage
	snapshotLog     []snapshotLogEntry
	metadataLog     []metadataLogEntry
}

// Location is the table's base location.
func (m *Metadata) Location() string { return m.location }

// Properties are the table's properties (do not modify).
func (m *Metadata) Properties() map[string]string { return m.props }

// Snapshots are the table's snapshots, in the file's order (do not modify).
func (m *Metadata) Snapshots() []Snapshot { return m.snapshots }

// LastSequenceNumber is the table's highest sequence number.
func (m *Metadata) LastSequenceNumber() int64 { return m.lastSeq }

// LastUpdatedMillis is the metadata's last-updated-ms.
func (m *Metadata) LastUpdatedMillis() int64 { return m.lastUpdatedMs }

// CurrentSnapshot is the main branch's snapshot, nil when none.
func (m *Metadata) CurrentSnapshot() *Snapshot {
	if m.current == nil {
		return nil
	}
	return m.snapshot(*m.current)
}

func (m *Metadata) snapshot(id int64) *Snapshot {
	for i := range m.snapshots {
		if m.snapshots[i].SnapshotID == id {
			return &m.snapshots[i]
		}
	}
	return nil
}

// CurrentSchema is the table's current schema.
func (m *Metadata) CurrentSchema() *iceberg.Schema {
	for _, s := range m.schemas {
		if s.ID == m.currentSchemaID {
			return s
		}
	}
	return nil
}

// PartitionSpec is the table's default partition spec.
func (m *Metadata) PartitionSpec() iceberg.PartitionSpec {
	for _, s := range m.specs {
		if s.ID() == m.defaultSpecID {
			return s
		}
	}
	return *iceberg.UnpartitionedSpec
}

// ParseMetadata reads and validates table metadata. The bytes come from
// the destination (I13): nonsense is an error, never a panic.
func ParseMetadata(b []byte) (md *Metadata, err error) {
	defer func() {
		if p := recover(); p != nil {
			md, err = nil, fmt.Errorf("table metadata decoding panicked: %v", p)
		}
	}()
	m := &Metadata{}
	if err := json.Unmarshal(b, &m.raw); err != nil {
		return nil, err
	}
	if m.raw == nil {
		return nil, errors.New("table metadata is not a JSON object")
	}
	var version int
	if err := m.field("format-version", &version, true); err != nil {
		return nil, err
	}
	if version != 2 {
		return nil, fmt.Errorf("format-version %d: eosink reads and writes format version 2", version)
	}
	for _, k := range []string{"next-row-id", "encryption-keys"} {
		if _, ok := m.raw[k]; ok {
			return nil, fmt.Errorf("%s is a format version 3 field", k)
		}
	}
	var lastPartitionID, defaultSortOrderID int
	var sortOrders []struct {
		OrderID *int `json:"order-id"`
	}
	var current int64 = -1
	for _, f := range []struct {
		key string
		dst any
		req bool
	}{
		{"table-uuid", &m.uuid, true},
		{"location", &m.location, true},
		{"last-updated-ms", &m.lastUpdatedMs, true},
		{"last-column-id", &m.lastColumnID, true},
		{"schemas", &m.schemasRaw, true},
		{"current-schema-id", &m.currentSchemaID, true},
		{"partition-specs", &m.specs, true},
		{"default-spec-id", &m.defaultSpecID, true},
		{"last-partition-id", &lastPartitionID, true},
		{"sort-orders", &sortOrders, true},
		{"default-sort-order-id", &defaultSortOrderID, true},
		{"last-sequence-number", &m.lastSeq, true},
		{"properties", &m.props, false},
		{"snapshots", &m.snapshots, false},
		{"current-snapshot-id", &current, false},
		{"refs", &m.refs, false},
		{"snapshot-log", &m.snapshotLog, false},
		{"metadata-log", &m.metadataLog, false},
	} {
		if err := m.field(f.key, f.dst, f.req); err != nil {
			return nil, err
		}
	}
	if u, err := uuid.Parse(m.uuid); err != nil || u == uuid.Nil {
		return nil, fmt.Errorf("table-uuid %q is not a UUID", m.uuid)
	}
	if m.location == "" {
		return nil, errors.New("location is empty")
	}
	if m.lastColumnID < 0 || m.currentSchemaID < 0 || m.defaultSpecID < 0 || defaultSortOrderID < 0 || m.lastSeq < 0 {
		return nil, errors.New("negative last-column-id, current-schema-id, default-spec-id, default-sort-order-id or last-sequence-number")
	}
	m.schemas = make([]*iceberg.Schema, len(m.schemasRaw))
	for i, r := range m.schemasRaw {
		if err := json.Unmarshal(r, &m.schemas[i]); err != nil {
			return nil, fmt.Errorf("schema %d: %w", i, err)
		}
	}
	if m.props == nil {
		m.props = map[string]string{}
	}
	if current != -1 {
		m.current = &current
	}
	if defaultSortOrderID != 0 && !slices.ContainsFunc(sortOrders, func(o struct {
		OrderID *int `json:"order-id"`
	}) bool {
		return o.OrderID != nil && *o.OrderID == defaultSortOrderID
	}) {
		return nil, fmt.Errorf("default-sort-order-id %d can't be found", defaultSortOrderID)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// field decodes raw[key] into dst; an absent or null required field is an error.
func (m *Metadata) field(key string, dst any, required bool) error {
	r, ok := m.raw[key]
	if !ok || string(r) == "null" {
		if required {
			return fmt.Errorf("%s is missing", key)
		}
		return nil
	}
	if err := json.Unmarshal(r, dst); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// validate checks what iceberg-go's reader checks of v2 metadata.
func (m *Metadata) validate() error {
	seen := map[int]bool{}
	for i, s := range m.schemas {
		if s == nil {
			return fmt.Errorf("schema at index %d is null", i)
		}
		if seen[s.ID] {
			return fmt.Errorf("duplicate schema ID %d", s.ID)
		}
		seen[s.ID] = true
	}
	if !seen[m.currentSchemaID] {
		return fmt.Errorf("current-schema-id %d can't be found in any schema", m.currentSchemaID)
	}
	clear(seen)
	for _, s := range m.specs {
		if seen[s.ID()] {
			return fmt.Errorf("duplicate partition spec ID %d", s.ID())
		}
		seen[s.ID()] = true
	}
	if !seen[m.defaultSpecID] {
		return fmt.Errorf("default-spec-id %d can't be found", m.defaultSpecID)
	}
	ids := map[int64]bool{}
	for _, s := range m.snapshots {
		if ids[s.SnapshotID] {
			return fmt.Errorf("duplicate snapshot ID %d", s.SnapshotID)
		}
		ids[s.SnapshotID] = true
		if s.SequenceNumber > m.lastSeq {
			return fmt.Errorf("snapshot %d has sequence number %d which is greater than last-sequence-number %d", s.SnapshotID, s.SequenceNumber, m.lastSeq)
		}
	}
	if m.current != nil && !ids[*m.current] {
		return fmt.Errorf("current-snapshot-id %d does not exist in snapshot list", *m.current)
	}
	for name, r := range m.refs {
		var ref snapshotRef
		if err := json.Unmarshal(r, &ref); err != nil {
			return fmt.Errorf("snapshot ref %s: %w", name, err)
		}
		if ref.SnapshotID == nil || (ref.Type != "branch" && ref.Type != "tag") {
			return fmt.Errorf("snapshot ref %s has no snapshot-id or type", name)
		}
		if !ids[*ref.SnapshotID] {
			return fmt.Errorf("snapshot ref %s with ID %d does not exist in snapshot list", name, *ref.SnapshotID)
		}
		if name == MainBranch && (m.current == nil || *ref.SnapshotID != *m.current) {
			return fmt.Errorf("main branch snapshot ID %d does not match current snapshot ID", *ref.SnapshotID)
		}
	}
	for i := 1; i < len(m.snapshotLog); i++ {
		if m.snapshotLog[i].TimestampMs-m.snapshotLog[i-1].TimestampMs < -oneMinuteMs {
			return errors.New("expected sorted snapshot log entries")
		}
	}
	if n := len(m.snapshotLog); n > 0 && m.lastUpdatedMs-m.snapshotLog[n-1].TimestampMs < -oneMinuteMs {
		return fmt.Errorf("invalid update timestamp %d: before last snapshot log entry", m.lastUpdatedMs)
	}
	for i := 1; i < len(m.metadataLog); i++ {
		if m.metadataLog[i].TimestampMs-m.metadataLog[i-1].TimestampMs < -oneMinuteMs {
			return errors.New("expected sorted metadata log entries")
		}
	}
	if n := len(m.metadataLog); n > 0 && m.lastUpdatedMs-m.metadataLog[n-1].TimestampMs < -oneMinuteMs {
		return fmt.Errorf("invalid update timestamp %d: before last metadata log entry", m.lastUpdatedMs)
	}
	return nil
}

// MarshalJSON writes the metadata: the fields as read, the modelled ones
// as they are now.
func (m *Metadata) MarshalJSON() ([]byte, error) {
	out := maps.Clone(m.raw)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	set := func(key string, v any, omit bool) error {
		if omit {
			delete(out, key)
			return nil
		}
		var b []byte
		var err error
		switch v := v.(type) {
		case []json.RawMessage:
			b = rawArray(v)
		case map[string]json.RawMessage:
			b = rawObject(v)
		case []Snapshot:
			list := make([]json.RawMessage, len(v))
			for i, s := range v {
				if list[i], err = s.MarshalJSON(); err != nil {
					break
				}
			}
			b = rawArray(list)
		default:
			b, err = json.Marshal(v)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		out[key] = b
		return nil
	}
	for _, f := range []struct {
		key  string
		v    any
		omit bool
	}{
		{"format-version", 2, false},
		{"table-uuid", m.uuid, false},
		{"location", m.location, false},
		{"last-updated-ms", m.lastUpdatedMs, false},
		{"last-column-id", m.lastColumnID, false},
		{"schemas", m.schemasRaw, false},
		{"current-schema-id", m.currentSchemaID, false},
		{"default-spec-id", m.defaultSpecID, false},
		{"last-sequence-number", m.lastSeq, false},
		{"properties", m.props, len(m.props) == 0},
		{"snapshots", m.snapshots, len(m.snapshots) == 0},
		{"current-snapshot-id", m.current, m.current == nil},
		{"refs", m.refs, len(m.refs) == 0},
		{"snapshot-log", m.snapshotLog, len(m.snapshotLog) == 0},
		{"metadata-log", m.metadataLog, len(m.metadataLog) == 0},
	} {
		if err := set(f.key, f.v, f.omit); err != nil {
			return nil, err
		}
	}
	return rawObject(out), nil
}

// rawObject writes an object of raw values, keys sorted, the values'
// bytes as they are: json.Marshal would compact them, and fields of
// other writers are kept byte for byte.
func rawObject(m map[string]json.RawMessage) []byte {
	keys := slices.Sorted(maps.Keys(m))
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(m[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// rawArray writes an array of raw values as they are.
func rawArray(l []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// newMetadata is a new table's metadata, as iceberg-go's NewMetadata makes
// it for eosink's schema (ids 1..n) and spec (field ids from 1000),
// unsorted.
func newMetadata(schema *iceberg.Schema, spec iceberg.PartitionSpec, location string) (*Metadata, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return nil, err
	}
	s := iceberg.NewSchema(0, schema.Fields()...)
	sb, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	specs, err := json.Marshal([]iceberg.PartitionSpec{spec})
	if err != nil {
		return nil, err
	}
	lastPartitionID := partitionFieldStart - 1
	for _, f := range spec.Fields() {
		lastPartitionID = max(lastPartitionID, f.FieldID)
	}
	lp, _ := json.Marshal(lastPartitionID)
	m := &Metadata{
		raw: map[string]json.RawMessage{
			"partition-specs":       specs,
			"last-partition-id":     lp,
			"sort-orders":           json.RawMessage(`[{"order-id":0,"fields":[]}]`),
			"default-sort-order-id": json.RawMessage(`0`),
		},
		uuid:         u.String(),
		location:     location,
		lastColumnID: s.HighestFieldID(),
		schemas:      []*iceberg.Schema{s},
		schemasRaw:   []json.RawMessage{sb},
		specs:        []iceberg.PartitionSpec{spec},
		props:        map[string]string{},
	}
	return m, nil
}

// clone is a copy the builder may change without touching m.
func (m *Metadata) clone() *Metadata {
	c := *m
	c.raw = maps.Clone(m.raw)
	c.schemas = slices.Clone(m.schemas)
	c.schemasRaw = slices.Clone(m.schemasRaw)
	c.props = maps.Clone(m.props)
	if c.props == nil {
		c.props = map[string]string{}
	}
	c.snapshots = slices.Clone(m.snapshots)
	c.refs = maps.Clone(m.refs)
	c.snapshotLog = slices.Clone(m.snapshotLog)
	c.metadataLog = slices.Clone(m.metadataLog)
	return &c
}

// builder makes the next metadata from a base, with iceberg-go's
// MetadataBuilder's rules for the changes eosink makes.
type builder struct {
	base    *Metadata
	m       *Metadata
	prevLoc string // the base's file; "" for a new table
	changed bool
	removed bool
	added   int64 // the snapshot added; 0: none
}

func newBuilder(base *Metadata, prevLoc string) *builder {
	return &builder{base: base, m: base.clone(), prevLoc: prevLoc}
}

// addSchema adds schema (reusing an equal one's id) and makes it current.
func (b *builder) addSchema(schema *iceberg.Schema) (*iceberg.Schema, error) {
	id := schema.ID
	for _, s := range b.m.schemas {
		if schema.Equals(s) {
			id = s.ID
			break
		}
		if s.ID >= id {
			id = s.ID + 1
		}
	}
	b.changed = true
	var cur *iceberg.Schema
	for _, s := range b.m.schemas {
		if s.ID == id {
			cur = s
		}
	}
	if cur == nil {
		cur = iceberg.NewSchema(id, schema.Fields()...)
		raw, err := json.Marshal(cur)
		if err != nil {
			return nil, err
		}
		b.m.lastColumnID = max(b.m.lastColumnID, cur.HighestFieldID())
		b.m.schemas = append(b.m.schemas, cur)
		b.m.schemasRaw = append(b.m.schemasRaw, raw)
	}
	b.m.currentSchemaID = id
	return cur, nil
}

// addSnapshot appends s as the main branch's new head.
func (b *builder) addSnapshot(s Snapshot) error {
	m := b.m
	if m.snapshot(s.SnapshotID) != nil {
		return fmt.Errorf("can't add snapshot with id %d, already exists", s.SnapshotID)
	}
	if s.ParentSnapshotID != nil && s.SequenceNumber <= m.lastSeq {
		return fmt.Errorf("can't add snapshot with sequence number %d, must be > than last sequence number %d", s.SequenceNumber, m.lastSeq)
	}
	if n := len(m.snapshotLog); n > 0 && s.TimestampMs-m.snapshotLog[n-1].TimestampMs < -oneMinuteMs {
		return fmt.Errorf("invalid snapshot timestamp %d: before last snapshot timestamp %d", s.TimestampMs, m.snapshotLog[n-1].TimestampMs)
	}
	if s.TimestampMs-b.base.lastUpdatedMs < -oneMinuteMs {
		return fmt.Errorf("invalid snapshot timestamp %d: before last updated timestamp %d", s.TimestampMs, b.base.lastUpdatedMs)
	}
	s.raw = nil
	m.snapshots = append(m.snapshots, s)
	m.lastSeq = s.SequenceNumber
	m.lastUpdatedMs = s.TimestampMs
	id := s.SnapshotID
	m.current = &id
	if m.refs == nil {
		m.refs = map[string]json.RawMessage{}
	}
	m.refs[MainBranch] = json.RawMessage(fmt.Sprintf(`{"snapshot-id":%d,"type":"branch"}`, id))
	m.snapshotLog = append(m.snapshotLog, snapshotLogEntry{SnapshotID: id, TimestampMs: s.TimestampMs})
	b.changed, b.added = true, id
	return nil
}

// notBefore returns ms, or the table's last update or snapshot when ms is
// before it: Iceberg refuses a snapshot more than a minute older than
// either, and a clock behind them (another node's clock ahead, a clock
// stepped back) would otherwise hold the node's commits until it caught
// up. Snapshot times stay in order for time travel.
func (m *Metadata) notBefore(ms int64) int64 {
	ms = max(ms, m.lastUpdatedMs)
	if n := len(m.snapshotLog); n > 0 {
		ms = max(ms, m.snapshotLog[n-1].TimestampMs)
	}
	return ms
}

// setProperties sets properties.
func (b *builder) setProperties(props map[string]string) {
	if len(props) == 0 {
		return
	}
	maps.Copy(b.m.props, props)
	b.changed = true
}

// removeSnapshots expires ids: the snapshots, the refs naming them, and
// their statistics files.
func (b *builder) removeSnapshots(ids []int64) error {
	m := b.m
	gone := map[int64]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	if m.current != nil && gone[*m.current] {
		return errors.New("current snapshot cannot be removed")
	}
	m.snapshots = slices.DeleteFunc(m.snapshots, func(s Snapshot) bool { return gone[s.SnapshotID] })
	for name, r := range m.refs {
		var ref snapshotRef
		if json.Unmarshal(r, &ref) != nil || ref.SnapshotID == nil || m.snapshot(*ref.SnapshotID) == nil {
			delete(m.refs, name)
		}
	}
	for _, key := range []string{"statistics", "partition-statistics"} {
		r, ok := m.raw[key]
		if !ok {
			continue
		}
		var list []json.RawMessage
		if json.Unmarshal(r, &list) != nil {
			continue
		}
		list = slices.DeleteFunc(list, func(e json.RawMessage) bool {
			var s struct {
				SnapshotID int64 `json:"snapshot-id"`
			}
			return json.Unmarshal(e, &s) == nil && gone[s.SnapshotID]
		})
		if len(list) == 0 {
			delete(m.raw, key)
		} else {
			m.raw[key] = rawArray(list)
		}
	}
	b.changed, b.removed = true, true
	return nil
}

// trimMetadataLog keeps the newest n entries of the metadata log.
func (b *builder) trimMetadataLog(n int) {
	if l := len(b.m.metadataLog); l > n {
		b.m.metadataLog = b.m.metadataLog[l-n:]
	}
}

// build finishes the metadata: the snapshot log without expired
// snapshots, the base's file in the metadata log, validated.
func (b *builder) build() (*Metadata, error) {
	m := b.m
	if b.removed {
		var log []snapshotLogEntry
		for _, e := range m.snapshotLog {
			if m.snapshot(e.SnapshotID) != nil {
				log = append(log, e)
			} else {
				log = log[:0] // history before an expired snapshot goes
			}
		}
		if m.current != nil && len(log) > 0 && log[len(log)-1].SnapshotID != *m.current {
			return nil, errors.New("cannot set invalid snapshot log: latest entry is not the current snapshot")
		}
		m.snapshotLog = log
	}
	if m.lastUpdatedMs == 0 {
		return nil, errors.New("no last-updated-ms")
	}
	if b.prevLoc != "" && b.changed {
		keep := iceberg.Properties(m.props).GetInt(PropMetadataPreviousVersionsMax, 100)
		m.metadataLog = append(m.metadataLog, metadataLogEntry{MetadataFile: b.prevLoc, TimestampMs: b.base.lastUpdatedMs})
		b.trimMetadataLog(max(1, keep))
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}
