package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// The model test's world (TestModel, worldStep): what a deployment does
// around the engine besides its clients' requests.
//
//   - tableStep: an operator makes stream tb an Iceberg table (PUT with a
//     table config), later changes its keep_snapshots or adds an optional
//     field; the clients then write tb as any stream. Mostly tb is first
//     a plain Parquet stream partitioned by ingest time, with committed
//     files (plainFirst), and then the state store is often lost at once
//     (tableLost): the stream must not park, its writes must be taken. checkTable, at every
//     full check: the table's current snapshot holds exactly the tb files
//     the manifests name — each once, added by its own checkpoint's
//     snapshot —, its record count is theirs, its snapshots' times never
//     go back, and nothing in metadata/ was passed over.
//   - clockStep: the wall clock (Config.Now) steps forward — minutes, or
//     past --idempotency-window and often --producer-expiry — or back,
//     hours or days. Keys (keyModel) and producers expire as the design
//     says: never one whose batches are not committed; committed keys
//     dropped early by a forward step are the documented cost. Half the
//     forward steps run the producer expiry at the new time (expireAt).
//     The table's snapshot times are checked by checkTable; the lease's
//     times follow the clock, and every restart after a step must start.
//   - retentionStep: a retention job deletes a committed data file, its
//     partition directory or the one above (never of the table stream:
//     a table's files go by table maintenance, not a plain delete), and
//     makes that durable. The checker is told (invariant.Checker.Removed);
//     then batches are written into the same stream — landing in the
//     removed partition when it is the current one, or later after a
//     clock step back —, committed (a commit must not wedge on the
//     missing directory), and half the time the power is cut: what
//     committed stays.
//   - leaseRenewStep: the node lease's renewal loop runs (kicked: the
//     model's lease never expires, so its timer never fires), half the
//     time with a write, fsync or rename of the lease document failing.
//     A failed fsync must stop the engine (I14), as on the live path.
//   - plantStreamDoc: a document under _streams/ for tb, newer than the
//     store's and a change PUT refuses (a column dropped, no table), then
//     a restart: the store's configuration must stay in force.

const (
	modelKeyWindow      = 30 * time.Hour // Config.IdempotencyWindow
	modelProducerExpiry = 60 * time.Hour // Config.ProducerExpiry; its loop ticks hourly (real time): expireAt runs it
)

// worldStats counts the world's steps.
type worldStats struct {
	tablePuts, tablePutsFailed, tableChecks, tableFiles, snapshots                                 int
	clockForward, clockPastWindow, clockBack, clockBackDays                                        int
	expiryRuns, expiredByClock, expiryKept                                                         int
	retentions, retentionsRefused, removedFiles, removedDirs, writesAfterRemoval, cutsAfterRemoval int
	leaseRenewals, leaseSyncsFailed, leaseFaults                                                   int
	plainFirst, tableLost, streamDocsPlanted                                                       int
}

func (s worldStats) String() string {
	return fmt.Sprintf("table stream: %d PUTs (%d cut by a fault; %d times a plain stream first, %d store losses at once after it became a table), %d table checks (at the end %d files, %d snapshots kept); clock: %d steps forward (%d past the key window), %d back (%d by days); producer expiry at the clock %d times (%d producers expired, %d idle ones kept as recently active or busy); retention: %d jobs (%d picks passed over: a producer's newest batch; %d files removed; %d jobs removed a directory), %d batches written after, %d power cuts after; lease: %d renewals kicked (%d failed fsyncs stopped the engine, %d other faults); %d refused changes of tb planted under _streams/",
		s.tablePuts, s.tablePutsFailed, s.plainFirst, s.tableLost, s.tableChecks, s.tableFiles, s.snapshots, s.clockForward, s.clockPastWindow, s.clockBack, s.clockBackDays,
		s.expiryRuns, s.expiredByClock, s.expiryKept, s.retentions, s.retentionsRefused, s.removedFiles, s.removedDirs, s.writesAfterRemoval, s.cutsAfterRemoval,
		s.leaseRenewals, s.leaseSyncsFailed, s.leaseFaults, s.streamDocsPlanted)
}

