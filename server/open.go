package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
	"golang.org/x/sync/errgroup"
)

// Opening the engine and the recovery on every start.

// Open opens the state store and starts recovery in the background. A
// corrupt store is an error here, naming the file: eosink refuses to start.
// Writes are refused with ErrNotReady until Ready is closed.
func Open(cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Node == "" || cfg.FS == nil || cfg.StagingDir == "" || cfg.StorePath == "" || cfg.Committer == nil || cfg.Publisher == nil {
		return nil, errors.New("open engine: node, fs, staging dir, store path, committer and publisher are required")
	}
	if !layout.Node(cfg.Node) {
		return nil, fmt.Errorf("open engine: node id %q: want ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", cfg.Node)
	}
	if err := durable.MkdirAll(cfg.FS, cfg.StagingDir); err != nil {
		return nil, fmt.Errorf("open engine: %w", err)
	}
	st, err := recovery.OpenWith(cfg.StorePath, cfg.StoreOptions)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg: cfg, log: cfg.Logger, store: st,
		fin: recovery.Finisher{Store: st, Committer: cfg.Committer, Publisher: cfg.Publisher, Node: cfg.Node, Retain: cfg.Retain, Parallel: cfg.Parallel},
	}
	e.ing.e, e.ing.cur, e.ing.prods, e.ing.outcomes = e, map[staging.Key]*openTxn{}, newProducerTable(st), map[uint64]*outcome{}
	e.pipe.e = e
	e.life.e, e.life.cancel, e.life.closing, e.life.done = e, cancel, ctx.Done(), make(chan struct{})
	e.life.reqs, e.life.kick, e.life.soon, e.life.ready = make(chan chan ckptReply), make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	e.life.parkKick, e.life.doomKick = make(chan struct{}, 1), make(chan struct{}, 1)
	e.health.e, e.health.failed, e.health.recovering = e, make(chan struct{}), "starting"
	if err := e.ing.loadStreams(); err != nil { // streams.go
		cancel()
		_ = st.Close() // refusing to start; the load error is the one to report
		return nil, err
	}
	e.pol = policy{min: cfg.RetryMin, max: cfg.RetryMax, stop: e.health.fail}
	if _, remote := cfg.Committer.(committer.RemotePreparer); !remote {
		// An S3 upload is bound to its key at Prepare: only a local
		// destination can commit a file under another name.
		e.fin.Displace = e.health.displace
	}
	e.fin.Lost, e.fin.Gone = e.health.lostFile, e.health.noteLost
	if d, ok := cfg.Publisher.(table.Dest); ok && cfg.TableLocation != "" {
		e.fin.Tables = &table.Iceberg{Dest: d, Location: strings.TrimSuffix(cfg.TableLocation, "/"), Now: cfg.Now, Log: cfg.Logger,
			Bound:      e.life.tableBound.Load,
			PassedOver: func(string, table.Skip) { e.health.passedOver.Add(1) },
			Config: func(stream string) (streamconf.Config, bool) {
				sc := e.ing.confFor(stream)
				return sc.cfg, sc != defaultConf
			}}
		e.fin.Park, e.fin.Parked = parkTable, e.life.noteParked
	}
	e.health.publishLocked()
	if e.lease = newLease(&cfg); e.lease != nil {
		e.fin.Fence = e.life.leaseCheck
	}
	go func() {
		defer close(e.life.done)
		e.life.Run(ctx)
	}()
	return e, nil
}

// Ready is closed once recovery has finished and writes are accepted.
func (e *Engine) Ready() <-chan struct{} { return e.life.ready }

// Failed is closed when the engine stopped after an error it must not
// paper over (a failed fsync after "prepared", an unwritable state store).
// The owner should Close it and open a new one, which recovers.
func (e *Engine) Failed() <-chan struct{} { return e.health.failed }

// Err returns the error that stopped the engine, if any.
func (e *Engine) Err() error {
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	return e.health.failErr
}

