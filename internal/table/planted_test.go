package table_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/table"
)

// Documents planted in a table's metadata directory by someone else (I13):
// none may stop the node's table commits, nor make a commit believe its
// checkpoint is in the table when it is not.

// plant writes doc as version v of stream's table metadata, and the
// version hint naming it when hint is set.
func (r *rig) plant(stream string, v int64, doc []byte, hint bool) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableMetadataName(stream, v)), doc, 0o644); err != nil {
		r.t.Fatal(err)
	}
	if hint {
		if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableHintName(stream)), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

// edited returns version v of stream's metadata with edit applied to its
// fields.
func (r *rig) edited(stream string, v int64, edit func(m map[string]json.RawMessage)) []byte {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName(stream, v)))
	if err != nil {
		r.t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *rig) hint(stream string) string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableHintName(stream)))
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// ordersRig returns a rig and its Iceberg committer, with node n1's
// checkpoint 1 (records 0 to 2) committed to the orders table.
func ordersRig(t *testing.T) (*rig, *table.Iceberg) {
	t.Helper()
	r := newRig(t)
	ice := r.iceberg()
	r.commit(ice, "n1", 1, recs(0, 3))
	return r, ice
}

// addSnapshot appends to metadata m a copy of its first snapshot with id,
// no parent and summary.
func addSnapshot(m map[string]json.RawMessage, id int64, summary map[string]string) {
	var snaps []map[string]json.RawMessage
	_ = json.Unmarshal(m["snapshots"], &snaps)
	s := map[string]json.RawMessage{}
	for k, v := range snaps[0] {
		s[k] = v
	}
	s["snapshot-id"] = json.RawMessage(strconv.FormatInt(id, 10))
	delete(s, "parent-snapshot-id")
	s["summary"], _ = json.Marshal(summary)
	snaps = append(snaps, s)
	m["snapshots"], _ = json.Marshal(snaps)
}

// appendsPastPlanted plants n1's checkpoint 1 of orders (ordersRig) with
// edit applied as the table's v2, with the version hint on it, and checks
// that the planted v2 loads, that checkpoints 2 and 3 are appended past it
// (v4, every row once), and that a replay of checkpoint 3 finds its
// snapshot (no v5).
func appendsPastPlanted(t *testing.T, edit func(m map[string]json.RawMessage)) {
	t.Helper()
	r, ice := ordersRig(t)
	ctx := context.Background()
	r.plant("orders", 2, r.edited("orders", 1, edit), true)
	if _, err := table.Load(ctx, r.dest, "orders"); err != nil {
		t.Fatalf("the planted v2 does not load: %v", err)
	}
	n := 3
	for ck := uint64(2); ck <= 3; ck++ {
		if err := ice.Commit(ctx, "n1", ck, r.files("orders", "n1", ck, recs(n, 2))); err != nil {
			t.Fatalf("commit of checkpoint %d: %v", ck, err)
		}
		n += 2
	}
	r.wantOrders(n, 4) // checkpoints 2 and 3 appended past the planted v2
	// A replay of checkpoint 3 still finds it: the proof is its snapshot.
	r.commit(ice, "n1", 3, recs(n-2, 2))
	if _, again := r.read("orders"); again.Version != 4 {
		t.Fatalf("a replay of checkpoint 3 made v%d", again.Version)
	}
}