// modelWorld is the model's state of the world steps.
type modelWorld struct {
	table      bool                 // tb is a table stream the clients write
	grown      bool                 // its schema has the optional field "extra"
	wasPlain   bool                 // tb was a plain Parquet stream first (plainFirst)
	tableFrom  uint64               // the first checkpoint tb was a table in: files of those before may be no table's
	touch      map[string]time.Time // per producer: a lower bound of its last activity (init, or the barrier of a prepare)
	touchExact map[string]bool      // touch is the activity the store holds
	prepSeen   map[[2]string]int64  // model.prepared when touch was last brought up to date
	stats      *worldStats
}

func newModelWorld() modelWorld {
	return modelWorld{touch: map[string]time.Time{}, touchExact: map[string]bool{}, prepSeen: map[[2]string]int64{}}
}

// touched records an activity of p the store holds exactly: an init, a
// prepare, at clock now.
func (w *modelWorld) touched(p string, now time.Time) {
	w.touch[p], w.touchExact[p] = now, true
}

// touchUnsure records an init of p cut by a fault: its activity is the
// one before, or now.
func (w *modelWorld) touchUnsure(p string, now time.Time) {
	if t, ok := w.touch[p]; !ok || now.Before(t) {
		w.touch[p] = now
	}
	w.touchExact[p] = false
}

// notePrepares brings touch up to date with the prepares since the last
// call: the model's clock has not moved since (call before it moves),
// and a prepare records its checkpoint's barrier time.
func (w *modelWorld) notePrepares(m *model, now time.Time) {
	for k, v := range m.prepared {
		if w.prepSeen[k] != v {
			w.touched(k[0], now)
		}
	}
	w.prepSeen = maps.Clone(m.prepared)
}

// touchesLost: the store was rebuilt (activity from the rebuild's real
// time) or replaced by an older copy: no activity is known.
func (w *modelWorld) touchesLost(m *model) {
	clear(w.touch)
	clear(w.touchExact)
	w.prepSeen = maps.Clone(m.prepared)
}

// worldStep runs one of the world's steps.
func (mr *modelRun) worldStep() {
	if mr.cutFS != nil || mr.e.Err() != nil {
		mr.restart(mr.rng.IntN(2) == 0)
		return
	}
	switch x := mr.rng.IntN(12); {
	case x == 11 && mr.world.table && mr.crash == nil && !mr.noLease: // only the lease's destination keeps stream documents
		mr.plantStreamDoc()
	case x >= 10:
		mr.leaseRenewStep()
	case x < 3:
		mr.tableStep()
	case x < 7 || mr.crash != nil:
		mr.clockStep()
	default:
		mr.retentionStep()
	}
}

// setClock moves the engine's clock to now.
func (mr *modelRun) setClock(now time.Time) {
	mr.world.notePrepares(mr.m, mr.clock)
	mr.clock = now
	mr.now.Store(now.UnixNano())
	mr.km.clockTo(now)
}

// tableStep makes tb a table stream, or changes its configuration as a
// table can follow (keep_snapshots, an optional field).
func (mr *modelRun) tableStep() {
	conf := tableConf
	conf.KeepSnapshots = 2 + mr.rng.IntN(4) // expiry runs
	if mr.world.grown || mr.world.table && mr.rng.IntN(4) == 0 {
		conf.Schema = &streamconf.Schema{Fields: append(slices.Clone(testSchema.Fields), streamconf.Field{Name: "extra", Type: streamconf.TypeString})}
	}
	if !mr.world.table && !mr.world.wasPlain && mr.rng.IntN(4) != 0 && !mr.plainFirst() {
		return // put again at a later step
	}
	mr.world.st().tablePuts++
	if !mr.put(tableStream, conf) {
		mr.world.st().tablePutsFailed++
		return // put again at a later step
	}
	mr.world.grown = conf.Schema != testSchema
	if !mr.world.table {
		mr.world.table = true
		mr.world.tableFrom = mr.e.Status().OpenID
		mr.streams = append(mr.streams, tableStream)
		if mr.world.wasPlain && mr.crash == nil && mr.rng.IntN(3) != 0 {
			mr.tableLost()
		}
	}
}

