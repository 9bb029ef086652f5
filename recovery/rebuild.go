package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"golang.org/x/sync/semaphore"
)

// Rebuilt is what the destination says about a node whose state store was
// lost or is older than its manifests (recovery step 5).
type Rebuilt struct {
	Manifests int    // manifests believed
	Highest   uint64 // the highest checkpoint id among them
	// Newest is the believed manifest with the highest id (nil: none).
	// Its table commits may be missing, since a checkpoint's table commit
	// follows its manifest; so may a parked stream's, which are among its
	// newest manifests (Recent).
	Newest *layout.Manifest
	// Recent holds, per stream, its Parquet files (the ones a table
	// takes) in the newest RecentPerStream believed manifests naming it,
	// oldest first: a parked table commit (Parked) is one of them, since
	// a parked stream's writes are refused until its rows are gone.
	Recent map[string][]RecentFiles
	// Parked, set by the caller, are table commits to park: Restore
	// records them with the producers.
	Parked []Parked
	// Skipped counts the manifests not believed: not parsed, beyond the
	// ids this node reserved, or naming no file the destination holds
	// with its size. Each is logged.
	Skipped int
	// FilesGone counts the files of believed manifests that the
	// destination does not hold with their size (a retention job removed
	// them): their ranges are not counted. Each is logged.
	FilesGone int
	// Producers holds, per producer, its newest incarnation's committed
	// sequence numbers per stream and the highest epoch seen.
	Producers map[string]*RebuiltProducer
	// MaxEpoch is the highest epoch any believed manifest records.
	MaxEpoch int64
	// Quarantine holds the part files of node, with ids after its newest
	// manifest and within the limit, whose checkpoint has no manifest at all: files a commit renamed into place
	// before its state store was lost, whose manifest was never published.
	// No client was told they committed, and the rebuild cannot name
	// their producers' sequence numbers, so the clients resend them: the
	// caller moves them aside (layout.QuarantineName) so that the destination
	// holds each batch once. Sorted by path.
	Quarantine []string
	// UnnamedHighest is the highest checkpoint id after the newest
	// manifest and within the limit that a name of a part file of node
	// shows anywhere (Quarantine's, set aside already, left in place):
	// ids were handed out up to it (UnnamedParts), so a start continues
	// beyond it (I8).
	UnnamedHighest uint64
	// Forgotten are the node's forgotten-producers documents, set by the
	// caller that applies them after Restore (Store.ApplyForgotten):
	// Restore does not create a producer the store lacks that they would
	// then forget. The outcome is the same; the store's file never holds
	// them (bbolt does not give pages back), so its size follows the
	// producers kept, not every one the manifests ever named (I11).
	Forgotten []*layout.Forgotten
}

// RebuiltProducer is one producer as the manifests show it.
type RebuiltProducer struct {
	// Incarnation is the newest incarnation seen (the epoch it was born
	// at, committer.ProducerEpoch); manifests written before epochs were
	// kept count as incarnation 0. -1: unknown, the store's is taken.
	Incarnation int64
	// Epoch is the highest epoch recorded for it, over every incarnation:
	// it is restored at least there, so a fenced client stays fenced (I6).
	Epoch int64
	// Streams holds, per stream, the highest sequence number the newest
	// incarnation committed and the checkpoint that committed it.
	Streams map[string]StreamSeq
}

// RecentFiles is one checkpoint's Parquet files of one stream, from its
// manifest (Rebuilt.Recent).
type RecentFiles struct {
	Checkpoint uint64
	Manifest   string
	Files      []layout.ManifestFile
}

// RecentPerStream is how many of a stream's newest manifests
// Rebuilt.Recent keeps. A stream has at most two parked table commits
// (the one that parked it and the checkpoint open then: its writes are
// refused from then on), and they are its newest manifests.
const RecentPerStream = 2

// rebuildLogEvery is how often a long rebuild logs its progress.
const rebuildLogEvery = 5 * time.Second

// maxSkipLogged bounds the skipped manifests logged one by one.
const maxSkipLogged = 100