// WaitReady waits for recovery to finish.
func (e *Engine) WaitReady(ctx context.Context) error {
	select {
	case <-e.life.ready:
		return nil
	case <-e.health.failed:
		return e.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run starts the engine — lease, stream configurations, replay, id
// reservation, ready — then runs the coordinator loop until ctx ends or
// the engine fails, with lease renewal, the orphan sweep and the producer
// expiry beside it in one errgroup. It returns once all of them have.
func (lc *lifecycle) Run(ctx context.Context) {
	var g errgroup.Group
	defer func() { _ = g.Wait() }() // the loops report through health, not errors
	if !lc.takeLease(ctx) {
		return
	}
	if lc.e.lease != nil {
		g.Go(func() error { lc.renewLoop(ctx); return nil })
	}
	if !lc.syncStreams(ctx) || !lc.recover(ctx) { // syncStreams: streamstore.go
		return
	}
	_, remote := lc.e.cfg.Committer.(committer.RemotePreparer)
	_, sweeper := lc.e.cfg.Committer.(committer.Sweeper)
	if (remote || sweeper) && lc.e.cfg.SweepInterval > 0 {
		g.Go(func() error { lc.sweepLoop(ctx); return nil })
	}
	if lc.e.cfg.ProducerExpiry > 0 {
		g.Go(func() error { lc.expireLoop(ctx); return nil })
	}
	if lc.e.cfg.ForgottenCompactInterval > 0 {
		g.Go(func() error { lc.compactLoop(ctx, lc.e.cfg.ForgottenCompactInterval); return nil })
	}
	if lc.e.fin.Tables != nil {
		g.Go(func() error { lc.parkLoop(ctx); return nil })
	}
	g.Go(func() error { lc.doomLoop(ctx); return nil })
	lc.run(ctx)
}

// recover replays the store until it succeeds or the engine closes, then
// opens the first checkpoint and reports ready (DESIGN "Recovery").
func (lc *lifecycle) recover(ctx context.Context) bool {
	begin := time.Now()
	res, inDest, believed, rebuilt, ok := lc.replay(ctx)
	if !ok {
		return false
	}
	open := lc.firstOpenID(res.LastID, inDest, believed)
	lc.dropImplausibleMark(max(res.LastID, inDest)) // lease.go
	reserved := open + lc.e.cfg.idBlock - 1
	shown := func(err error) string { return "reserve checkpoint ids: " + err.Error() }
	if !lc.retry(ctx, "reserve checkpoint ids", shown, func() error { return lc.e.store.Reserve(reserved) }) {
		return false
	}
	if !lc.retry(ctx, "record reserved checkpoint ids in the node lease", nil, func() error {
		err := lc.leaseReserve(ctx, reserved)
		if errors.Is(err, ErrLeaseLost) {
			return errStop
		}
		return err
	}) {
		return false
	}
	// Stores written before committed_in was kept: name the newest
	// committed checkpoint instead, never a reserved or aborted id.
	var newest uint64
	if !lc.retry(ctx, "read newest committed checkpoint", nil, func() (err error) {
		newest, err = lc.e.store.NewestCommitted()
		return err
	}) {
		return false
	}
	// The key of the forgotten-producers documents this node publishes
	// from now on (layout.ForgottenSeal): made once, after the replay
	// applied every document there is. Unsealed documents are believed
	// only at or below newest-2, which every later start whose store
	// kept up (and holds this key) skips anyway: not up to open-1, far
	// beyond newest after an upgrade, where a planted document would be
	// believed until two more commits. A store with no commit (new, or
	// rebuilt: it commits nothing until the node does) is made a key for
	// open-2, so that once it commits the compaction merges the documents
	// a lost store's key sealed; until then its seal checks after its
	// newest commit, or the one a rebuild went through, minus 2
	// (recovery.Store.ForgottenSeal).
	//
	// After a rebuild, the same transaction records the newest commit it
	// went through (rebuilt): from then on a start over this store is one
	// whose store kept up (it checks seals), not another rebuild, which
	// would believe every document, a planted one too. It is the start's
	// last write: a crash before it leaves a store that the next start
	// rebuilds again, whatever of the rebuild (the producers restored,
	// the forgets applied, files set aside, ids reserved) was done.
	since := max(newest, 2) - 2
	if newest == 0 {
		since = max(open, 2) - 2
	}
	sealShown := func(err error) string { return "make the forgotten-producers seal: " + err.Error() }
	if !lc.retry(ctx, "make the forgotten-producers seal", sealShown, func() (err error) {
		lc.seal, err = lc.e.store.MakeForgottenSeal(since, rebuilt)
		return err
	}) {
		return false
	}
	var keys []recovery.Key
	if !lc.retry(ctx, "read idempotency keys", nil, func() (err error) {
		keys, err = lc.e.store.Keys(lc.e.cfg.Now().Add(-lc.e.cfg.IdempotencyWindow))
		return err
	}) {
		return false
	}
	// Table streams whose table commit is parked (the replay may have
	// parked more): their writes are refused from the first.
	if !lc.retry(ctx, "read parked table commits", nil, lc.syncParked) {
		return false
	}
	lc.tableBound.Store(0) // commits are serial from here on
	lc.e.ing.recount()     // before ready: an init's producer limit reads it
	lc.e.ing.mu.Lock()
	lc.e.pipe.reserved.Store(reserved)
	lc.e.ing.keyLoadLocked(keys)
	lc.e.ing.prods.legacyIn = newest
	lc.e.ing.openID = open
	lc.e.ing.lastDone = newest // ids between it and firstID the store lacks were never used
	lc.e.ing.firstID = open
	lc.e.ing.outcomes[lc.e.ing.openID] = newOutcome()
	lc.e.ing.isReady = true
	lc.e.health.recovering, lc.e.health.diskFull = "", nil
	lc.e.health.publishLocked()
	// Ready is one fact: the flag writes see, the snapshot /readyz reads and
	// the channel checkpoints wait on change under one lock, so no request
	// sees one without the other.
	close(lc.ready)
	lc.e.ing.mu.Unlock()
	lc.countOrphans(recovery.SweepResult{Intents: res.Aborted, Removed: res.Orphans})
	lc.e.log.Info("recovery done", "recommitted", len(res.Recommitted), "removed", len(res.Removed),
		"aborted_uploads", len(res.Aborted), "orphans", len(res.Orphans), "producers", lc.e.ProducerCount(),
		"checkpoint", open, "duration_ms", time.Since(begin).Milliseconds())
	return true
}

// retry runs fn under the failure policy until it succeeds, and reports
// whether it did. It gives up when the engine closes or the policy stops
// it. With shown, the error shows (as shown words it) in Status as why
// recovery is not done.
func (lc *lifecycle) retry(ctx context.Context, what string, shown func(error) string, fn func() error) bool {
	return lc.e.pol.retry(ctx, fn, func(f failure) {
		if shown != nil {
			lc.e.health.noteDiskFull(f.err)
			lc.e.ing.mu.Lock()
			lc.e.health.recovering = shown(f.err)
			lc.e.health.publishLocked()
			lc.e.ing.mu.Unlock()
		}
		if f.planned {
			lc.e.log.Debug(what+", waiting", "err", f.err)
			return
		}
		lc.e.log.Error(what+", retrying", "err", f.err, "attempt", f.attempt, "verdict", f.verdict)
	}) == nil
}

// replay runs the recovery replay (recovery.Replay) and, when the store is
// behind the destination, rebuilds the producers from it (step 5). It
// returns the replay's result, the highest manifest id found that
// recovery must continue after, the highest id of a manifest of this
// node the rebuild believed (0: none, or no rebuild), and the newest
// checkpoint the rebuild went through, for the store to record once the
// start is done (0: no rebuild).
//
// The store is behind when the destination holds a manifest of this node
// newer than the store's newest committed checkpoint: every manifest is
// published after its "prepared" record, and the replay has just
// committed every prepared checkpoint, so a store that kept up has
// committed every manifest's id. That holds for a lost store and for an
// older copy of it alike, however many checkpoints ago it was taken. A
// manifest counts when the rebuild would believe it (believedNewer), not
// for its name alone: a rebuild believes every forgotten-producers
// document, so a planted name must not make a store that kept up rebuild.
// A store rebuilt from the manifests counts the newest one the rebuild
// went through as committed (recovery.Store.RebuiltThrough): it reflects
// every manifest up to it and every forget there was, though it commits
// nothing until the node does. A copy of it put back after the node
// committed more is behind all the same; one put back after the node
// only reserved more ids shows in the lease (below).
func (lc *lifecycle) replay(ctx context.Context) (*recovery.Result, uint64, uint64, uint64, bool) {
	rp := recovery.Replay{Finisher: lc.e.fin, FS: lc.e.cfg.FS, StagingDir: lc.e.cfg.StagingDir, Logger: lc.e.log}
	var res *recovery.Result
	var top, believed, rebuilt uint64
	ok := lc.retry(ctx, "recovery failed", error.Error, func() error {
		believed, rebuilt = 0, 0
		last, err := lc.e.store.LastID()
		if err != nil {
			return err
		}
		lc.tableBound.Store(lc.manifestLimit(last)) // as planted manifests: not beyond reserved ids
		if res, err = rp.Run(ctx); err != nil {
			return err
		}
		newest, err := lc.e.store.NewestCommitted()
		if err != nil {
			return err
		}
		through, err := lc.e.store.RebuiltThrough()
		if err != nil {
			return err
		}
		kept := max(newest, through) // what the store reflects of the destination
		limit := lc.manifestLimit(res.LastID)
		ours, err := lc.highestManifestID(ctx, limit, kept)
		if err != nil {
			return err
		}
		top = ours.top
		behind, unheld, err := lc.believedNewer(ctx, ours.newer)
		if err != nil {
			return err
		}
		// Forgets the store may not reflect (it is older, or rebuilt from
		// manifests, which do not show them): forgotten.go. A rebuild
		// needs every one: it brings back from the manifests producers
		// that an older copy of the store had forgotten, also before its
		// newest commit; and it leaves out of the store the producers
		// they forget (recovery.Rebuilt.Forgotten).
		rebuild := behind || lc.leaseReserved(res.LastID) > res.LastID
		from := kept
		if rebuild {
			from, rebuilt = 0, ours.ours
		}
		docs, err := lc.loadForgotten(ctx, from, limit, rebuild)
		if err != nil {
			return err
		}
		switch {
		case behind:
			lc.e.log.Error("the state store is behind the destination (lost, or an older copy): rebuilding producers from the manifests",
				"store", lc.e.cfg.StorePath, "store_committed_checkpoint", newest, "store_rebuilt_through", through, "store_last_checkpoint", res.LastID, "manifest_checkpoint", ours.ours)
			var seen uint64
			believed, seen, err = lc.rebuildProducers(ctx, limit, newest, docs)
			top = max(top, seen) // the files it set aside named ids too (I8)
		case rebuild:
			// The lease shows ids a former incarnation reserved beyond
			// the store's (ids are reserved in the store first, then in
			// the lease): the store is new, or an older copy, and no
			// manifest shows it (none of this node, or none published
			// since the copy), but a commit the lost store began may have
			// placed files. The rebuild finds and sets them aside.
			lc.e.log.Error("the node lease shows checkpoint ids reserved beyond the state store's (a new store, or an older copy): looking for files a former incarnation left",
				"store", lc.e.cfg.StorePath, "store_last_checkpoint", res.LastID, "lease_reserved_checkpoint", lc.leaseReserved(res.LastID))
			var seen uint64
			believed, seen, err = lc.rebuildProducers(ctx, limit, newest, docs)
			top = max(top, seen) // the files it set aside named ids too (I8)
		case res.LastID == 0 && lc.leaseReserved(0) == 0:
			var seen uint64
			seen, err = lc.setAsideFirstCommit(ctx, max(ours.ours, newest), limit)
			top = max(top, seen)
		case unheld != 0:
			// A manifest of this node newer than the store, none of whose
			// files the destination holds: planted, or a real one whose
			// files a retention job removed, the store then an older copy.
			// No rebuild (it would believe planted forgets), but a commit
			// the older store's original began after it may have placed
			// files with no manifest, which the rebuild would have set
			// aside: their clients resend them (I2). Only after it: a
			// file of this node below a real manifest was committed
			// before that manifest was published (checkpoints commit one
			// at a time), its own manifest perhaps removed by retention:
			// never moved (I7). After the newest manifest name, not the
			// newest unheld one: a newer name whose document does not
			// decode (damaged, another version's) or is gone meanwhile
			// was published all the same, after its checkpoint's files
			// were placed; the rebuild too looks after every name
			// (recovery.Rebuild's published).
			var seen uint64
			seen, err = lc.setAsideUnnamed(ctx, max(kept, unheld, ours.ours), limit,
				"a manifest of this node newer than the state store's newest commit names no file the destination holds (its files removed, or planted)",
				"whose store was replaced by an older copy")
			top = max(top, seen)
		}
		if err != nil {
			return err
		}
		return lc.applyForgotten(docs)
	})
	return res, top, believed, rebuilt, ok
}

// manifestLimit returns the highest checkpoint id this node may have
// written a manifest for: the highest reserved in the store or in the
// node's lease (ids are reserved in both before any is used). Without a
// lease a lost store leaves nothing to tell this node's manifests from
// planted ones by id, but no node counts to MaxCheckpoint/2 (2^61):
// that is the limit then, and always.
func (lc *lifecycle) manifestLimit(lastID uint64) uint64 {
	const never = layout.MaxCheckpoint / 2
	r := lc.leaseReserved(lastID)
	if r == 0 {
		return never
	}
	return min(max(r, lastID), never)
}

// firstOpenID returns the id of the first checkpoint to open. Ids are
// handed out (in answers) before anything records them, but only from a
// block reserved durably beforehand (see reserveIDs), so every id a former
// run may have named is at most lastID, or the highest id any former
// incarnation reserved in the lease (also when the store was lost, I8).
// inDest is the highest manifest id under this node's prefix that is
// within bounds, written by this node or not: none is ever reused.
// believed is the highest id of a manifest of this node a rebuild
// believed (0: none).
func (lc *lifecycle) firstOpenID(lastID, inDest, believed uint64) uint64 {
	if inDest > highestPlausibleID {
		// Planted (a name this node never wrote, within the bound that
		// makes it look like one): followed, the skips below would carry
		// the node's ids past what a later start believes its own. But a
		// start that passed over one opened just beyond
		// highestPlausibleID, and the node went on there: the manifests
		// of its own a rebuild believes are never passed over (I8), and
		// the skips beyond them are cut to stay within the bound
		// (lostIDsFloor).
		at := max(highestPlausibleID, min(believed, inDest))
		if at < inDest {
			lc.e.log.Error("the destination shows a checkpoint id of this node too close to the bound of ids a start believes: not continuing beyond it (check who can write the bucket, docs/production.md)",
				"checkpoint", inDest, "bound", uint64(layout.MaxCheckpoint/2), "continuing_after", at)
		}
		inDest = at
	}
	open := max(lastID, lc.leaseReserved(max(lastID, inDest))) + 1
	if inDest > 0 && inDest+2 > lastID {
		// Recovery step 5: the store is behind the destination (lost, or
		// an older copy). A store that kept up has reserved at least two
		// ids beyond every manifest. Never reuse an id the destination
		// shows (I8). Ids of empty or aborted checkpoints after the newest
		// manifest left no trace there: skip a whole block beyond it,
		// which covers every id a run hands out between two reservations
		// unless more than a block of them passed without data.
		open = max(open, inDest+lc.e.cfg.idBlock+2, lc.lostIDsFloor(inDest)) // lease.go
		lc.e.log.Error("the destination shows checkpoint ids of this node beyond the state store's (manifests; on a first start also part files without one): continuing beyond the highest found",
			"store", lc.e.cfg.StorePath, "store_last_checkpoint", lastID, "manifest_checkpoint", inDest, "checkpoint", open)
	}
	return open
}

// highestPlausibleID is the highest checkpoint id of the destination's
// that a start continues its ids beyond: from it, a block and the skip of
// an unknown lease (lostIDSkip) still keep them under MaxCheckpoint/2,
// beyond which a later start believes none of the node's manifests
// (manifestLimit). A node counting from 1, even skipping 2^40 ids at each
// of a thousand store losses, stays far below it.
const highestPlausibleID = layout.MaxCheckpoint/2 - 2*lostIDSkip

// manifestIDs is what a listing of this node's manifest prefix shows.
type manifestIDs struct {
	ours  uint64        // the highest id within the limit: this node's, as far as ids tell
	top   uint64        // the highest id of any manifest name that parses, planted ones up to MaxCheckpoint/2 too
	newer []manifestRef // names within the limit newer than what the store kept up with
}

// manifestRef is a manifest's name and id.
type manifestRef struct {
	id   uint64
	name string
}

// believedNewer reports whether one of newer (manifestIDs.newer) is a
// manifest of this node the rebuild would believe: its document reads
// and passes the checks of layout.DecodeManifest, and the destination
// holds one of its files as it states (manifestHeld). Only then is the store behind the destination
// (the start rebuilds, believing every forgotten-producers document): a
// file with a manifest's name that is not one — planted, or a document
// removed meanwhile — is not a commit the store missed (DESIGN "Several
// nodes": what fails to parse is reported and skipped, never a reason to
// believe more). It reads from the newest down, until one is believed:
// one read when the store is behind, none when it kept up.
//
// unheld is the highest id of those read that decodes as a manifest of
// this node but whose files the destination holds none of (0: none):
// planted, or a real one whose files a retention job removed (then the
// store is an older copy, and a commit its original began after it may
// have placed files: replay sets those aside, after unheld and every
// newer manifest name: a file below a real manifest was committed before
// it was published).
func (lc *lifecycle) believedNewer(ctx context.Context, newer []manifestRef) (behind bool, unheld uint64, err error) {
	if len(newer) == 0 {
		return false, 0, nil
	}
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return false, 0, nil
		}
	}
	slices.SortFunc(newer, func(a, b manifestRef) int { return cmp.Compare(b.id, a.id) })
	for _, ref := range newer {
		m, err := layout.ReadManifest(ctx, r, ref.name)
		var held bool
		if err == nil {
			held, err = manifestHeld(ctx, r, m)
		}
		switch {
		case err == nil && held:
			return true, unheld, nil
		case err == nil:
			unheld = max(unheld, ref.id)
			err = errors.New("the destination holds none of its files with the size it states")
		case !errors.Is(err, layout.ErrBadManifest) && !errors.Is(err, committer.ErrNotFound):
			return false, 0, fmt.Errorf("read manifest %s: %w", ref.name, err)
		}
		lc.e.log.Error("a document with a manifest's name newer than the state store's newest commit is not a manifest the rebuild would believe: not a reason to rebuild (check who can write the bucket, docs/production.md)",
			"op", "recovery", "path", ref.name, "err", err)
	}
	return false, unheld, nil
}