// plainFirst makes tb a plain Parquet stream partitioned by ingest time
// and commits batches to it, before tableStep makes it a table
// partitioned by a column (a change PUT accepts: it was no table); its
// files so far are in partitions the table's template can't read, and
// are no table's. False if the PUT was cut by a fault.
func (mr *modelRun) plainFirst() bool {
	plain := streamconf.Config{Format: streamconf.FormatParquet, Schema: testSchema, Partition: "dt={ingest:%Y-%m-%d}/hour={ingest:%H}"}
	mr.world.st().tablePuts++
	if !mr.put(tableStream, plain) {
		mr.world.st().tablePutsFailed++
		return false
	}
	mr.world.wasPlain = true
	mr.sw.Set(nil)
	mr.crash = nil
	for _, p := range mr.producers {
		if _, inited := mr.m.epoch[p]; inited {
			if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, tableStream, 1+mr.rng.IntN(3)); err != nil {
				mr.fail("write %s, a plain stream: %v", tableStream, err)
			}
		}
	}
	commitAll(mr.t, mr.e, mr.m, "plain "+tableStream, mr.fail)
	mr.world.st().plainFirst++
	mr.note("%s a plain Parquet stream partitioned by ingest time, committed", tableStream)
	return true
}

// tableLost: the state store is lost right after tb became a table,
// before its next checkpoint. The rebuild finishes the table commits of
// the newest manifests, which hold tb's plain files only: they are no
// table's. The stream must go on: not parked, its writes taken and
// committed into the table.
func (mr *modelRun) tableLost() {
	mr.world.st().tableLost++
	mr.sw.Set(nil)
	mr.loseStore(nil, false)
	p := mr.lastInited()
	if p == "" {
		return
	}
	deadline := time.Now().Add(5 * time.Second) // a parked commit the park loop lands soon
	for {
		err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, tableStream, 1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			st := mr.e.Status()
			mr.fail("%s made a table from a plain stream, store lost: writes refused for 5 s (%v); %d tables parked (%s)", tableStream, err, st.TablesParked, st.TableParked)
		}
		time.Sleep(10 * time.Millisecond)
	}
	commitAll(mr.t, mr.e, mr.m, tableStream+" a table after the store loss", mr.fail)
	mr.fullCheck()
}

// st is where the world's stats go: set by runModel (a pointer into
// modelStats).
func (w *modelWorld) st() *worldStats { return w.stats }

