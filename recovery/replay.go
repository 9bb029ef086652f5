package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// Format, Compression and SchemaVersion: see committer.File.
	Format        string `json:"format,omitempty"`
	Compression   string `json:"compression,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
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
		m.Files = append(m.Files, ManifestFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C, Producers: p,
			Format: f.Format, Compression: f.Compression, SchemaVersion: f.SchemaVersion})
	}
	return json.MarshalIndent(&m, "", "  ")
}

// Finisher completes prepared checkpoints: commit every file, publish the
// manifest, record "committed". Each step is idempotent, so Finish can run
// again after any failure or crash.
type Finisher struct {
	Store     *Store
	Committer committer.Committer
	Publisher committer.Publisher
	Node      string
	Retain    int
	// Parallel bounds concurrent file commits; <= 0 means 8.
	Parallel int
	// Fence, when set, is asked before the files are committed and before
	// the manifest is published: an error (the node's lease is not held)
	// stops Finish before it writes to the destination.
	Fence func() error
}

// Finish commits checkpoint c, which must be recorded prepared.
func (f *Finisher) Finish(ctx context.Context, c *Checkpoint) error {
	par := f.Parallel
	if par <= 0 {
		par = 8
	}
	if err := f.fence(); err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", c.ID, err)
	}
	sem := make(chan struct{}, par)
	errs := make(chan error, len(c.Files))
	for _, file := range c.Files {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- f.Committer.Commit(ctx, file)
		}()
	}
	var all []error
	for range c.Files {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	if err := errors.Join(all...); err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", c.ID, err)
	}
	body, err := BuildManifest(f.Node, c)
	if err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", c.ID, err)
	}
	name := ManifestPath(f.Node, c.ID)
	if err := f.fence(); err != nil {
		return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
	}
	if err := f.Publisher.Publish(ctx, name, body); errors.Is(err, committer.ErrExists) {
		// Published by an earlier try — if it holds these bytes (they are
		// deterministic). Other bytes mean the id was used before, by a
		// state store since lost: never call that published.
		if err := f.sameManifest(ctx, name, body); err != nil {
			return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
		}
	} else if err != nil {
		return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
	}
	dur := time.Since(c.StartedAt).Milliseconds()
	if err := f.Store.Commit(c.ID, time.Now(), dur, f.Retain); err != nil {
		return fmt.Errorf("commit checkpoint %d: record: %w", c.ID, err)
	}
	return nil
}

func (f *Finisher) fence() error {
	if f.Fence == nil {
		return nil
	}
	return f.Fence()
}

// sameManifest checks that the manifest published at name holds body. A
// Publisher that cannot be read (not a committer.Reader) is trusted.
func (f *Finisher) sameManifest(ctx context.Context, name string, body []byte) error {
	r, ok := f.Publisher.(committer.Reader)
	if !ok {
		return nil
	}
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("read existing %s: %w", name, err)
	}
	defer rc.Close()
	have, err := io.ReadAll(io.LimitReader(rc, int64(len(body))+1))
	if err != nil {
		return fmt.Errorf("read existing %s: %w", name, err)
	}
	if !bytes.Equal(have, body) {
		return fmt.Errorf("%w: %s exists with other content (a checkpoint id used before, by a lost or older state store?)", committer.ErrConflict, name)
	}
	return nil
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
	Producers   []Producer           // producer state as of the last prepared checkpoint
	LastID      uint64               // highest checkpoint id recorded
}

// Run replays: re-commit prepared checkpoints, delete staging files, abort
// intents and remove the remote leftovers no prepared checkpoint names
// (Sweep), load producers. It stops at the
// first error; calling it again is safe.
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
	if res.Producers, err = r.Store.Producers(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if res.LastID, err = r.Store.LastID(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return res, nil
}
