package server

import (
	"context"
	"time"

	"github.com/eosink/eosink/committer"
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
// manifests beyond it are not believed. What cannot be rebuilt is logged
// as an error: an operator restoring a copy must know it.
func (lc *lifecycle) rebuildProducers(ctx context.Context, limit uint64) error {
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
	if err := lc.e.store.Restore(rb); err != nil {
		return err
	}
	lc.e.log.Error("rebuilt producers from the destination's manifests; not in the destination and so not rebuilt: "+
		"idempotency keys of batches committed after the store's copy (a keyed resend of one is written again), "+
		"batches accepted but not committed before the loss, and epochs handed out after a producer's last commit (a client with a newer epoch must init again)",
		"op", "rebuild", "manifests", rb.Manifests, "skipped_manifests", rb.Skipped, "highest_manifest", rb.Highest, "producers", len(rb.Producers),
		"duration_ms", time.Since(begin).Milliseconds())
	return nil
}
