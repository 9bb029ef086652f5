package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/eosink/eosink/committer"
)

// MaxManifest bounds the bytes of one manifest a reader accepts.
const MaxManifest = 1 << 30

// ReadManifest reads and checks the manifest at name (a destination path).
// A missing manifest is an error wrapping committer.ErrNotFound.
func ReadManifest(ctx context.Context, r committer.Reader, name string) (*Manifest, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open manifest: %w", err)
	}
	defer rc.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(rc, MaxManifest)).Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest is not valid JSON: %w", err)
	}
	if want := ManifestPath(m.Node, m.Checkpoint); want != name {
		return nil, fmt.Errorf("manifest names checkpoint %d of node %q, which belongs at %s", m.Checkpoint, m.Node, want)
	}
	return &m, nil
}
