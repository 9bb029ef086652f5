package table_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	icetable "github.com/apache/iceberg-go/table"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/icebergread"
	"github.com/eosink/eosink/recovery"
)

var ordersConf = streamconf.Config{
	Format: streamconf.FormatParquet, Table: streamconf.TableIceberg,
	Partition: "dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}/region={field:region}",
	Schema: &streamconf.Schema{Fields: []streamconf.Field{
		{Name: "id", Type: streamconf.TypeInt64, Required: true},
		{Name: "region", Type: streamconf.TypeString, Required: true},
		{Name: "amount", Type: streamconf.TypeDouble},
		{Name: "ts", Type: streamconf.TypeTimestamp, Required: true},
	}},
}

// rig is one destination directory with table committers over it.
type rig struct {
	t    testing.TB
	dir  string
	dest *local.Local
	mu   sync.Mutex
	conf streamconf.Config
}

func newRig(t testing.TB) *rig {
	t.Helper()
	dir := t.TempDir()
	dest := filepath.Join(dir, "files")
	if err := os.MkdirAll(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ordersConf.Validate(); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, dir: dir, dest: local.New(durable.NewOsFs(), dest, filepath.Join(dir, "staging")), conf: ordersConf.Defaults()}
}

func (r *rig) iceberg() *table.Iceberg {
	return &table.Iceberg{Dest: r.dest, Location: "file://" + r.dest.Dest, Config: func(s string) (streamconf.Config, bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.conf, true
	}}
}

// commit commits node's checkpoint ckpt of recs (files) to ice as stream
// "orders"; an error ends the test.
func (r *rig) commit(ice *table.Iceberg, node string, ckpt uint64, recs []string) {
	r.t.Helper()
	if err := ice.Commit(context.Background(), node, ckpt, r.files("orders", node, ckpt, recs)); err != nil {
		r.t.Fatal(err)
	}
}

// files writes one Parquet file per partition of recs (JSON lines) as
// node's checkpoint would commit them, and returns them.
func (r *rig) files(stream, node string, ckpt uint64, recs []string) []committer.File {
	r.t.Helper()
	tt, err := r.conf.TableTemplate()
	if err != nil {
		r.t.Fatal(err)
	}
	byDir := map[string][]string{}
	var dirs []string
	for _, rec := range recs {
		d, err := tt.Eval(time.Now(), []byte(rec))
		if err != nil {
			r.t.Fatal(err)
		}
		if byDir[d] == nil {
			dirs = append(dirs, d)
		}
		byDir[d] = append(byDir[d], rec)
	}
	sort.Strings(dirs)
	var out []committer.File
	for i, d := range dirs {
		var buf bytes.Buffer
		n, err := format.Encode(&buf, strings.NewReader(strings.Join(byDir[d], "\n")+"\n"), format.EncodingFor(r.conf))
		if err != nil {
			r.t.Fatal(err)
		}
		final := stream + "/" + d + "/" + layout.PartName(node, ckpt, i, "parquet")
		p := filepath.Join(r.dest.Dest, final)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, committer.File{Stream: stream, Final: final, Bytes: int64(buf.Len()), Records: n,
			Format: streamconf.FormatParquet, Table: streamconf.TableIceberg})
	}
	return out
}

// read reads the table with iceberg-go from its newest metadata.
func (r *rig) read(stream string) (*icebergread.Table, table.Loaded) {
	r.t.Helper()
	cur, err := table.Load(context.Background(), r.dest, stream)
	if err != nil {
		r.t.Fatal(err)
	}
	if cur.Version == 0 {
		return &icebergread.Table{}, cur
	}
	loc := "file://" + filepath.Join(r.dest.Dest, layout.TableMetadataName(stream, cur.Version))
	tb, err := icebergread.Read(context.Background(), iceio.LocalFS{}, loc)
	if err != nil {
		r.t.Fatal(err)
	}
	return tb, cur
}

func recs(from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf(`{"id":%d,"region":"r%d","amount":%d.5,"ts":"2026-11-%02dT%02d:30:00Z"}`, i, i%3, i, 1+i%2, i%24))
	}
	return out
}

// ids returns the sorted ids of rows, failing on a duplicate.
func ids(t testing.TB, rows []map[string]any) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for _, r := range rows {
		id := int(r["id"].(float64))
		if seen[id] {
			t.Errorf("id %d read twice", id)
		}
		seen[id] = true
		out = append(out, id)
	}
	sort.Ints(out)
	return out
}

