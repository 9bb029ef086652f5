package server

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
)

// rebuildProducers is recovery step 5 for producers: the state store is
// empty or older than the destination, so each producer's committed
// sequence numbers are read back from this node's manifests and restored
// (recovery.Rebuild, Store.RestoreProducers); the engine loads them from
// the store on first use.
// A client resending after the loss is then deduplicated against what was
// committed. Only called when the store is behind: it reads every manifest.
//
// limit is the highest checkpoint id this node reserved (0: unknown):
// manifests beyond it are not believed. forgotten are the node's
// forgotten-producers documents, all of them, which the caller applies
// after: producers they forget are not put in the store on the way.
// committed is the store's newest committed checkpoint: a newer manifest
// may lack its table commit (finishTables).
// What cannot be rebuilt is logged as an error: an operator restoring a
// copy must know it. It returns the highest id of a manifest it believed
// (recovery.Rebuilt.Highest) and the highest id a part file of this node
// after the newest manifest names, set aside or not
// (recovery.Rebuilt.UnnamedHighest): ids continue beyond it (I8).
func (lc *lifecycle) rebuildProducers(ctx context.Context, limit, committed uint64, forgotten []*layout.Forgotten) (believed, seen uint64, err error) {
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return 0, 0, nil
		}
	}
	begin := time.Now()
	rb, err := recovery.Rebuild(ctx, r, lc.e.cfg.Node, limit, lc.e.log)
	if err != nil {
		return 0, 0, err
	}
	rb.Forgotten = forgotten
	// Before the store counts the manifests' checkpoints committed: a
	// failure here retries the whole step, rebuild included.
	if rb.Parked, err = lc.finishTables(ctx, rb, committed); err != nil {
		return 0, 0, err
	}
	if err := lc.e.store.Restore(rb); err != nil {
		return 0, 0, err
	}
	if n := checkpointsOf(rb.Quarantine); n > 1 {
		// Only the checkpoint after the newest manifest can have placed
		// files without one (checkpoints commit one at a time): files of
		// several are committed data whose manifests are gone (removed by
		// hand), never moved (I7).
		lc.e.log.Error("part files of this node from several checkpoints after its newest manifest that no manifest names: not a commit cut short (committed data whose manifests are gone?). Left where they are (eosink verify lists them)",
			"op", "rebuild", "files", len(rb.Quarantine), "checkpoints", n, "path", rb.Quarantine[0])
		rb.Quarantine = nil
	}
	if err := lc.quarantine(ctx, rb.Quarantine); err != nil {
		return 0, 0, err
	}
	lc.e.log.Error("rebuilt producers from the destination's manifests; not in the destination and so not rebuilt: "+
		"idempotency keys of batches committed after the store's copy (a keyed resend of one is written again), "+
		"batches accepted but not committed before the loss, and epochs handed out after a producer's last commit (a client with a newer epoch must init again)",
		"op", "rebuild", "manifests", rb.Manifests, "skipped_manifests", rb.Skipped, "files_gone", rb.FilesGone, "highest_manifest", rb.Highest, "producers", len(rb.Producers),
		"quarantined", len(rb.Quarantine),
		"duration_ms", time.Since(begin).Milliseconds())
	return rb.Highest, rb.UnnamedHighest, nil
}