// checkTable checks tb's table against the manifests (see the top).
func (mr *modelRun) checkTable() {
	if !mr.world.table {
		return
	}
	ctx := context.Background()
	d := local.New(mr.base, rigDest, rigStaging)
	cur, err := table.Load(ctx, d, tableStream)
	if err != nil {
		mr.fail("table %s: load: %v", tableStream, err)
	}
	if len(cur.Skipped) > 0 {
		mr.fail("table %s: metadata passed over: %+v", tableStream, cur.Skipped)
	}
	want := map[string]uint64{} // file -> the checkpoint whose manifest names it
	// Files committed before tb was a table (plainFirst) may be in it or
	// not: those of the barrier that made it one are, its plain ones not.
	maybe := map[string]uint64{}
	maybeRecords := map[string]int64{}
	var records int64
	names, err := afero.Glob(mr.base, rigDest+"/"+layout.ManifestDir+"/"+rigNode+"/*.json")
	if err != nil {
		mr.fail("list manifests: %v", err)
	}
	for _, name := range names {
		rel := strings.TrimPrefix(name, rigDest+"/")
		_, ck, ok := layout.ParseManifestName(rel)
		if !ok {
			continue
		}
		mf, err := layout.ReadManifest(ctx, d, rel)
		if err != nil {
			mr.fail("table %s: read manifest %s: %v", tableStream, rel, err)
		}
		for _, f := range mf.Files {
			switch {
			case f.Stream != tableStream:
			case ck < mr.world.tableFrom:
				maybe[f.Path], maybeRecords[f.Path] = ck, f.Records
			default:
				want[f.Path] = ck
				records += f.Records
			}
		}
	}
	if cur.Version == 0 {
		if len(want) > 0 {
			mr.fail("table %s: no table, %d files committed", tableStream, len(want))
		}
		return
	}
	files, err := table.DataFiles(ctx, d, tableStream, cur.Metadata)
	if err != nil {
		mr.fail("table %s v%d: data files: %v", tableStream, cur.Version, err)
	}
	in := map[string]bool{}
	for _, f := range files {
		ck, named := want[f.Path]
		if !named {
			ck, named = maybe[f.Path]
			records += maybeRecords[f.Path]
		}
		switch {
		case in[f.Path]:
			mr.fail("table %s v%d: %s is in the table twice (I2)", tableStream, cur.Version, f.Path)
		case !named:
			mr.fail("table %s v%d: %s is in the table, in no manifest", tableStream, cur.Version, f.Path)
		case f.SnapshotID != table.SnapshotID(tableStream, rigNode, ck):
			mr.fail("table %s v%d: %s added by snapshot %d, not by checkpoint %d's own %d", tableStream, cur.Version, f.Path, f.SnapshotID, ck, table.SnapshotID(tableStream, rigNode, ck))
		}
		in[f.Path] = true
	}
	for f, ck := range want {
		if !in[f] {
			mr.fail("table %s v%d: %s committed by checkpoint %d, in no snapshot", tableStream, cur.Version, f, ck)
		}
	}
	if s := cur.Metadata.CurrentSnapshot(); s != nil {
		if got := s.Summary.Properties["total-records"]; got != strconv.FormatInt(records, 10) {
			mr.fail("table %s v%d: %s records, the manifests name %d", tableStream, cur.Version, got, records)
		}
	}
	// Snapshot times never go back, whatever the clock did, and none is
	// after the metadata's own.
	snaps := slices.Clone(cur.Metadata.Snapshots())
	slices.SortFunc(snaps, func(a, b table.Snapshot) int { return int(a.SequenceNumber - b.SequenceNumber) })
	for i, s := range snaps {
		if i > 0 && s.TimestampMs < snaps[i-1].TimestampMs {
			mr.fail("table %s v%d: snapshot %d (sequence %d) dated %d, before snapshot %d's %d", tableStream, cur.Version, s.SnapshotID, s.SequenceNumber, s.TimestampMs, snaps[i-1].SnapshotID, snaps[i-1].TimestampMs)
		}
		if s.TimestampMs > cur.Metadata.LastUpdatedMillis() {
			mr.fail("table %s v%d: snapshot %d dated %d, after the metadata's last-updated-ms %d", tableStream, cur.Version, s.SnapshotID, s.TimestampMs, cur.Metadata.LastUpdatedMillis())
		}
	}
	st := mr.world.st()
	st.tableChecks++
	st.tableFiles, st.snapshots = len(in), len(snaps)
}

// clockStep steps the engine's wall clock (see the top).
func (mr *modelRun) clockStep() {
	st := mr.world.st()
	var d time.Duration
	switch x := mr.rng.IntN(10); {
	case x < 4:
		d = time.Duration(1+mr.rng.IntN(180)) * time.Minute
		st.clockForward++
	case x < 6:
		d = modelKeyWindow + time.Duration(mr.rng.IntN(72))*time.Hour
		st.clockForward++
		st.clockPastWindow++
	case x < 9:
		d = -time.Duration(1+mr.rng.IntN(360)) * time.Minute
		st.clockBack++
	default:
		d = -time.Duration(1+mr.rng.IntN(3)) * 24 * time.Hour
		st.clockBack++
		st.clockBackDays++
	}
	mr.setClock(mr.clock.Add(d))
	mr.note("clock stepped %v: %s", d, mr.clock.Format(time.RFC3339))
	if d > 0 && mr.crash == nil && mr.rng.IntN(2) == 0 {
		mr.expireAt()
	}
}

