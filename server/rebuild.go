package server

import (
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
func (e *Engine) rebuildProducers() error {
	r, ok := e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = e.cfg.Committer.(committer.Reader); !ok {
			return nil
		}
	}
	begin := time.Now()
	rb, err := recovery.Rebuild(e.ctx, r, e.cfg.Node, e.log)
	if err != nil {
		return err
	}
	if err := e.store.RestoreProducers(rb.Producers); err != nil {
		return err
	}
	e.log.Warn("rebuilt producers from the destination's manifests: clients must init again (their epochs are not in the destination); batches accepted but not committed before the loss are gone",
		"op", "rebuild", "manifests", rb.Manifests, "highest_manifest", rb.Highest, "producers", len(rb.Producers),
		"duration_ms", time.Since(begin).Milliseconds())
	return nil
}
