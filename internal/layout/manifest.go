package layout

// This file owns the manifest document: the JSON written for every
// committed checkpoint at ManifestName(node, checkpoint). Its bytes are
// part of the contract twice over: readers parse them, and a re-commit
// after a crash compares the bytes it would write with the ones published
// (recovery's sameManifest), so EncodeManifest must stay byte-stable.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/eosink/eosink/committer"
)

// MaxManifest bounds the bytes of one manifest a reader accepts.
const MaxManifest = 1 << 30

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
	// Format, Compression and SchemaVersion say how the file is encoded
	// (see committer.File); empty for plain NDJSON and text.
	Format        string `json:"format,omitempty"`
	Compression   string `json:"compression,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
}

// NewManifest returns the manifest of node's checkpoint id made of files.
// at is the checkpoint's prepare time, stored in UTC, so a re-commit after
// a crash builds the same document. A file without producers gets an
// empty object, never null.
func NewManifest(node string, id uint64, at time.Time, files []committer.File) *Manifest {
	m := &Manifest{Checkpoint: id, Node: node, CommittedAt: at.UTC(), Files: make([]ManifestFile, 0, len(files))}
	for _, f := range files {
		p := f.Producers
		if p == nil {
			p = map[string]committer.SeqRanges{}
		}
		m.Files = append(m.Files, ManifestFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C, Producers: p,
			Format: f.Format, Compression: f.Compression, SchemaVersion: f.SchemaVersion})
	}
	return m
}

// Name returns the destination-relative name m belongs at.
func (m *Manifest) Name() string { return ManifestName(m.Node, m.Checkpoint) }

// EncodeManifest renders m as published: indented JSON, two spaces. The
// same document always gives the same bytes.
func EncodeManifest(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return b, nil
}

// DecodeManifest reads the manifest published at name (a destination
// path) from r, at most MaxManifest bytes, and checks that it belongs
// there: its node and checkpoint give name back.
func DecodeManifest(name string, r io.Reader) (*Manifest, error) {
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(r, MaxManifest)).Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest is not valid JSON: %w", err)
	}
	if want := m.Name(); want != name {
		return nil, fmt.Errorf("manifest names checkpoint %d of node %q, which belongs at %s", m.Checkpoint, m.Node, want)
	}
	return &m, nil
}

// ReadManifest opens the manifest at name (a destination path) through r
// and decodes it with DecodeManifest. A missing manifest is an error
// wrapping committer.ErrNotFound.
func ReadManifest(ctx context.Context, r committer.Reader, name string) (*Manifest, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open manifest: %w", err)
	}
	defer rc.Close()
	return DecodeManifest(name, rc)
}
