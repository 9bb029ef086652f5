package server

import (
	"context"
	"fmt"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
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
// copy must know it.
func (lc *lifecycle) rebuildProducers(ctx context.Context, limit, committed uint64, forgotten []*layout.Forgotten) error {
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return nil
		}
	}
	begin := time.Now()
	rb, err := recovery.Rebuild(ctx, r, lc.e.cfg.Node, limit, lc.e.log)
	if err != nil {
		return err
	}
	rb.Forgotten = forgotten
	// Before the store counts the newest manifest's checkpoint committed:
	// a failure here retries the whole step, rebuild included.
	if rb.Newest != nil && rb.Newest.Checkpoint > committed {
		if err := lc.finishTables(ctx, rb.Newest); err != nil {
			return err
		}
	}
	if err := lc.e.store.Restore(rb); err != nil {
		return err
	}
	if err := lc.quarantine(ctx, rb.Quarantine); err != nil {
		return err
	}
	lc.e.log.Error("rebuilt producers from the destination's manifests; not in the destination and so not rebuilt: "+
		"idempotency keys of batches committed after the store's copy (a keyed resend of one is written again), "+
		"batches accepted but not committed before the loss, and epochs handed out after a producer's last commit (a client with a newer epoch must init again)",
		"op", "rebuild", "manifests", rb.Manifests, "skipped_manifests", rb.Skipped, "files_gone", rb.FilesGone, "highest_manifest", rb.Highest, "producers", len(rb.Producers),
		"quarantined", len(rb.Quarantine),
		"duration_ms", time.Since(begin).Milliseconds())
	return nil
}

// finishTables finishes the table commit of newest, the node's newest
// manifest, newer than the store's newest committed checkpoint, which a
// state store lost after the manifest and before the table commit left
// undone (recovery.FinishTables). Only the newest can lack it: a
// checkpoint's table commit follows its manifest and comes before the
// next checkpoint's, and one the store records committed has its own. A table that holds the checkpoint already
// is success (table.Iceberg.Commit, with the replay's Bound: a later
// checkpoint of this node up to its reserved ids counts too). A failure
// is the recovery step's, retried under the failure policy: a permanent
// one (a table that can't take the files) is the stuck state the replay's
// would be.
func (lc *lifecycle) finishTables(ctx context.Context, newest *layout.Manifest) error {
	isTable := func(stream string) bool { return lc.e.ing.confFor(stream).cfg.IsTable() }
	if lc.e.fin.Tables == nil || newest == nil || len(recovery.ManifestTableFiles(newest, isTable)) == 0 {
		return nil
	}
	if lc.e.fin.Fence != nil {
		if err := lc.e.fin.Fence(); err != nil {
			return fmt.Errorf("finish table commits: %w", err)
		}
	}
	if err := recovery.FinishTables(ctx, lc.e.fin.Tables, newest, isTable); err != nil {
		return err
	}
	lc.e.log.Info("the newest manifest's checkpoint is in its tables (its table commit finished if the lost store left it undone)",
		"op", "rebuild", "checkpoint", newest.Checkpoint)
	return nil
}

// quarantine moves the part files of checkpoints whose record was
// lost with the state store (recovery.Rebuilt.Orphans) to
// _quarantine/<node>/<stream>/<part name>: no manifest names them, no client was told
// they committed, and the producers rebuilt from the manifests resend
// their batches, so left in place they would be read twice by readers that
// list the destination. Moved, not deleted (I7): an operator can look.
// Each move is idempotent; a failure is returned and the recovery step
// retried under the failure policy.
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
		if err := mv.Move(ctx, p, to); err != nil {
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