// wantOrders reads the orders table and fails the test unless it holds
// the ids 0..n-1, each once, at version v.
func (r *rig) wantOrders(n int, v int64) {
	r.t.Helper()
	tb, cur := r.read("orders")
	wantIDs(r.t, ids(r.t, tb.Rows), n)
	if cur.Version != v {
		r.t.Fatalf("read the orders table at v%d, want v%d", cur.Version, v)
	}
}

func wantIDs(t testing.TB, got []int, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("read %d rows, want %d", len(got), n)
	}
	for i, id := range got {
		if id != i {
			t.Fatalf("row %d has id %d", i, id)
		}
	}
}

func TestCommitReadByIcebergGo(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	r.commit(ice, "n1", 1, recs(0, 10))
	r.commit(ice, "n1", 2, recs(10, 5))
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 15)
	if tb.Snapshots != 2 || cur.Version != 2 {
		t.Fatalf("%d snapshots at v%d, want 2 at v2", tb.Snapshots, cur.Version)
	}
	if tb.Summary[table.SummaryNode] != "n1" || tb.Summary[table.SummaryCheckpoint] != "2" {
		t.Fatalf("summary %v", tb.Summary)
	}
	// Partition values and field ids as the spec says.
	md := cur.Metadata
	spec := md.PartitionSpec()
	var names []string
	for _, f := range spec.Fields() {
		names = append(names, f.Name+":"+f.Transform.String())
	}
	if got := strings.Join(names, ","); got != "ts_hour:hour,region:identity" {
		t.Fatalf("spec %s", got)
	}
	for i, f := range md.CurrentSchema().Fields() {
		if f.ID != i+1 {
			t.Fatalf("field %s id %d", f.Name, f.ID)
		}
	}
	// A filter on a partition column prunes by the manifests' values.
	rows := 0
	for _, row := range tb.Rows {
		if row["region"] == "r1" {
			rows++
		}
	}
	if rows != 5 {
		t.Fatalf("%d rows of r1, want 5", rows)
	}
	// The Avro files are uncompressed (see avro.go).
	m, err := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableManifestName("orders", "n1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m, []byte("avro.codec\x08null")) {
		t.Fatalf("manifest codec is not null")
	}
}

// TestCommitIdempotent: committing a checkpoint again (a replay) adds no
// second snapshot, whether or not the version hint was written.
func TestCommitIdempotent(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	ctx := context.Background()
	files := r.files("orders", "n1", 7, recs(0, 4))
	for range 3 {
		if err := ice.Commit(ctx, "n1", 7, files); err != nil {
			t.Fatal(err)
		}
	}
	// A crash after the metadata, before the hint: the hint lags.
	if err := os.WriteFile(filepath.Join(r.dest.Dest, layout.TableHintName("orders")), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ice.Commit(ctx, "n1", 7, files); err != nil {
		t.Fatal(err)
	}
	// An older checkpoint of the node is in the table too (max committed)
	// when the bound covers the later one: a replay from a state store
	// restored from an older copy (TestPlantedCommittedMarks: not beyond).
	ice.Bound = func() uint64 { return 7 }
	r.commit(ice, "n1", 5, recs(100, 1))
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 4)
	if tb.Snapshots != 1 || cur.Version != 1 {
		t.Fatalf("%d snapshots at v%d, want 1 at v1", tb.Snapshots, cur.Version)
	}
	hint, _ := os.ReadFile(filepath.Join(r.dest.Dest, layout.TableHintName("orders")))
	if string(hint) != "1" {
		t.Fatalf("hint %q, want 1", hint)
	}
}

// hintFails fails the version hint write: the commit's last step.
type hintFails struct {
	*local.Local
	fail bool
}

func (h *hintFails) WriteLease(ctx context.Context, name string, data []byte, version string) (string, error) {
	if h.fail {
		return "", errors.New("injected: crash before the hint")
	}
	return h.Local.WriteLease(ctx, name, data, version)
}

// TestCrashBeforeHint: the metadata is written, the hint not; the replay
// finds the snapshot by probing past the hint and adds none.
func TestCrashBeforeHint(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	hf := &hintFails{Local: r.dest, fail: true}
	ice.Dest = hf
	ctx := context.Background()
	files := r.files("orders", "n1", 1, recs(0, 3))
	if err := ice.Commit(ctx, "n1", 1, files); err == nil {
		t.Fatal("commit passed with the hint failing")
	}
	hf.fail = false
	if err := ice.Commit(ctx, "n1", 1, files); err != nil {
		t.Fatal(err)
	}
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 3)
	if tb.Snapshots != 1 || cur.Version != 1 {
		t.Fatalf("%d snapshots at v%d, want 1 at v1", tb.Snapshots, cur.Version)
	}
}

