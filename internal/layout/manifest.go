package layout

// This file owns the manifest document: the JSON written for every
// committed checkpoint at ManifestName(node, checkpoint). Its bytes are
// part of the contract twice over: readers parse them, and a re-commit
// after a crash compares the bytes it would write with the ones published
// (recovery's sameManifest), so EncodeManifest must stay byte-stable.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
)

// MaxManifest bounds the bytes of one manifest a reader accepts.
const MaxManifest = 1 << 30

// MaxSeq bounds a sequence number a manifest may state: far beyond what a
// producer counting from 0 reaches, far enough below 2^63 that next_seq
// (last + 1) never wraps.
const MaxSeq = 1 << 62

// ErrBadManifest means a document at a manifest name is not a manifest
// eosink wrote there: not JSON, beyond a bound, or naming what cannot be
// (another name, a file of another node or checkpoint). Readers report it
// and skip the document; it is never a reason to believe its ranges.
var ErrBadManifest = errors.New("not a valid manifest")

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
	// Epochs holds each producer's epoch and incarnation as of the
	// checkpoint's "prepared" record: what a rebuild needs to tell a
	// producer's incarnations apart and to restore it above every epoch
	// it had. Absent in manifests written before it was kept.
	Epochs map[string]committer.ProducerEpoch `json:"epochs,omitempty"`
	// Format, Compression and SchemaVersion say how the file is encoded
	// (see committer.File); empty for plain NDJSON and text.
	Format        string `json:"format,omitempty"`
	Compression   string `json:"compression,omitempty"`
	SchemaVersion int64  `json:"schema_version,omitempty"`
	// DisplacedFrom is, for a file the commit displaced (Path is then
	// <stream>/_displaced/<part name>), the final name it was prepared
	// with: its partition path, which a table commit finished from the
	// manifest needs (recovery.ManifestTableFiles). Absent otherwise.
	DisplacedFrom string `json:"displaced_from,omitempty"`
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
		m.Files = append(m.Files, ManifestFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C, Producers: p, Epochs: f.Epochs,
			Format: f.Format, Compression: f.Compression, SchemaVersion: f.SchemaVersion, DisplacedFrom: f.DisplacedFrom})
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
// path) from r, at most MaxManifest bytes, and checks it (CheckManifest):
// its node and checkpoint give name back. Every failure of the document
// wraps ErrBadManifest; a read of r that fails (a GET's body cut short)
// is returned as it is: it tells nothing of the document, and a caller
// that passed over it as garbage would take committed batches for lost.
func DecodeManifest(name string, r io.Reader) (*Manifest, error) {
	var m Manifest
	rd := &readFailure{r: io.LimitReader(r, MaxManifest)}
	if err := json.NewDecoder(rd).Decode(&m); err != nil {
		if rd.err != nil {
			return nil, fmt.Errorf("read manifest %s: %w", name, rd.err)
		}
		return nil, fmt.Errorf("%w: %s is not valid JSON: %w", ErrBadManifest, name, err)
	}
	if err := CheckManifest(name, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// CheckManifest checks that m is what eosink writes at name: its node and
// checkpoint give name back (so the id is within ParseManifestName's
// bounds), every file is a part file of that node and checkpoint under
// its stream's folder with non-negative counts, and every producer range
// and epoch is well formed and bounded (ascending, disjoint, within
// MaxSeq). Errors wrap ErrBadManifest.
func CheckManifest(name string, m *Manifest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadManifest, name, fmt.Sprintf(format, args...))
	}
	if !Node(m.Node) {
		return bad("node %q is not a node id", m.Node)
	}
	if want := m.Name(); want != name {
		return bad("names checkpoint %d of node %q, which belongs at %s", m.Checkpoint, m.Node, want)
	}
	if _, _, ok := ParseManifestName(name); !ok {
		return bad("not a manifest name")
	}
	for i := range m.Files {
		f := &m.Files[i]
		if !Stream(f.Stream) {
			return bad("file %d: stream %q is not a stream name", i, f.Stream)
		}
		if path.Clean(f.Path) != f.Path || !strings.HasPrefix(f.Path, f.Stream+"/") {
			return bad("file %q is not under its stream's folder %s/", f.Path, f.Stream)
		}
		node, id, _, _, ok := ParsePartName(path.Base(f.Path))
		if !ok || node != m.Node || id != m.Checkpoint {
			return bad("file %q is not a part file of checkpoint %d of node %s", f.Path, m.Checkpoint, m.Node)
		}
		if f.DisplacedFrom != "" && (path.Clean(f.DisplacedFrom) != f.DisplacedFrom || DisplacedName(f.DisplacedFrom) != f.Path ||
			strings.HasPrefix(f.DisplacedFrom, f.Stream+"/"+DisplacedDir+"/")) {
			return bad("file %q: displaced from %q, which is not its name before it was displaced", f.Path, f.DisplacedFrom)
		}
		if f.Bytes < 0 || f.Records < 0 {
			return bad("file %q: negative size or count", f.Path)
		}
		for p, rs := range f.Producers {
			if !Producer(p) {
				return bad("file %q: producer %q is not a producer id", f.Path, p)
			}
			prev := int64(-1)
			for _, r := range rs {
				if r[0] <= prev || r[1] < r[0] || r[1] >= MaxSeq {
					return bad("file %q: producer %s: ranges %v are not ascending, disjoint and within [0, %d)", f.Path, p, rs, int64(MaxSeq))
				}
				prev = r[1]
			}
		}
		for p, ep := range f.Epochs {
			if _, ok := f.Producers[p]; !ok {
				return bad("file %q: epoch of producer %q, which has no ranges", f.Path, p)
			}
			if ep.Incarnation < 0 || ep.Epoch < ep.Incarnation || ep.Epoch >= MaxSeq {
				return bad("file %q: producer %s: epoch %d, incarnation %d", f.Path, p, ep.Epoch, ep.Incarnation)
			}
		}
	}
	return nil
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

// readFailure remembers the error, other than the end, that a read of r
// failed with.
type readFailure struct {
	r   io.Reader
	err error
}

func (f *readFailure) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		f.err = err
	}
	return n, err
}