// Rebuild reads every manifest of node in the destination and returns each
// producer's committed sequence numbers per stream: for its newest
// incarnation, the highest last sequence number of its ranges across the
// manifests (sequence numbers of a producer on a stream are committed in
// order, so everything up to it is committed). It costs one read per
// manifest and one listing per stream, so recovery runs it only when the
// store is behind the destination.
//
// What the destination holds is checked before it is believed (DESIGN
// "Several nodes"): a manifest that does not parse, or whose id is beyond
// limit (the highest id this node reserved, 0: unknown), is skipped and
// logged; so is each file it names that the destination does not hold
// with the size it states, and the manifest when it names no file that
// is — never a reason to call a batch committed. A file gone is passed
// over on its own, not with its manifest: a retention job removes old
// partitions (docs/production.md), and a checkpoint's other files are
// still committed data, which its clients would otherwise resend and
// the destination hold twice (TestRebuildAfterRetention).
//
// What it cannot recover: batches accepted but not committed (they were
// never in a manifest), epochs handed out after a producer's last
// committed checkpoint, sequence numbers accepted but not committed, a
// producer forgotten and created again before manifests kept epochs (both
// count as one), and idempotency keys.
func Rebuild(ctx context.Context, r committer.Reader, node string, limit uint64, log *slog.Logger) (*Rebuilt, error) {
	return rebuild(ctx, r, node, limit, log, rebuildReaders)
}

// rebuildReaders is how many manifests the rebuild reads at once. A
// read is one GET on S3 (milliseconds each, on a cloud tens): a year of
// ten-second checkpoints is 3 M manifests, hours read one at a time
// (BENCHMARKS.md "Growth").
const rebuildReaders = 16

// rebuildWindow is how many manifests the rebuild holds read ahead of
// the one it takes in: they are taken in in name order whatever order
// their reads end in, so that what it logs and keeps does not depend on
// the reads' timing; its memory is bounded by the window (a manifest is
// ~10 KB).
const rebuildWindow = 8 * rebuildReaders

// rebuildBytes bounds the bytes of the manifests the rebuild reads or
// holds at once, as the listing states them: a manifest may be up to
// layout.MaxManifest (1 GiB, planted ones too), and 16 read at once and
// 128 held would be that many times it. One larger than the budget is
// read alone.
const rebuildBytes = 64 << 20