// TestRaceTwoNodes: two nodes append to one table at once; every lost
// create-only race is reloaded and retried, and every checkpoint is in
// the table once.
func TestRaceTwoNodes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const per = 12
	var wg sync.WaitGroup
	errs := make(chan error, 2*per)
	var races [2]int
	for n := range 2 {
		node := "n" + strconv.Itoa(n)
		ice := r.iceberg()
		// Each node has its own staging directory, as nodes do.
		own := local.New(durable.NewOsFs(), r.dest.Dest, filepath.Join(r.dir, "staging-"+node))
		counting := &countingDest{Local: own}
		ice.Dest = counting
		var files [][]committer.File
		for c := range per {
			files = append(files, r.files("orders", node, uint64(c+1), recs(n*1000+c*10, 10)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range per {
				if err := ice.Commit(ctx, node, uint64(c+1), files[c]); err != nil {
					errs <- err
				}
			}
			races[n] = int(counting.exists)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tb, cur := r.read("orders")
	t.Logf("snapshots %d version %d", tb.Snapshots, cur.Version)
	if len(tb.Rows) != 2*per*10 {
		t.Fatalf("%d rows, want %d", len(tb.Rows), 2*per*10)
	}
	ids(t, tb.Rows)
	if tb.Snapshots != 2*per || cur.Version != 2*per {
		t.Fatalf("%d snapshots at v%d, want %d", tb.Snapshots, cur.Version, 2*per)
	}
	t.Logf("lost races: %v", races)
}

type countingDest struct {
	*local.Local
	mu     sync.Mutex
	exists int64
}

func (c *countingDest) Publish(ctx context.Context, name string, data []byte) error {
	err := c.Local.Publish(ctx, name, data)
	if errors.Is(err, committer.ErrExists) {
		c.mu.Lock()
		c.exists++
		c.mu.Unlock()
	}
	return err
}

// TestMaintenance: snapshots are expired down to keep_snapshots (the
// newest of each node kept), manifests are merged, and every row is still
// read once.
func TestMaintenance(t *testing.T) {
	r := newRig(t)
	r.conf.KeepSnapshots = 5
	ice := r.iceberg()
	ice.MaxManifests = 4
	// n0 commits once, early; n1 many times after.
	r.commit(ice, "n0", 1, recs(0, 3))
	for c := 1; c <= 20; c++ {
		r.commit(ice, "n1", uint64(c), recs(3+(c-1)*2, 2))
	}
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 43)
	snaps := cur.Metadata.Snapshots()
	if len(snaps) > 5 {
		t.Fatalf("%d snapshots kept, want at most 5", len(snaps))
	}
	if !table.Committed(cur.Metadata, "n0", 1, 0) {
		t.Fatal("n0's checkpoint 1 is forgotten")
	}
	var n0 bool
	for _, s := range snaps {
		if s.Summary.Properties[table.SummaryNode] == "n0" {
			n0 = true
		}
	}
	if !n0 {
		t.Fatal("expiry removed the newest snapshot of n0")
	}
	// The current snapshot's list holds a bounded number of manifests.
	lb, err := os.ReadFile(strings.TrimPrefix(cur.Metadata.CurrentSnapshot().ManifestList, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(lb, []byte(".avro")); n > 5 {
		t.Fatalf("manifest list names %d manifests, want at most 5", n)
	}
	// A replay of an old checkpoint of n1 (from a state store restored from
	// an older copy: the bound covers the ids n1 reserved) adds nothing.
	ice.Bound = func() uint64 { return 20 }
	r.commit(ice, "n1", 3, recs(7, 2))
	if _, again := r.read("orders"); again.Version != cur.Version {
		t.Fatalf("a replay of checkpoint 3 made v%d", again.Version)
	}
}

func TestExpirableKeepsNewestPerNode(t *testing.T) {
	snap := func(id int64, seq int64, node string, c int) table.Snapshot {
		return table.Snapshot{SnapshotID: id, SequenceNumber: seq, Summary: &table.Summary{
			Operation: table.OpAppend, Properties: map[string]string{table.SummaryNode: node, table.SummaryCheckpoint: strconv.Itoa(c)}}}
	}
	snaps := []table.Snapshot{snap(1, 1, "a", 1), snap(2, 2, "b", 1), snap(3, 3, "b", 2), snap(4, 4, "b", 3), snap(5, 5, "b", 4)}
	got := table.Expirable(snaps, 6, 2)
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("expired %v, want [2 3 4] (a's only snapshot and b's newest kept)", got)
	}
	if got := table.Expirable(snaps, 6, 10); got != nil {
		t.Fatalf("expired %v under the limit", got)
	}
}

// TestJSONAndBoolColumns: json (Parquet JSON text) and bool columns read
// back through iceberg-go as string and boolean.
func TestJSONAndBoolColumns(t *testing.T) {
	r := newRig(t)
	r.conf = streamconf.Config{Format: streamconf.FormatParquet, Table: streamconf.TableIceberg, Partition: "data",
		Schema: &streamconf.Schema{Fields: []streamconf.Field{
			{Name: "id", Type: streamconf.TypeInt64, Required: true},
			{Name: "doc", Type: streamconf.TypeJSON},
			{Name: "ok", Type: streamconf.TypeBool},
		}}}.Defaults()
	if err := r.conf.Validate(); err != nil {
		t.Fatal(err)
	}
	files := r.files("j", "n1", 1, []string{`{"id":0,"doc":{"a":[1,2]},"ok":true}`, `{"id":1}`})
	if err := r.iceberg().Commit(context.Background(), "n1", 1, files); err != nil {
		t.Fatal(err)
	}
	tb, _ := r.read("j")
	wantIDs(t, ids(t, tb.Rows), 2)
	for _, row := range tb.Rows {
		if row["id"].(float64) == 0 && (row["doc"] != `{"a":[1,2]}` || row["ok"] != true) {
			t.Fatalf("row %v", row)
		}
	}
}

// TestHintBeyondTheTable: a version hint naming a version the table does
// not have (written by someone else, or a bad restore) is only a hint:
// Load probes from the start and the next commit appends. It used to
// fail every commit of the stream with "not found", retried for ever
// (I13: a document this node did not write held back its commits).
func TestHintBeyondTheTable(t *testing.T) {
	r := newRig(t)
	ice := r.iceberg()
	ctx := context.Background()
	r.commit(ice, "n1", 1, recs(0, 3))
	hint := filepath.Join(r.dest.Dest, layout.TableHintName("orders"))
	if err := os.WriteFile(hint, []byte("999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur, err := table.Load(ctx, r.dest, "orders")
	if err != nil || cur.Version != 1 {
		t.Fatalf("load under a hint beyond the table: v%d, %v; want v1", cur.Version, err)
	}
	if err := ice.Commit(ctx, "n1", 2, r.files("orders", "n1", 2, recs(3, 3))); err != nil {
		t.Fatalf("commit under a hint beyond the table: %v", err)
	}
	r.wantOrders(6, 2)
	// Readers follow the hint: it names the table's version again.
	if b, err := os.ReadFile(hint); err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Fatalf("version hint after the commit: %q, %v; want 2", b, err)
	}
}

// TestCommitClockBehind: a node whose clock is behind the table's newest
// snapshot by more than Iceberg's one-minute tolerance (another node's
// clock ahead, or its own clock stepped back by NTP) still commits, and
// the snapshot log stays in order for time travel. Before the fix its
// snapshot was refused ("invalid snapshot timestamp"), an error the
// failure policy retries: the node's checkpoints stalled, every stream's,
// until its clock caught up with the other node's.
func TestCommitClockBehind(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ahead, behind := r.iceberg(), r.iceberg()
	ahead.Now = func() time.Time { return base.Add(10 * time.Minute) }
	behind.Now = func() time.Time { return base }
	if err := ahead.Commit(ctx, "n0", 1, r.files("orders", "n0", 1, recs(0, 3))); err != nil {
		t.Fatal(err)
	}
	if err := behind.Commit(ctx, "n1", 1, r.files("orders", "n1", 1, recs(3, 3))); err != nil {
		t.Fatalf("a node 10 minutes behind can't commit: %v", err)
	}
	// The same node's clock stepped back an hour between two checkpoints.
	behind.Now = func() time.Time { return base.Add(-time.Hour) }
	if err := behind.Commit(ctx, "n1", 2, r.files("orders", "n1", 2, recs(6, 3))); err != nil {
		t.Fatalf("a clock stepped back an hour can't commit: %v", err)
	}
	tb, cur := r.read("orders")
	wantIDs(t, ids(t, tb.Rows), 9)
	if tb.Snapshots != 3 || cur.Version != 3 {
		t.Fatalf("%d snapshots at v%d, want 3 at v3", tb.Snapshots, cur.Version)
	}
	snaps := cur.Metadata.Snapshots()
	for i := 1; i < len(snaps); i++ {
		if snaps[i].TimestampMs < snaps[i-1].TimestampMs {
			t.Fatalf("snapshot %d at %d ms, before its parent at %d ms", i, snaps[i].TimestampMs, snaps[i-1].TimestampMs)
		}
	}
}

// TestCommitDisplacedFile: a part file the commit displaced
// (<stream>/_displaced/<part>: its partition path refused by the
// destination) joins the table where it is, with the partition its
// prepared name gave it (File.DisplacedFrom), so that a reader filtering
// on the partition finds it, and one filtering on another value does not.
// Before, the table commit parsed the partition from the displaced name,
// which has none: ErrIncompatible, and the checkpoint was stuck.
func TestCommitDisplacedFile(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	f, to := r.displacedFile()
	ice := r.iceberg()
	if err := ice.Commit(ctx, "n1", 1, []committer.File{f}); err != nil {
		t.Fatalf("commit of a displaced file: %v", err)
	}
	checkDisplacedScan(t, r, to)
}

// TestCommitDisplacedFileFromManifest: the table commit a start finishes
// from a published manifest (recovery.ManifestTableFiles, after a lost
// state store) places a displaced file in the partition of the name it
// was prepared with, which the manifest keeps (displaced_from): without
// it the displaced name has no partition and the commit is refused.
func TestCommitDisplacedFileFromManifest(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	f, to := r.displacedFile()
	body, err := layout.EncodeManifest(layout.NewManifest("n1", 1, time.Now(), []committer.File{f}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.DecodeManifest(layout.ManifestName("n1", 1), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got := recovery.ManifestTableFiles(m, func(s string) bool { return s == "orders" })
	if len(got) != 1 || got[0].DisplacedFrom != f.DisplacedFrom || got[0].Table != streamconf.TableIceberg {
		t.Fatalf("files from the manifest: %+v", got)
	}
	if none := recovery.ManifestTableFiles(m, func(string) bool { return false }); len(none) != 0 {
		t.Fatalf("files of a stream that is no table: %+v", none)
	}
	if err := recovery.FinishTables(ctx, r.iceberg(), m, func(s string) bool { return s == "orders" }); err != nil {
		t.Fatalf("table commit from the manifest: %v", err)
	}
	checkDisplacedScan(t, r, to)
}

// displacedFile writes n1's checkpoint 1 of one record of orders (region
// r0) as one part file, moves it to its displaced name, and returns the
// file as the commit displaced it and its path.
func (r *rig) displacedFile() (committer.File, string) {
	r.t.Helper()
	files := r.files("orders", "n1", 1, recs(0, 1))
	if len(files) != 1 {
		r.t.Fatalf("%d files, want 1", len(files))
	}
	f := files[0]
	f.DisplacedFrom, f.Final = f.Final, layout.DisplacedName(f.Final)
	to := filepath.Join(r.dest.Dest, f.Final)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(r.dest.Dest, f.DisplacedFrom), to); err != nil {
		r.t.Fatal(err)
	}
	return f, to
}

// checkDisplacedScan checks that orders' table plans the displaced file
// to for a scan of its region r0, and none for r1.
func checkDisplacedScan(t *testing.T, r *rig, to string) {
	t.Helper()
	ctx := context.Background()
	_, cur := r.read("orders")
	loc := "file://" + filepath.Join(r.dest.Dest, layout.TableMetadataName("orders", cur.Version))
	tbl, err := icetable.NewFromLocation(ctx, []string{"t"}, loc, func(context.Context) (iceio.IO, error) { return iceio.LocalFS{}, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for region, want := range map[string]int{"r0": 1, "r1": 0} {
		tasks, err := tbl.Scan(icetable.WithRowFilter(iceberg.EqualTo(iceberg.Reference("region"), region))).PlanFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != want {
			t.Fatalf("a scan of region %s plans %d files, want %d", region, len(tasks), want)
		}
		if want == 1 && tasks[0].File.FilePath() != "file://"+to {
			t.Fatalf("planned %s, want the displaced file %s", tasks[0].File.FilePath(), to)
		}
	}
}
