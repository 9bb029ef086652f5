package committertest

import (
	"context"
	"sync/atomic"

	"github.com/eosink/eosink/committer"
)

// Stuck wraps a committer for the engine's tests: while On is set, every
// Commit fails with committer.ErrTransient as a destination outage would,
// so a checkpoint stays prepared and its commit is retried. Prepare and
// Abort pass through, and so does Commit once On is cleared.
type Stuck struct {
	committer.Committer
	On atomic.Bool
}

// Commit fails as an outage would while On is set.
func (c *Stuck) Commit(ctx context.Context, f committer.File) error {
	if c.On.Load() {
		return committer.ErrTransient
	}
	return c.Committer.Commit(ctx, f)
}