// finishTables finishes the table commits a state store lost after the
// manifest and before the table commit left undone, and returns those to
// park. Which checkpoints may lack theirs: the newest manifest's (a
// checkpoint's table commit follows its manifest and comes before the
// next checkpoint's), and a parked stream's (docs/tables.md "Parked
// tables"), which are its newest manifests, at most two (its writes are
// refused while it is parked): so each table stream's newest
// recovery.RecentPerStream manifests newer than the store's committed
// checkpoint are committed into its table in checkpoint order. A table
// that holds the checkpoint already is success (table.Iceberg.Commit,
// with the replay's Bound: a later checkpoint of this node up to its
// reserved ids counts too). One that fails in a way the policy parks
// is parked, and the stream's later ones behind it; any other failure is
// the recovery step's, retried under the failure policy.
func (lc *lifecycle) finishTables(ctx context.Context, rb *recovery.Rebuilt, committed uint64) ([]recovery.Parked, error) {
	if lc.e.fin.Tables == nil {
		return nil, nil
	}
	isTable := func(stream string) bool { return lc.e.ing.confFor(stream).cfg.IsTable() }
	behind, err := lc.e.store.ParkedStreams()
	if err != nil {
		return nil, err
	}
	streams := make([]string, 0, len(rb.Recent))
	for s := range rb.Recent {
		if isTable(s) {
			streams = append(streams, s)
		}
	}
	sort.Strings(streams)
	var parked []recovery.Parked
	now := time.Now()
	for _, s := range streams {
		for _, rf := range rb.Recent[s] {
			if rf.Checkpoint <= committed {
				continue
			}
			files := recovery.ManifestTableFiles(&layout.Manifest{Node: lc.e.cfg.Node, Checkpoint: rf.Checkpoint, Files: rf.Files}, isTable)
			files = tableReadable(lc.e.ing.confFor(s).cfg, files)
			if len(files) == 0 {
				continue
			}
			if behind[s] {
				parked = append(parked, recovery.Parked{Stream: s, Checkpoint: rf.Checkpoint, Files: files, At: now,
					Error: "an earlier checkpoint's table commit of the stream is parked"})
				continue
			}
			if lc.e.fin.Fence != nil {
				if err := lc.e.fin.Fence(); err != nil {
					return nil, fmt.Errorf("finish table commits: %w", err)
				}
			}
			err := lc.e.fin.Tables.Commit(ctx, lc.e.cfg.Node, rf.Checkpoint, files)
			switch {
			case err == nil:
			case parkTable(s, err):
				if behind == nil {
					behind = map[string]bool{}
				}
				behind[s] = true
				parked = append(parked, recovery.Parked{Stream: s, Checkpoint: rf.Checkpoint, Files: files, At: now, Error: err.Error()})
				lc.e.log.Error("table commit parked by the rebuild: the stream's writes are refused (429 backpressure) until its table takes the commit; the other streams go on. Remove or repair what the error names",
					"op", "rebuild", "stream", s, "checkpoint", rf.Checkpoint, "manifest", rf.Manifest, "err", err)
			default:
				return nil, fmt.Errorf("finish the table commit of checkpoint %d (manifest %s): %w", rf.Checkpoint, rf.Manifest, err)
			}
		}
	}
	if len(streams) > 0 {
		lc.e.log.Info("each table stream's newest manifests' checkpoints are in its table or parked (table commits a lost store left undone finished)",
			"op", "rebuild", "table_streams", len(streams), "parked", len(parked))
	}
	return parked, nil
}

// tableReadable returns the files whose partition path the table
// template of cfg (a table stream's configuration) can read. A table
// stream's template never changes (streamconf.CheckChange), so a file
// whose path it can't read was written before the stream became a table:
// no table commit owes it, and committing it would fail for good and
// park the stream for ever (manifests do not say whether a file was a
// table's).
func tableReadable(cfg streamconf.Config, files []committer.File) []committer.File {
	tt, err := cfg.TableTemplate()
	if err != nil {
		return files // the commit says what is wrong
	}
	out := files[:0:0]
	for _, f := range files {
		from := f.Final // its partition path: a displaced file has none
		if f.DisplacedFrom != "" {
			from = f.DisplacedFrom
		}
		if dir, ok := strings.CutPrefix(path.Dir(from), f.Stream+"/"); ok {
			if _, err := tt.Values(dir); err != nil {
				continue
			}
		}
		out = append(out, f)
	}
	return out
}

// setAsideFirstCommit is the start's look for a former incarnation's
// files when nothing else can show one: the state store is new and the
// node lease names no reserved ids (none, unreadable, deleted), and no
// manifest of this node shows the store behind. That is every new node's
// first start; it is also a store lost, with the lease, while its first
// checkpoint with data committed — its files placed, its manifest not
// yet. Those are set aside as the rebuild sets aside what it finds
// (quarantine) — when they are one checkpoint's: files of several are
// committed data whose manifests are gone, left in place (I7). The
// highest checkpoint id any file of this node names is returned, set
// aside already or left in place (recovery.UnnamedParts): ids continue
// beyond it (I8). It lists the whole destination once, a page at a time,
// which a new store's first start can afford; after it the store and
// the lease know the ids.
func (lc *lifecycle) setAsideFirstCommit(ctx context.Context, after, limit uint64) (uint64, error) {
	return lc.setAsideUnnamed(ctx, after, limit, "a new state store and no checkpoint ids in the node lease", "whose store and lease were lost")
}