// expireAt runs the producer expiry at the engine's clock and checks whom
// it forgot: never a producer with batches not committed, never one
// active at or after the cutoff (clock minus the expiry); and, when the
// model knows a producer's activity exactly, every idle one before it.
// The forgotten come back as new incarnations (reincarnate).
func (mr *modelRun) expireAt() {
	st := mr.world.st()
	mr.world.notePrepares(mr.m, mr.clock)
	mr.sw.Set(nil)
	cutoff := mr.clock.Add(-modelProducerExpiry)
	n, err := mr.e.ExpireProducers(mr.clock)
	if err != nil {
		mr.fail("producer expiry at %s: %v", mr.clock, err)
	}
	st.expiryRuns++
	var gone []int
	for i, p := range mr.producers {
		if _, inited := mr.m.epoch[p]; !inited {
			continue
		}
		busy := false
		for k, next := range mr.m.next {
			busy = busy || k[0] == p && next != mr.m.prepared[k]
		}
		_, known := mr.e.Producer(wireID(p))
		t, exact := mr.world.touch[p], mr.world.touchExact[p]
		switch {
		case !known && busy:
			mr.fail("producer expiry at %s forgot %s, which has batches not committed", mr.clock, p)
		case !known && !t.Before(cutoff):
			mr.fail("producer expiry at %s (cutoff %s) forgot %s, active at %s or later", mr.clock, cutoff, p, t)
		case known && exact && !busy && t.Before(cutoff):
			mr.fail("producer expiry at %s (cutoff %s) kept %s, idle since %s with nothing uncommitted", mr.clock, cutoff, p, t)
		case known:
			st.expiryKept++
		default:
			gone = append(gone, i)
		}
	}
	if n != len(gone) {
		mr.fail("producer expiry at %s: forgot %d producers, the model sees %d gone", mr.clock, n, len(gone))
	}
	st.expiredByClock += n
	mr.note("producer expiry at %s: %d forgotten", mr.clock.Format(time.RFC3339), n)
	mr.reincarnate(gone, "expired at "+mr.clock.Format(time.RFC3339))
}