func rebuild(ctx context.Context, r committer.Reader, node string, limit uint64, log *slog.Logger, readers int) (*Rebuilt, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := path.Dir(layout.ManifestName(node, 0)) + "/"
	entries, err := r.List(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("rebuild from destination: list manifests: %w", err)
	}
	out := &Rebuilt{Producers: map[string]*RebuiltProducer{}, Recent: map[string][]RecentFiles{}}
	skip := func(name, why string, err error) {
		out.Skipped++
		if out.Skipped <= maxSkipLogged {
			log.Error("manifest not believed: skipped by the rebuild", "op", "rebuild", "path", name, "why", why, "err", err)
		}
	}
	var todo []string
	var sizes []int64
	published := map[uint64]bool{} // ids with a manifest name, believed or not
	for _, en := range entries {
		n, id, ok := layout.ParseManifestName(en.Path)
		if ok && n == node {
			published[id] = true
		}
		switch {
		case layout.IsTempName(en.Path):
			// A publish a crash cut short: never a manifest.
		case !ok:
			skip(en.Path, "not a manifest name", nil)
		case n != node:
			// Another node's, under this node's prefix: not ours to read.
			skip(en.Path, "another node's manifest", nil)
		case limit > 0 && id > limit:
			skip(en.Path, fmt.Sprintf("beyond the highest checkpoint id this node reserved (%d): not written by it", limit), nil)
		default:
			todo = append(todo, en.Path)
			sizes = append(sizes, en.Bytes)
		}
	}
	// Per producer and incarnation, each stream's highest committed seq.
	type prod struct {
		epoch int64
		incs  map[int64]map[string]StreamSeq
	}
	seen := map[string]*prod{}
	files := fileSizes{r: r, by: map[string]map[string]int64{}}
	begin, logged := time.Now(), time.Now()
	reads := readAhead(ctx, r, todo, sizes, readers)
	defer reads.stop()
	for i, name := range todo {
		m, err := reads.next()
		if errors.Is(err, layout.ErrBadManifest) {
			skip(name, "does not parse", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rebuild from destination: %s: %w", name, err)
		}
		held, gone, err := files.check(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("rebuild from destination: %s: %w", name, err)
		}
		if len(held) == 0 && len(gone) > 0 {
			skip(name, gone[0], nil)
			continue
		}
		for _, why := range gone {
			out.FilesGone++
			if out.FilesGone <= maxSkipLogged {
				log.Warn("a file of a manifest is not in the destination as the manifest states (removed by a retention job?): its batches are not counted committed", "op", "rebuild", "path", name, "why", why)
			}
		}
		m.Files = held
		out.Manifests++
		if out.Newest == nil || m.Checkpoint > out.Highest {
			out.Newest = m
		}
		out.Highest = max(out.Highest, m.Checkpoint)
		out.noteRecent(m)
		for _, f := range m.Files {
			for p, ranges := range f.Producers {
				ep := f.Epochs[p] // zero for manifests without epochs: incarnation 0
				pr := seen[p]
				if pr == nil {
					pr = &prod{incs: map[int64]map[string]StreamSeq{}}
					seen[p] = pr
				}
				pr.epoch = max(pr.epoch, ep.Epoch)
				out.MaxEpoch = max(out.MaxEpoch, ep.Epoch)
				streams := pr.incs[ep.Incarnation]
				if streams == nil {
					streams = map[string]StreamSeq{}
					pr.incs[ep.Incarnation] = streams
				}
				for _, rg := range ranges {
					cur, ok := streams[f.Stream]
					if !ok || rg[1] > cur.CommittedSeq {
						streams[f.Stream] = StreamSeq{NextSeq: rg[1] + 1, CommittedSeq: rg[1], CommittedIn: m.Checkpoint}
					}
				}
			}
		}
		if time.Since(logged) >= rebuildLogEvery {
			logged = time.Now()
			log.Info("rebuilding from the destination's manifests", "op", "rebuild", "read", i+1, "of", len(todo),
				"producers", len(seen), "elapsed_ms", time.Since(begin).Milliseconds())
		}
	}
	for p, pr := range seen {
		newest := int64(-1)
		for inc := range pr.incs {
			newest = max(newest, inc)
		}
		out.Producers[p] = &RebuiltProducer{Incarnation: newest, Epoch: pr.epoch, Streams: pr.incs[newest]}
	}
	// Checkpoints commit one at a time, each publishing its manifest
	// before the next renames a file: only one after the newest manifest
	// can be half-committed. A part file of an older checkpoint without a
	// manifest is committed data whose manifest went missing (I7: left
	// where it is, for eosink verify to report).
	var newest uint64
	for id := range published {
		if limit == 0 || id <= limit {
			newest = max(newest, id)
		}
	}
	if out.Quarantine, out.UnnamedHighest, err = unnamedParts(ctx, r, node, newest, limit, published); err != nil {
		return nil, fmt.Errorf("rebuild from destination: %w", err)
	}
	return out, nil
}

// manifestReads reads names' manifests, readers at a time, at most
// rebuildWindow ahead of the one taken and rebuildBytes of them at once,
// and hands them out in order (next). Its memory is the window's and the
// budget's, whatever the number of names.
type manifestReads struct {
	ctx     context.Context
	window  chan struct{}
	bytes   *semaphore.Weighted
	weights []int64
	cancel  context.CancelFunc
	done    sync.WaitGroup
	out     []chan manifestRead
	took    int
}

type manifestRead struct {
	m   *layout.Manifest
	err error
}

func readAhead(ctx context.Context, r committer.Reader, names []string, sizes []int64, readers int) *manifestReads {
	ctx, cancel := context.WithCancel(ctx)
	// A slot per read not yet taken: read i goes to out[i%len(out)], free
	// once read i-len(out) was taken, which the window ensures.
	window := make(chan struct{}, max(rebuildWindow, readers))
	// Each read weighs its listed bytes, at most the whole budget: the
	// reads before it are taken in order and give theirs back, so it
	// always gets its turn.
	weights := make([]int64, len(names))
	for i := range weights {
		weights[i] = max(1, min(sizes[i], rebuildBytes))
	}
	mr := &manifestReads{ctx: ctx, window: window, bytes: semaphore.NewWeighted(rebuildBytes), weights: weights,
		cancel: cancel, out: make([]chan manifestRead, cap(window))}
	for i := range mr.out {
		mr.out[i] = make(chan manifestRead, 1)
	}
	work := make(chan int)
	mr.done.Add(readers + 1)
	go func() {
		defer mr.done.Done()
		defer close(work)
		for i := range names {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if mr.bytes.Acquire(ctx, weights[i]) != nil {
				return
			}
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range readers {
		go func() {
			defer mr.done.Done()
			for i := range work {
				m, err := layout.ReadManifest(ctx, r, names[i])
				mr.out[i%len(mr.out)] <- manifestRead{m, err}
			}
		}()
	}
	return mr
}

// next returns the next manifest in order, or the error its read ended
// in, or the context's error once it ends: then the read it waits for
// may never be started (readAhead hands out no more work), and a Reader
// that does not watch the context ends the reads started well.
func (mr *manifestReads) next() (*layout.Manifest, error) {
	var res manifestRead
	select {
	case res = <-mr.out[mr.took%len(mr.out)]:
	case <-mr.ctx.Done():
		return nil, mr.ctx.Err()
	}
	mr.bytes.Release(mr.weights[mr.took])
	mr.took++
	<-mr.window
	return res.m, res.err
}

// stop ends the reads still running and waits for them.
func (mr *manifestReads) stop() {
	mr.cancel()
	mr.done.Wait()
}

// noteRecent keeps m's Parquet files in Recent for each stream they are
// of, dropping the stream's oldest beyond RecentPerStream.
func (out *Rebuilt) noteRecent(m *layout.Manifest) {
	by := map[string][]layout.ManifestFile{}
	for _, f := range m.Files {
		if f.Format == streamconf.FormatParquet {
			by[f.Stream] = append(by[f.Stream], f)
		}
	}
	for s, fs := range by {
		r := append(out.Recent[s], RecentFiles{Checkpoint: m.Checkpoint, Manifest: m.Name(), Files: fs})
		sort.Slice(r, func(i, j int) bool { return r[i].Checkpoint < r[j].Checkpoint })
		if len(r) > RecentPerStream {
			r = r[len(r)-RecentPerStream:]
		}
		out.Recent[s] = r
	}
}

// UnnamedParts returns the destination's part files of node with
// checkpoint ids after after and within limit (0: no limit), sorted by
// path: what a commit a crash cut short placed before its manifest when
// the caller knows every manifest id is at most after. A start whose new
// state store and node lease tell nothing of this node's ids asks it (the
// rebuild, which reads the manifests, finds them itself when there are
// some: Rebuilt.Quarantine). It also returns the highest id, after after
// and within limit, that any name of a part file of node shows, wherever
// it is: besides those returned, files of table streams and displaced
// files (left where they are) and files set aside already (a start that
// moved them and stopped, or whose move was made but reported failed,
// before the store and the lease reserved ids). Each id was handed out
// by a former incarnation: none is reused (I8). It lists the whole
// destination once, a page at a time where the destination can
// (committer.Pager), keeping only node's names.
func UnnamedParts(ctx context.Context, r committer.Reader, node string, after, limit uint64) ([]string, uint64, error) {
	return unnamedParts(ctx, r, node, after, limit, nil)
}

// unnamedParts lists the destination's part files of node whose checkpoint has
// no manifest name in published, after the newest one and within limit
// (ids beyond it were not written by node). Files under eosink's own
// folders, displaced files and temp names are not looked at. It lists the
// whole destination once: the rebuild runs only when the store was lost or
// is behind. highest is the highest id after newest and within limit that
// a name of a part file of node shows anywhere (UnnamedParts).
func unnamedParts(ctx context.Context, r committer.Reader, node string, newest, limit uint64, published map[uint64]bool) (out []string, highest uint64, err error) {
	// A table commit follows its checkpoint's manifest, so no snapshot
	// names the files of a checkpoint without one; but versions before
	// that order committed the table first, and a snapshot of theirs may
	// name such files: moved, they would leave the table naming missing
	// files. Table streams' files stay where they are (eosink verify
	// reports them).
	tables := map[string]bool{}
	var found []string
	err = eachEntry(ctx, r, func(en committer.Entry) {
		if layout.IsTableMetadata(en.Path) {
			stream, _, _ := strings.Cut(en.Path, "/")
			tables[stream] = true
			return
		}
		n, id, _, _, ok := layout.ParsePartName(path.Base(en.Path))
		if !ok || n != node || id <= newest || (limit > 0 && id > limit) {
			return
		}
		highest = max(highest, id)
		if strings.HasPrefix(en.Path, "_") || layout.IsTempName(en.Path) || published[id] {
			return
		}
		if _, _, ok := layout.ParseDisplacedName(en.Path); ok {
			return
		}
		if pn := layout.ParsePath(en.Path); pn.Kind == layout.PartPath {
			found = append(found, en.Path)
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list destination: %w", err)
	}
	for _, p := range found {
		if stream, _, _ := strings.Cut(p, "/"); !tables[stream] {
			out = append(out, p)
		}
	}
	return out, highest, nil
}

// eachEntry calls fn with each file of the destination in path order, a
// page at a time when r lists by pages, so that what a listing of a bucket
// of millions of objects holds at once is a page, not the bucket.
func eachEntry(ctx context.Context, r committer.Reader, fn func(committer.Entry)) error {
	pg, ok := r.(committer.Pager)
	if !ok {
		all, err := r.List(ctx, "")
		if err != nil {
			return err
		}
		for _, en := range all {
			fn(en)
		}
		return nil
	}
	after := ""
	for {
		page, err := pg.ListPage(ctx, "", after, listPage)
		if err != nil {
			return err
		}
		for _, en := range page {
			fn(en)
		}
		if len(page) < listPage {
			return nil
		}
		after = page[len(page)-1].Path
	}
}

// listPage is how many files a page of eachEntry holds: an S3 listing's
// most keys a request.
const listPage = 1000

// fileSizes answers whether the destination holds a file with a size,
// listing each stream's folder once.
type fileSizes struct {
	r  committer.Reader
	by map[string]map[string]int64 // stream -> path -> bytes
}

// check sorts m's files into those the destination holds with the size m
// states, and why each other one is not believed: missing, or of another
// size.
func (s *fileSizes) check(ctx context.Context, m *layout.Manifest) (held []layout.ManifestFile, gone []string, err error) {
	for _, f := range m.Files {
		sizes, ok := s.by[f.Stream]
		if !ok {
			entries, err := s.r.List(ctx, f.Stream+"/")
			if err != nil {
				return nil, nil, fmt.Errorf("list stream %s: %w", f.Stream, err)
			}
			sizes = make(map[string]int64, len(entries))
			for _, en := range entries {
				sizes[en.Path] = en.Bytes
			}
			s.by[f.Stream] = sizes
		}
		switch got, ok := sizes[f.Path]; {
		case !ok:
			gone = append(gone, fmt.Sprintf("names %s, which the destination does not hold", f.Path))
		case got != f.Bytes:
			gone = append(gone, fmt.Sprintf("names %s of %d bytes, which holds %d", f.Path, f.Bytes, got))
		default:
			held = append(held, f)
		}
	}
	return held, gone, nil
}

// FinishTables finishes the table commit of m, a manifest of the node
// whose table commit a state store lost between the manifest and the
// table commit left undone, all its streams in one call, parking none
// (the server's rebuild goes stream by stream over Rebuilt.Recent and
// parks what fails for good): its files of
// table streams (isTable: the stream's configuration in force makes it
// a table) are committed with tables as the manifest's checkpoint. The
// table commit is idempotent: a table that holds the checkpoint already
// is success, as in the replay (table.Iceberg's Bound rules what counts).
func FinishTables(ctx context.Context, tables Tables, m *layout.Manifest, isTable func(stream string) bool) error {
	if tables == nil || m == nil {
		return nil
	}
	files := ManifestTableFiles(m, isTable)
	if len(files) == 0 {
		return nil
	}
	if err := tables.Commit(ctx, m.Node, m.Checkpoint, files); err != nil {
		return fmt.Errorf("finish the table commit of checkpoint %d (manifest %s): %w", m.Checkpoint, m.Name(), err)
	}
	return nil
}

// ManifestTableFiles returns m's files of table streams (isTable) as the
// table commit takes them: final name, counts, format and, for a
// displaced file, the name it was prepared with (its partition path).
// Files not in Parquet are left out: a table holds Parquet files only.
func ManifestTableFiles(m *layout.Manifest, isTable func(stream string) bool) []committer.File {
	var out []committer.File
	for _, f := range m.Files {
		if f.Format != streamconf.FormatParquet || !isTable(f.Stream) {
			continue
		}
		out = append(out, committer.File{Stream: f.Stream, Final: f.Path, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C,
			Format: f.Format, Compression: f.Compression, SchemaVersion: f.SchemaVersion,
			Table: streamconf.TableIceberg, DisplacedFrom: f.DisplacedFrom})
	}
	return out
}