// setAsideUnnamed sets aside the part files of this node with ids after
// after and within limit that no manifest names, when they are one
// checkpoint's (setAsideFirstCommit), and returns the highest checkpoint
// id any of them names. cause and lost say, in its log records, why the
// start looks (what it knows) and what it takes them for.
func (lc *lifecycle) setAsideUnnamed(ctx context.Context, after, limit uint64, cause, lost string) (uint64, error) {
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return 0, nil
		}
	}
	begin := time.Now()
	parts, highest, err := recovery.UnnamedParts(ctx, r, lc.e.cfg.Node, after, limit)
	if err != nil {
		return 0, err
	}
	switch {
	case len(parts) == 0 && highest == 0:
		lc.e.log.Info(cause+": no files of a former incarnation without a manifest found",
			"op", "recovery", "duration_ms", time.Since(begin).Milliseconds())
		return 0, nil
	case len(parts) == 0:
		// Set aside already (a start that stopped before reserving ids, a
		// move made but reported failed), or left where they are (table
		// streams, displaced files): their ids were handed out all the same.
		lc.e.log.Error(cause+", but the destination holds files of this node that no manifest names (set aside, in a table stream's folder, displaced or staged): continuing beyond their ids",
			"op", "recovery", "highest_checkpoint", highest, "duration_ms", time.Since(begin).Milliseconds())
		return highest, nil
	}
	if ids := checkpointsOf(parts); ids > 1 {
		// Checkpoints commit one at a time, each publishing its manifest
		// before the next places a file: before any manifest only one
		// can have placed files. These are committed data whose
		// manifests are gone (copied without eosink's folders, a node id
		// used again over a former deployment's files): never moved (I7).
		lc.e.log.Error(cause+", and the destination holds part files of this node from several checkpoints that no manifest names: "+
			"not a commit cut short (committed data whose manifests are gone?). Left where they are (eosink verify lists them); continuing beyond their ids",
			"op", "recovery", "files", len(parts), "checkpoints", ids, "highest_checkpoint", highest, "path", parts[0])
		return highest, nil
	}
	lc.e.log.Error(cause+", but the destination holds part files of this node that no manifest names: "+
		"a commit cut short before its manifest, "+lost+". Setting them aside; their clients resend the batches",
		"op", "recovery", "files", len(parts), "highest_checkpoint", highest)
	if err := lc.quarantine(ctx, parts); err != nil {
		return 0, err
	}
	return highest, nil
}

// checkpointsOf returns how many checkpoint ids the part files parts name.
func checkpointsOf(parts []string) int {
	ids := map[uint64]bool{}
	for _, p := range parts {
		ids[layout.ParsePath(p).Checkpoint] = true
	}
	return len(ids)
}

// quarantine moves the part files of checkpoints whose record was
// lost with the state store (recovery.Rebuilt.Orphans) to
// _quarantine/<node>/<stream>/<part name>: no manifest names them, no client was told
// they committed, and the producers rebuilt from the manifests resend
// their batches, so left in place they would be read twice by readers that
// list the destination. Moved, not deleted (I7): an operator can look.
// Each move is idempotent; a failure is returned and the recovery step
// retried under the failure policy, except one a retry does not cure
// (verdictAbort: other content at the quarantine name, a file where it
// needs a folder — planted, since a part name is set aside once): that
// file is left where it is, logged, so that nothing found in the
// destination keeps the node from starting (I13).
func (lc *lifecycle) quarantine(ctx context.Context, orphans []string) error {
	if len(orphans) == 0 {
		return nil
	}
	mv, ok := lc.e.cfg.Committer.(committer.Mover)
	if !ok {
		lc.e.log.Error("files of checkpoints whose record was lost stay in the destination: this destination cannot move them (eosink verify lists them)",
			"op", "rebuild", "files", len(orphans), "path", orphans[0])
		return nil
	}
	for i, p := range orphans {
		to := layout.QuarantineName(lc.e.cfg.Node, p)
		if err := mv.Move(ctx, p, to); classify(err) == verdictAbort {
			lc.e.log.Error("a file of a checkpoint whose record was lost cannot be set aside: left where it is, in no manifest (eosink verify lists it; check who can write the bucket, docs/production.md)",
				"op", "rebuild", "path", p, "to", to, "err", err)
			continue
		} else if err != nil {
			return fmt.Errorf("set aside %s: %w", p, err)
		}
		if i < maxQuarantineLogged {
			lc.e.log.Error("set aside a file of a checkpoint whose record was lost with the state store: its batches are resent by their clients",
				"op", "rebuild", "path", p, "to", to)
		}
	}
	return nil
}

// maxQuarantineLogged bounds the set-aside files logged one by one.
const maxQuarantineLogged = 100
