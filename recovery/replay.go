package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/staging"
	"github.com/spf13/afero"
)

// Manifest is the JSON document written for every committed checkpoint at
// _manifests/<node>/<checkpoint:020d>.json.
type Manifest struct {
	Checkpoint  uint64         `json:"checkpoint"`
	Node        string         `json:"node"`
	CommittedAt time.Time      `json:"committed_at"`
	Files       []ManifestFile `json:"files"`
}

// ManifestFile is one file of a manifest.
type ManifestFile struct {
	Path    string `json:"path"`
	Stream  string `json:"stream"`
	Bytes   int64  `json:"bytes"`
	Records int64  `json:"records"`
	CRC32C  string `json:"crc32c"`
	// Producers holds each producer's exact sequence numbers in the file.
	Producers map[string]committer.SeqRanges `json:"producers"`
}

// ManifestPath returns the destination-relative manifest name.
func ManifestPath(node string, id uint64) string { return layout.ManifestName(node, id) }

// BuildManifest renders c's manifest. The time is the prepare time, so a
// re-commit after a crash writes the same bytes.
func BuildManifest(node string, c *Checkpoint) ([]byte, error) {
	m := Manifest{Checkpoint: c.ID, Node: node, CommittedAt: c.PreparedAt.UTC(), Files: make([]ManifestFile, 0, len(c.Files))}
	for _, f := range c.Files {
		p := f.Producers
		if p == nil {
			p = map[string]committer.SeqRanges{}
		}
		m.Files = append(m.Files, ManifestFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C, Producers: p})
	}
	return json.MarshalIndent(&m, "", "  ")
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