// TestPlantedUnparseableMetadata: a document that is no Iceberg metadata
// planted as the table's newest version (the next one, one far ahead
// named by the version hint, one beyond a gap that the chain reaches
// later, one far beyond the walk with the hint on it) is passed over:
// the commit writes the chain's next version that is free (past the
// planted one when it is the next), from the newest version that parses,
// and readers following the hint read every row once.
// Failed before: every commit of the stream was ErrCorrupt, retried for
// ever, holding back every later checkpoint of the node.
func TestPlantedUnparseableMetadata(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      int64
		hint   bool
		wantV  int64 // the version the commit of checkpoint 2 writes
		extraV int64 // a second planted version, or 0
	}{
		{name: "next", v: 2, wantV: 3},
		{name: "next/hint", v: 2, hint: true, wantV: 3},
		{name: "ahead/hint", v: 99, hint: true, wantV: 2},
		{name: "beyond a gap", v: 4, wantV: 2},
		{name: "far/hint", v: 5000, hint: true, wantV: 2},
		{name: "two", v: 3, hint: true, extraV: 2, wantV: 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, ice := ordersRig(t)
			ctx := context.Background()
			r.plant("orders", c.v, []byte("not metadata\x00"), c.hint)
			if c.extraV > 0 {
				r.plant("orders", c.extraV, []byte(`{"truncated": `), false)
			}
			n := 3
			for ck := uint64(2); ck <= 4; ck++ {
				if err := ice.Commit(ctx, "n1", ck, r.files("orders", "n1", ck, recs(n, 2))); err != nil {
					t.Fatalf("commit of checkpoint %d past a planted v%d: %v", ck, c.v, err)
				}
				n += 2
				if ck == 2 {
					if h := r.hint("orders"); h != strconv.FormatInt(c.wantV, 10) {
						t.Fatalf("hint %s after checkpoint 2, want %d", h, c.wantV)
					}
				}
			}
			tb, cur := r.read("orders")
			wantIDs(t, ids(t, tb.Rows), n)
			if len(cur.Metadata.Snapshots()) != 4 {
				t.Fatalf("%d snapshots, want 4", len(cur.Metadata.Snapshots()))
			}
		})
	}
}

// TestPlantedTableMetadataClaimingTheTable: a document that claims to be
// this table's metadata (its table-uuid) but does not parse may be
// another writer's version, whose snapshots a commit past it would drop:
// the commit fails with ErrCorrupt naming it (the failure policy makes
// that a permanent, visible stuck commit), and writes nothing. So does
// one whose last-sequence-number is beyond any table's (the next would
// overflow), and one whose current snapshot's manifest list is missing
// (its files can't be carried forward). Failed before for the latter two:
// the builder's "can't add snapshot with sequence number" and "read
// manifest list: not found", unclassified, which the failure policy
// retries for ever as if they could pass.
func TestPlantedTableMetadataClaimingTheTable(t *testing.T) {
	for name, edit := range map[string]func(m map[string]json.RawMessage){
		"format 3": func(m map[string]json.RawMessage) { m["format-version"] = json.RawMessage("3") },
		"sequence": func(m map[string]json.RawMessage) { m["last-sequence-number"] = json.RawMessage("9223372036854775807") },
		"list missing": func(m map[string]json.RawMessage) {
			var snaps []map[string]json.RawMessage
			_ = json.Unmarshal(m["snapshots"], &snaps)
			var loc string
			_ = json.Unmarshal(snaps[0]["manifest-list"], &loc)
			snaps[0]["manifest-list"], _ = json.Marshal(loc + ".gone")
			m["snapshots"], _ = json.Marshal(snaps)
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, ice := ordersRig(t)
			ctx := context.Background()
			r.plant("orders", 2, r.edited("orders", 1, edit), true)
			err := ice.Commit(ctx, "n1", 2, r.files("orders", "n1", 2, recs(3, 2)))
			if !errors.Is(err, table.ErrCorrupt) || !strings.Contains(err.Error(), layout.TableMetadataName("orders", 2)) {
				t.Fatalf("commit past a v2 of this table that does not parse: %v, want ErrCorrupt naming it", err)
			}
			if _, err := os.Stat(filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", 3))); !os.IsNotExist(err) {
				t.Fatalf("v3 written past this table's v2: %v", err)
			}
		})
	}
}

// TestPlantedCommittedMarks: a table property eosink.committed.<node>, or
// a snapshot summary, naming a checkpoint of this node far beyond any it
// could have committed does not make the node's next checkpoints count
// as committed: each is appended. Failed before: the commits were
// skipped (Committed believed the mark), their files committed but in no
// snapshot.
func TestPlantedCommittedMarks(t *testing.T) {
	const far = 1 << 40
	for _, c := range []struct {
		name string
		edit func(m map[string]json.RawMessage)
	}{
		{"property", func(m map[string]json.RawMessage) {
			var props map[string]string
			_ = json.Unmarshal(m["properties"], &props)
			props[table.PropCommittedPrefix+"n1"] = strconv.Itoa(far)
			m["properties"], _ = json.Marshal(props)
		}},
		{"snapshot", func(m map[string]json.RawMessage) {
			addSnapshot(m, 4242, map[string]string{"operation": "append", table.SummaryNode: "n1", table.SummaryCheckpoint: strconv.Itoa(far)})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			appendsPastPlanted(t, c.edit)
		})
	}
}

