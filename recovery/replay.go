package recovery

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// ManifestPath returns the destination-relative manifest name.
//
// Deprecated: use layout.ManifestName; kept only for server/.
func ManifestPath(node string, id uint64) string { return layout.ManifestName(node, id) }

// BuildManifest renders c's manifest. The time is the prepare time, so a
// re-commit after a crash writes the same bytes.
func BuildManifest(node string, c *Checkpoint) ([]byte, error) {
	return layout.EncodeManifest(layout.NewManifest(node, c.ID, c.PreparedAt, c.Files))
}

// Replay is the recovery run on every start.
type Replay struct {
	Finisher
	FS         afero.Fs // staging filesystem
	StagingDir string
	Logger     *slog.Logger
}

// Result is what Replay hands back.
type Result struct {
	Recommitted []uint64             // prepared checkpoints committed again
	Removed     []string             // staging files deleted
	Aborted     []string             // intents aborted
	Orphans     []committer.Leftover // uploads and staging objects no record named, removed
	LastID      uint64               // highest checkpoint id recorded
}

// Run replays: re-commit prepared checkpoints, delete staging files, abort
// intents and remove the remote leftovers no prepared checkpoint names
// (Sweep). Producers are not read: the engine loads each on first use. It
// stops at the first error; calling it again is safe.
func (r *Replay) Run(ctx context.Context) (*Result, error) {
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := &Result{}
	pending, err := r.Store.Pending()
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	named := map[string]bool{}
	pendingFinal := map[string]bool{}
	for _, c := range pending {
		for _, f := range c.Files {
			named[f.Temp] = true
			pendingFinal[f.Final] = true
		}
	}
	for i := range pending {
		c := &pending[i]
		log.Info("re-committing prepared checkpoint", "checkpoint", c.ID, "files", len(c.Files))
		if err := r.Finish(ctx, c); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		res.Recommitted = append(res.Recommitted, c.ID)
	}
	// Abort what the intents name, and every upload and staging object of
	// this node that nothing claims (I10).
	sw := Sweep{Store: r.Store, Committer: r.Committer, Node: r.Node, Logger: log}
	swept, err := sw.Run(ctx, 0)
	res.Aborted, res.Orphans = swept.Intents, swept.Removed
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	temps, err := staging.List(r.FS, r.StagingDir)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for _, t := range temps {
		if named[t] {
			// Its checkpoint committed above, so Commit consumed it unless
			// it was already final; either way it is no longer needed.
			log.Warn("staging file of a committed checkpoint left behind", "path", t)
		}
		if err := staging.Remove(r.FS, t); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		res.Removed = append(res.Removed, t)
	}
	if len(res.Removed) > 0 {
		log.Info("deleted unprepared staging files", "count", len(res.Removed), "op", "replay")
	}
	if res.LastID, err = r.Store.LastID(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return res, nil
}
