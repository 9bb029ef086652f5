package table_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/table"
)

// foreign is what another writer put in a shared table: fields our model
// does not change, in byte forms json.Marshal would not produce (spaces,
// key order), so that a re-encoding would show.
var foreign = map[string]string{
	"x-other-writer":       `{ "z": 1,  "a": [true, null] }`,
	"sort-orders":          `[{"order-id":0,"fields":[]}, {"order-id":3,"fields":[{"transform":"identity","source-id":1,"direction":"asc","null-order":"nulls-first"}]}]`,
	"partition-statistics": `[{"snapshot-id": %d, "statistics-path": "s3://elsewhere/p.parquet", "file-size-in-bytes": 7}]`,
	"statistics":           `[{"snapshot-id": %d, "statistics-path": "s3://elsewhere/s.puffin", "file-size-in-bytes": 9, "file-footer-size-in-bytes": 4, "blob-metadata": []}]`,
}

// TestForeignFieldsKept: a table another writer touched (statistics, a
// tag, an extra sort order, its own top-level key, a snapshot with fields
// of its own) keeps every field eosink does not model byte for byte
// through eosink's commits and expiry, and iceberg-go still reads it.
func TestForeignFieldsKept(t *testing.T) {
	r := newRig(t)
	r.conf.KeepSnapshots = 3
	ice := r.iceberg()
	for c := uint64(1); c <= 2; c++ {
		r.commit(ice, "n1", c, recs(int(c-1)*2, 2))
	}
	// The other writer's v3: its fields, a tag on the current snapshot, a
	// property, and a snapshot field of its own on the current snapshot.
	p2 := filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 2))
	b, err := os.ReadFile(p2)
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatal(err)
	}
	var cur int64
	if err := json.Unmarshal(md["current-snapshot-id"], &cur); err != nil {
		t.Fatal(err)
	}
	for k, v := range foreign {
		if strings.Contains(v, "%d") {
			v = fmt.Sprintf(v, cur)
		}
		md[k] = json.RawMessage(v)
	}
	md["refs"] = json.RawMessage(fmt.Sprintf(`{"main":{"snapshot-id":%d,"type":"branch"},"audit":{"snapshot-id":%d,"type":"tag","max-ref-age-ms":86400000}}`, cur, cur))
	var snaps []json.RawMessage
	if err := json.Unmarshal(md["snapshots"], &snaps); err != nil {
		t.Fatal(err)
	}
	last := string(snaps[len(snaps)-1])
	snaps[len(snaps)-1] = json.RawMessage(strings.Replace(last, `{`, `{"x-snap": {"k" : 1},`, 1))
	md["snapshots"] = json.RawMessage("[" + string(bytes.Join(func() [][]byte {
		var l [][]byte
		for _, s := range snaps {
			l = append(l, s)
		}
		return l
	}(), []byte(", "))) + "]")
	var props map[string]string
	_ = json.Unmarshal(md["properties"], &props)
	props["other.prop"] = "v"
	md["properties"], _ = json.Marshal(props)
	v3 := rawJSON(md)
	if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 3)), v3, 0o644); err != nil {
		t.Fatal(err)
	}
	// eosink commits on top of it.
	r.commit(ice, "n1", 3, recs(4, 2))
	tb, loaded := r.read("orders") // iceberg-go reads it
	wantIDs(t, ids(t, tb.Rows), 6)
	if loaded.Version != 4 {
		t.Fatalf("v%d, want v4", loaded.Version)
	}
	v4, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 4)))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(v4, &got); err != nil {
		t.Fatal(err)
	}
	for k := range foreign {
		if !bytes.Equal(got[k], md[k]) {
			t.Errorf("%s: got %s, want %s", k, got[k], md[k])
		}
	}
	if !bytes.Contains(got["snapshots"], snaps[len(snaps)-1]) {
		t.Errorf("the other writer's snapshot was re-encoded: %s", got["snapshots"])
	}
	if !bytes.Contains(got["refs"], []byte(fmt.Sprintf(`"audit":{"snapshot-id":%d,"type":"tag","max-ref-age-ms":86400000}`, cur))) {
		t.Errorf("the tag was lost: %s", got["refs"])
	}
	if loaded.Metadata.Properties()["other.prop"] != "v" {
		t.Errorf("properties %v", loaded.Metadata.Properties())
	}
	// Expiry of the tagged snapshot drops the tag and its statistics, as
	// iceberg-go's builder does; the other fields stay.
	for c := uint64(4); c <= 6; c++ {
		r.commit(ice, "n1", c, recs(int(c-1)*2, 2))
	}
	tb, loaded = r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 12)
	last6, _ := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", loaded.Version)))
	got = nil
	if err := json.Unmarshal(last6, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"statistics", "partition-statistics"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s of an expired snapshot kept: %s", k, got[k])
		}
	}
	if bytes.Contains(got["refs"], []byte("audit")) {
		t.Errorf("tag of an expired snapshot kept: %s", got["refs"])
	}
	for _, k := range []string{"x-other-writer", "sort-orders"} {
		if !bytes.Equal(got[k], md[k]) {
			t.Errorf("%s: got %s, want %s", k, got[k], md[k])
		}
	}
	// iceberg-go's reader takes every file we wrote.
	for v := int64(1); v <= loaded.Version; v++ {
		b, _ := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", v)))
		if _, err := icetable.ParseMetadataBytes(b); err != nil {
			t.Errorf("iceberg-go rejects v%d: %v", v, err)
		}
	}
}