// TestExpirableKeepsNewestPastPlanted: a snapshot planted with a
// checkpoint of node b far ahead does not take the protection of b's
// real newest snapshot (its last appended): expiry keeps it. Failed
// before: b's newest was expired, so a replay of its checkpoint would
// append it again.
func TestExpirableKeepsNewestPastPlanted(t *testing.T) {
	snap := func(id int64, seq int64, node string, c uint64) table.Snapshot {
		return table.Snapshot{SnapshotID: id, SequenceNumber: seq, Summary: &table.Summary{
			Operation: table.OpAppend, Properties: map[string]string{table.SummaryNode: node, table.SummaryCheckpoint: strconv.FormatUint(c, 10)}}}
	}
	snaps := []table.Snapshot{snap(1, 1, "b", 1<<40), snap(2, 2, "b", 1), snap(3, 3, "b", 2), snap(4, 4, "b", 3), snap(5, 5, "b", 4)}
	got := table.Expirable(snaps, 6, 1)
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("expired %v, want [2 3 4] (b's last appended kept)", got)
	}
}

// TestDamagedTableManifest: a manifest of the table damaged in the
// destination (its Avro schema renames the partition field, which makes
// iceberg-go's reader dereference nil) is an error for readers of the
// table (DataFiles: verify, the UI), never a panic that ends the process,
// and the commits go on: a merge leaves it in the list unmerged. Failed
// before: DataFiles and the merging commit panicked (found by mutating
// manifests at random: the commit path would crash the node at every
// start).
func TestDamagedTableManifest(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	ice.MaxManifests = 3
	ctx := context.Background()
	for ck := uint64(1); ck <= 2; ck++ {
		if err := ice.Commit(ctx, "n1", ck, r.files("orders", "n1", ck, recs(int(ck)*3, 3))); err != nil {
			t.Fatal(err)
		}
	}
	damaged := layout.TableManifestName("orders", "n1", 1)
	p := filepath.Join(r.dest.Dest, damaged)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"name":"partition"`)) {
		t.Fatalf("no partition field in the manifest's schema: %.200q", b)
	}
	if err := os.WriteFile(p, bytes.Replace(b, []byte(`"name":"partition"`), []byte(`"name":"partution"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, err := table.Load(ctx, r.dest, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := table.DataFiles(ctx, r.dest, "orders", cur.Metadata); !errors.Is(err, table.ErrCorrupt) {
		t.Fatalf("data files of a table with a damaged manifest: %v, want ErrCorrupt", err)
	}
	for ck := uint64(3); ck <= 4; ck++ { // 4 merges: the list would hold 4 > 3
		if err := ice.Commit(ctx, "n1", ck, r.files("orders", "n1", ck, recs(int(ck)*3, 3))); err != nil {
			t.Fatalf("commit of checkpoint %d with a damaged manifest in the table: %v", ck, err)
		}
	}
	cur, err = table.Load(ctx, r.dest, "orders")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := os.ReadFile(strings.TrimPrefix(cur.Metadata.CurrentSnapshot().ManifestList, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := iceberg.ReadManifestList(bytes.NewReader(lb))
	if err != nil {
		t.Fatal(err)
	}
	var kept, merged bool
	for _, m := range list {
		kept = kept || strings.HasSuffix(m.FilePath(), damaged)
		merged = merged || strings.Contains(m.FilePath(), "/merged-")
	}
	if len(cur.Metadata.Snapshots()) != 4 || !kept || !merged {
		t.Fatalf("%d snapshots, damaged manifest kept %v, merged %v; want 4, true, true (%d manifests)", len(cur.Metadata.Snapshots()), kept, merged, len(list))
	}
}

// TestPlantedMetadataValuesCommitsGoOn: a parseable version planted with
// values the next commit can't simply extend — a last-updated-ms far in
// the future (or another writer's clock ahead), a snapshot holding the id
// of the next checkpoint's snapshot (the ids are derived from public
// names) — does not stop the table's commits: the snapshot takes the
// table's time if it is ahead, and another free id. Failed before: every
// commit failed ("invalid snapshot timestamp", "already exists"), an
// error the failure policy retries for ever.
func TestPlantedMetadataValuesCommitsGoOn(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(m map[string]json.RawMessage)
	}{
		{"future", func(m map[string]json.RawMessage) {
			m["last-updated-ms"] = json.RawMessage("253402300799000") // 9999-12-31
		}},
		{"snapshot id", func(m map[string]json.RawMessage) {
			addSnapshot(m, table.SnapshotID("orders", "n1", 2), map[string]string{"operation": "append"})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			appendsPastPlanted(t, c.edit)
		})
	}
}

// TestPlantedManifestAtOurName: a file planted at the name of the next
// checkpoint's table manifest (eosink-<node>-<ckpt>-m0.avro: a fixed
// name, so that a retry finds its own) is taken as this checkpoint's
// manifest only if it lists exactly the checkpoint's files; otherwise the
// commit writes its manifest under the next free name. Readers see every
// row once. Failed before: the commit took whatever was there as its
// manifest — garbage made the table unreadable, another file list would
// have put other files in the table in place of the checkpoint's.
func TestPlantedManifestAtOurName(t *testing.T) {
	for name, planted := range map[string]func(r *rig) []byte{
		"garbage": func(*rig) []byte { return []byte("Obj\x01 not avro") },
		"another checkpoint's": func(r *rig) []byte {
			b, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableManifestName("orders", "n1", 1)))
			if err != nil {
				r.t.Fatal(err)
			}
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, ice := ordersRig(t)
			ctx := context.Background()
			if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableManifestName("orders", "n1", 2)), planted(r), 0o644); err != nil {
				t.Fatal(err)
			}
			files := r.files("orders", "n1", 2, recs(3, 4))
			for range 2 { // the second: a retry finds its own manifest
				if err := ice.Commit(ctx, "n1", 2, files); err != nil {
					t.Fatal(err)
				}
			}
			r.wantOrders(7, 2)
		})
	}
}