// manifestHeld reports whether the destination holds one of m's files
// with the size m states, or m names none: what the rebuild asks of a
// manifest before it believes it (recovery.Rebuild).
func manifestHeld(ctx context.Context, r committer.Reader, m *layout.Manifest) (bool, error) {
	if len(m.Files) == 0 {
		return true, nil
	}
	for _, f := range m.Files {
		rc, en, err := r.Open(ctx, f.Path)
		if errors.Is(err, committer.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("open %s: %w", f.Path, err)
		}
		_ = rc.Close() // read-only: nothing to lose
		if en.Bytes == f.Bytes {
			return true, nil
		}
	}
	return false, nil
}

// highestManifestID lists this node's manifests in the destination; zero
// when there are none or the destination cannot be listed (neither the
// publisher nor the committer is a committer.Reader). Names that do not
// parse (layout.ParseManifestName, which bounds the id) and ids beyond
// limit (manifestLimit) were not written by this node: they are reported
// and not believed. Names within limit with ids beyond kept (what the
// store kept up with) are returned in newer, for believedNewer.
func (lc *lifecycle) highestManifestID(ctx context.Context, limit, kept uint64) (manifestIDs, error) {
	var out manifestIDs
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return out, nil
		}
	}
	dir := path.Dir(recovery.ManifestPath(lc.e.cfg.Node, 0)) + "/"
	entries, err := r.List(ctx, dir)
	if err != nil {
		return out, fmt.Errorf("list manifests: %w", err)
	}
	var bad, beyond int
	var example string
	for _, en := range entries {
		node, id, ok := layout.ParseManifestName(en.Path)
		switch {
		case layout.IsTempName(en.Path):
			// A publish a crash cut short: never a manifest.
		case !ok || node != lc.e.cfg.Node:
			bad++
			example = en.Path
		case id > limit:
			beyond++
			example = en.Path
			if id <= layout.MaxCheckpoint/2 {
				// Not ours, but its name is taken: ids go past it, while
				// that leaves room (beyond, a collision is 2^61
				// checkpoints away).
				out.top = max(out.top, id)
			}
		default:
			out.ours = max(out.ours, id)
			out.top = max(out.top, id)
			if id > kept {
				out.newer = append(out.newer, manifestRef{id: id, name: en.Path})
			}
		}
	}
	if bad+beyond > 0 {
		lc.e.log.Error("documents under this node's manifest prefix that it did not write: ignored (check who can write the bucket, docs/production.md)",
			"op", "recovery", "not_manifest_names", bad, "beyond_reserved_ids", beyond, "reserved_checkpoint", limit, "path", example)
	}
	return out, nil
}
