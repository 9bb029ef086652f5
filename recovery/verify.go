package recovery

import (
	"context"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// MaxManifest bounds the bytes of one manifest a reader accepts.
const MaxManifest = layout.MaxManifest

// ReadManifest reads and checks the manifest at name (a destination path):
// layout.ReadManifest. A missing manifest is an error wrapping
// committer.ErrNotFound.
func ReadManifest(ctx context.Context, r committer.Reader, name string) (*Manifest, error) {
	return layout.ReadManifest(ctx, r, name)
}