// retentionStep removes committed data as a retention job would (see the
// top), then writes into the same stream and commits.
func (mr *modelRun) retentionStep() {
	st := mr.world.st()
	mr.sw.Set(nil)
	mr.fullCheck() // every data file in place is committed
	var files []string
	err := afero.Walk(mr.base, rigDest, func(name string, fi os.FileInfo, err error) error {
		if name == rigDest && errors.Is(err, os.ErrNotExist) {
			return nil // no commit yet, and no lease document (modelLease)
		}
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(name, rigDest+"/")
		if fi.IsDir() {
			if strings.HasPrefix(rel, "_") || rel == tableStream {
				return filepath.SkipDir // not a plain stream's data
			}
			return nil
		}
		if _, _, _, _, ok := layout.ParsePartName(path.Base(rel)); ok {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		mr.fail("retention: walk: %v", err)
	}
	if len(files) == 0 {
		return
	}
	victim, gone, content := "", []string(nil), map[string][]byte(nil)
	for try := 0; victim == "" && try < 4; try++ {
		victim, gone, content = mr.retentionVictim(files, try == 0 && mr.rng.IntN(2) == 0)
	}
	if victim == "" {
		return
	}
	stream, _, _ := strings.Cut(victim, "/")
	for _, f := range gone {
		mr.r.checker.Removed(f, content[f])
	}
	if err := mr.base.RemoveAll(rigDest + "/" + victim); err != nil {
		mr.fail("retention: remove %s: %v", victim, err)
	}
	if err := durable.SyncDir(mr.base, path.Dir(rigDest+"/"+victim)); err != nil {
		mr.fail("retention: sync: %v", err)
	}
	st.retentions++
	st.removedFiles += len(gone)
	if victim != gone[0] {
		st.removedDirs++
	}
	mr.note("retention removed %s (%d files)", victim, len(gone))
	// Late data: batches of the same stream, committed.
	for range 1 + mr.rng.IntN(4) {
		p := mr.producers[mr.rng.IntN(len(mr.producers))]
		if _, inited := mr.m.epoch[p]; !inited {
			continue
		}
		if err := modelWrite(mr.t, mr.m, mr.e, mr.ans, p, stream, 1+mr.rng.IntN(3)); err != nil {
			mr.fail("retention: write %s after %s was removed: %v", stream, victim, err)
		}
		st.writesAfterRemoval++
	}
	commitAll(mr.t, mr.e, mr.m, "after a retention job removed "+victim, mr.fail)
	if mr.rng.IntN(2) == 0 {
		st.cutsAfterRemoval++
		mr.restart(true)
	}
	mr.fullCheck()
}

// retentionVictim picks what a retention job removes: a committed file
// (the newest when newest, most likely in the partition written now, else
// any), or its partition directory, or the one above; never the stream's
// own directory. It returns "" for a pick that holds a producer's newest
// committed batch on its stream: an old partition is removed, not one
// producers may still resend into (a store loss would rebuild next_seq
// below it: docs/nodes.md). gone lists the files it holds, content what
// each holds.
func (mr *modelRun) retentionVictim(files []string, newest bool) (victim string, gone []string, content map[string][]byte) {
	victim = files[mr.rng.IntN(len(files))]
	if newest {
		victim = slices.MaxFunc(files, func(a, b string) int {
			_, ca, _, _, _ := layout.ParsePartName(path.Base(a))
			_, cb, _, _, _ := layout.ParsePartName(path.Base(b))
			return cmp.Compare(ca, cb)
		})
	}
	for up := mr.rng.IntN(3); up > 0 && strings.Contains(path.Dir(victim), "/"); up-- {
		victim = path.Dir(victim)
	}
	content = map[string][]byte{}
	for _, f := range files {
		if f != victim && !strings.HasPrefix(f, victim+"/") {
			continue
		}
		data, err := afero.ReadFile(mr.base, rigDest+"/"+f)
		if err != nil {
			mr.fail("retention: read %s: %v", f, err)
		}
		bs, err := invariant.FileBatches(f, data)
		if err != nil {
			mr.fail("retention: read %s: %v", f, err)
		}
		for _, b := range bs {
			if b.Producer != "" && b.Seq == mr.m.prepared[[2]string{b.Producer, b.Stream}]-1 {
				mr.world.st().retentionsRefused++
				mr.note("retention: %s not removed, %s holds the newest committed batch %s", victim, f, b)
				return "", nil, nil
			}
		}
		content[f] = data
		gone = append(gone, f)
	}
	return victim, gone, content
}

// leaseRenewStep renews the node lease in the background, as its loop
// does every --lease-timeout/3 (the model's lease never expires, so the
// loop's timer never fires: the step kicks it), half the time with a
// fault injected into the lease document's write: a write, a sync or
// the rename of its temp file fails. A failed fsync stops the engine,
// as it does on the live path and in the replay (I14); the runs' next
// step restarts it.
func (mr *modelRun) leaseRenewStep() {
	st := mr.world.st()
	l := mr.e.lease
	if l == nil || mr.crash != nil {
		return
	}
	tmp := strings.ReplaceAll(layout.LeaseName(rigNode), "/", "_") // its temp file's name (committer/local)
	kind, faulty := faultfs.OpKind(0), mr.rng.IntN(2) == 0
	if faulty {
		kind = []faultfs.OpKind{faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename}[mr.rng.IntN(3)]
	}
	var fired, renamed atomic.Bool // the fault was hit; the temp file renamed in place
	mr.sw.Set(faultfs.InjectorFunc(func(op faultfs.Op) error {
		if !strings.Contains(op.Path, tmp) {
			return nil
		}
		if faulty && op.Kind == kind && fired.CompareAndSwap(false, true) {
			return syscall.EIO
		}
		if op.Kind == faultfs.OpRename {
			renamed.Store(true)
		}
		return nil
	}))
	select {
	case l.kick <- struct{}{}:
	default:
	}
	deadline := time.Now().Add(10 * time.Second)
	for !renamed.Load() && !fired.Load() && mr.e.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	l.mu.Lock() // the renewal holds it until it returns
	l.mu.Unlock()
	renewed := renamed.Load()
	st.leaseRenewals++
	switch {
	case !fired.Load() && !renewed && mr.e.Err() == nil:
		mr.fail("lease renewal kicked: not renewed in 10 s")
	case fired.Load() && kind == faultfs.OpSync:
		st.leaseSyncsFailed++
		for mr.e.Err() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(mr.e.Err(), durable.ErrSync) {
			mr.fail("lease renewal: a failed fsync of the lease document did not stop the engine (I14): engine error %v", mr.e.Err())
		}
	case fired.Load():
		st.leaseFaults++
	}
	mr.sw.Set(nil)
	mr.note("lease renewal (fault on %v %v: %v): engine error %v", faulty, kind, fired.Load(), mr.e.Err())
}

// plantStreamDoc plants, under _streams/, a document for the table
// stream tb newer than the store's configuration and a change PUT
// refuses (a required column dropped, or no longer a table), as another
// writer of the bucket or a diverged node could; then the node restarts.
// The start must keep the store's configuration in force: believed, the
// planted one wedges the stream (PUT can't undo it) or leaves its next
// files out of its table. Then the stream's own document is put back.
func (mr *modelRun) plantStreamDoc() {
	mr.sw.Set(nil)
	have := mr.e.Stream(tableStream).Config
	name := rigDest + "/" + layout.StreamConfName(tableStream)
	orig, err := afero.ReadFile(mr.base, name)
	if err != nil && !os.IsNotExist(err) {
		mr.fail("read %s: %v", name, err)
	}
	planted := have
	how := "no table"
	if mr.rng.IntN(2) == 0 {
		how = "a column dropped"
		planted.Schema = &streamconf.Schema{Fields: slices.Clone(have.Schema.Fields[:len(have.Schema.Fields)-1])}
	} else {
		planted.Table, planted.KeepSnapshots = streamconf.TableNone, 0 // keep_snapshots is a table's only
	}
	planted.Version = have.Version + 1 + int64(mr.rng.IntN(5))
	data, err := json.Marshal(recovery.StreamConfig{Stream: tableStream, Config: planted, UpdatedAt: mr.clock})
	if err != nil {
		mr.fail("plant stream document: %v", err)
	}
	if err := durable.ReplaceFile(mr.base, name+".plant", name, data); err != nil {
		mr.fail("plant stream document: %v", err)
	}
	mr.world.st().streamDocsPlanted++
	mr.note("planted %s: %s, version %d (the store's %d)", name, how, planted.Version, have.Version)
	mr.restart(false)
	if got := mr.e.Stream(tableStream).Config; got.Version != have.Version || !got.IsTable() || len(got.Schema.Fields) != len(have.Schema.Fields) {
		mr.fail("a planted %s document (%s, version %d) put in force: version %d, table %v, %d fields; want the store's version %d", tableStream, how, planted.Version, got.Version, got.IsTable(), len(got.Schema.Fields), have.Version)
	}
	if orig == nil {
		err = mr.base.Remove(name)
		if err == nil {
			err = durable.SyncDir(mr.base, path.Dir(name))
		}
	} else {
		err = durable.ReplaceFile(mr.base, name+".plant", name, orig)
	}
	if err != nil {
		mr.fail("put back %s: %v", name, err)
	}
}