// TestPassingOverLeavesNoGap: a commit that passes over a version planted
// far above the chain (with the version hint on it) writes the chain's
// next version, not one past the planted: the chain keeps no gap, so a
// reader or commit that later probes from v1 (the hint lost or damaged)
// still finds the newest version. Failed with 3ff2f22's first rule
// (write past the highest version found): checkpoint 2 went to v100, and
// with the hint gone the next commit built on v1, dropping it.
func TestPassingOverLeavesNoGap(t *testing.T) {
	r, ice := ordersRig(t)
	r.plant("orders", 99, []byte("planted"), true)
	r.commit(ice, "n1", 2, recs(3, 2))
	if h := r.hint("orders"); h != "2" {
		t.Fatalf("hint %s, want 2", h)
	}
	if err := os.Remove(filepath.Join(r.dest.Dest, layout.TableHintName("orders"))); err != nil {
		t.Fatal(err)
	}
	r.commit(ice, "n1", 3, recs(5, 2))
	r.wantOrders(7, 3)
}

// TestPlantedOtherTablesMetadata: a copy of another table's metadata (here
// another stream's, in the same destination) planted as this table's
// next version is no version of this table (its location says whose it
// is): passed over. Failed before: the commit built on it, so the table
// held the other stream's rows and no longer its own earlier ones.
func TestPlantedOtherTablesMetadata(t *testing.T) {
	r, ice := ordersRig(t)
	ctx := context.Background()
	if err := ice.Commit(ctx, "n1", 2, r.files("other", "n1", 2, recs(100, 4))); err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableMetadataName("other", 1)))
	if err != nil {
		t.Fatal(err)
	}
	r.plant("orders", 2, other, true)
	r.commit(ice, "n1", 3, recs(3, 2))
	tb, _ := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 5)
}

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
