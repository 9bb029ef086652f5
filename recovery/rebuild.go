package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// Rebuilt is what the destination says about a node whose state store was
// lost or is older than its manifests (recovery step 5).
type Rebuilt struct {
	Manifests int    // manifests read
	Highest   uint64 // the highest checkpoint id among them
	// Producers holds, per producer and stream, the highest sequence
	// number committed and the checkpoint that committed it.
	Producers map[string]map[string]StreamSeq
}

// rebuildLogEvery is how often a long rebuild logs its progress.
const rebuildLogEvery = 5 * time.Second

// Rebuild reads every manifest of node in the destination and returns each
// producer's committed sequence numbers per stream: the highest last
// sequence number of its ranges across the manifests (sequence numbers of
// a producer on a stream are committed in order, so everything up to it is
// committed). It costs one read per manifest, so recovery runs it only
// when the store is behind the destination.
//
// What it cannot recover: batches accepted but not committed (they were
// never in a manifest), producers' epochs (not in manifests) and their
// sequence numbers accepted but not committed; idempotency keys.
func Rebuild(ctx context.Context, r committer.Reader, node string, log *slog.Logger) (*Rebuilt, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := path.Dir(layout.ManifestName(node, 0)) + "/"
	entries, err := r.List(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("rebuild from destination: list manifests: %w", err)
	}
	out := &Rebuilt{Producers: map[string]map[string]StreamSeq{}}
	var todo []string
	for _, en := range entries {
		if n, _, ok := layout.ParseManifestName(en.Path); ok && n == node {
			todo = append(todo, en.Path)
		}
	}
	begin, logged := time.Now(), time.Now()
	for i, name := range todo {
		m, err := ReadManifest(ctx, r, name)
		if err != nil {
			return nil, fmt.Errorf("rebuild from destination: %s: %w", name, err)
		}
		out.Manifests++
		out.Highest = max(out.Highest, m.Checkpoint)
		for _, f := range m.Files {
			for p, ranges := range f.Producers {
				for _, rg := range ranges {
					streams := out.Producers[p]
					if streams == nil {
						streams = map[string]StreamSeq{}
						out.Producers[p] = streams
					}
					cur, ok := streams[f.Stream]
					if !ok || rg[1] > cur.CommittedSeq {
						streams[f.Stream] = StreamSeq{NextSeq: rg[1] + 1, CommittedSeq: rg[1], CommittedIn: m.Checkpoint}
					}
				}
			}
		}
		if time.Since(logged) >= rebuildLogEvery {
			logged = time.Now()
			log.Info("rebuilding from the destination's manifests", "op", "rebuild", "read", i+1, "of", len(todo),
				"producers", len(out.Producers), "elapsed_ms", time.Since(begin).Milliseconds())
		}
	}
	return out, nil
}
