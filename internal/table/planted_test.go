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