// TestCorruptMetadata: metadata in the destination that is not valid v2
// table metadata is never a panic (I13), whatever the damage,
// truncations included: ErrCorrupt from Load and the commit when it
// claims to be Iceberg metadata, else passed over (Load's Skipped).
func TestCorruptMetadata(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	ctx := context.Background()
	r.commit(ice, "n1", 1, recs(0, 2))
	good, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 1)))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(k, v string) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(good, &m)
		if v == "" {
			delete(m, k)
		} else {
			m[k] = json.RawMessage(v)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	bad := []string{
		"", "null", "[]", `"x"`, "{", `{"format-version":2}`,
		edit("format-version", "1"), edit("format-version", "3"), edit("format-version", `"2"`),
		edit("table-uuid", ""), edit("table-uuid", `"nope"`), edit("location", `""`), edit("location", ""),
		edit("last-updated-ms", ""), edit("last-column-id", "-1"), edit("last-sequence-number", ""),
		edit("schemas", "[]"), edit("schemas", "[null]"), edit("schemas", `[{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"a","type":"decimal(x","required":true}]}]`),
		edit("schemas", `[{"type":"struct","schema-id":7,"fields":[]}]`),
		edit("current-schema-id", "5"), edit("partition-specs", ""), edit("partition-specs", `[{"spec-id":1,"fields":[]}]`),
		edit("last-partition-id", ""), edit("sort-orders", ""), edit("default-sort-order-id", "4"),
		edit("current-snapshot-id", "12"), edit("refs", `{"main":{"snapshot-id":12,"type":"branch"}}`),
		edit("refs", `{"t":{"type":"tag"}}`), edit("snapshots", `[{"snapshot-id":1}]`), edit("snapshots", `{}`),
		edit("last-sequence-number", "0"), edit("properties", `{"a":1}`), edit("snapshot-log", `[{"snapshot-id":1,"timestamp-ms":9999999999999},{"snapshot-id":2,"timestamp-ms":1}]`),
		edit("next-row-id", "0"),
	}
	for n := 0; n < len(good); n += 7 {
		bad = append(bad, string(good[:n]))
	}
	v1 := filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 1))
	for i, b := range bad {
		// Each case alone: v1 as b, no later version, no hint.
		for _, n := range []string{layout.TableMetadataName("orders", 2), layout.TableHintName("orders")} {
			if err := os.Remove(filepath.Join(r.dest.Dest, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(v1, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		// A document that claims to be Iceberg metadata (a JSON object
		// with a format version or a table uuid) may be another writer's
		// table: ErrCorrupt, never written over. Anything else is no
		// table's metadata: passed over, and the commit writes v2.
		var m map[string]json.RawMessage
		claims := json.Unmarshal([]byte(b), &m) == nil && (m["format-version"] != nil || m["table-uuid"] != nil)
		cur, err := table.Load(ctx, r.dest, "orders")
		switch {
		case claims && !errors.Is(err, table.ErrCorrupt):
			t.Fatalf("case %d (%.80s): Load: %v, want ErrCorrupt", i, b, err)
		case !claims && (err != nil || cur.Version != 0 || cur.Top != 1 || len(cur.Skipped) != 1):
			t.Fatalf("case %d (%.80s): Load: %+v, %v; want no table, v1 passed over", i, b, cur, err)
		}
		if i >= 40 {
			continue
		}
		err = ice.Commit(ctx, "n1", 2, r.files("orders", "n1", 2, recs(2, 1)))
		switch {
		case claims && !errors.Is(err, table.ErrCorrupt):
			t.Fatalf("case %d (%.80s): Commit: %v, want ErrCorrupt", i, b, err)
		case !claims && err != nil:
			t.Fatalf("case %d (%.80s): Commit: %v, want a new table at v2", i, b, err)
		case !claims:
			if cur, err := table.Load(ctx, r.dest, "orders"); err != nil || cur.Version != 2 {
				t.Fatalf("case %d (%.80s): after the commit: v%d, %v; want v2", i, b, cur.Version, err)
			}
		}
	}
	// The good file still loads.
	if err := os.WriteFile(v1, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 2))); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if _, err := table.Load(ctx, r.dest, "orders"); err != nil {
		t.Fatal(err)
	}
}

// rawJSON writes m with its values' bytes as they are (json.Marshal
// would compact them).
func rawJSON(m map[string]json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteString("{")
	first := true
	for k, v := range m {
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%q: %s", k, v)
	}
	b.WriteString("}")
	return b.Bytes()
}
