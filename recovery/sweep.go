package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// Sweep removes what this node started in the destination that no prepared
// checkpoint names (I10): uploads whose abort failed (their intents are
// kept until it succeeds), and every upload or staging object the
// committer lists for this node that no intent and no prepared checkpoint
// claims — left by a crash between a request and its record, by the
// committer's own retries, or by a lost state store. Recovery runs it on
// every start, the engine periodically.
type Sweep struct {
	Store     *Store
	Committer committer.Committer
	Node      string
	Logger    *slog.Logger // nil discards
}

// SweepResult is what one sweep removed.
type SweepResult struct {
	Intents []string             // intent keys whose files were aborted
	Removed []committer.Leftover // orphans removed
}

// Run retries the aborts of the intents of checkpoints below live, then
// lists the committer's leftovers and removes the orphans among them. live
// is the lowest checkpoint id the running engine may still be preparing,
// whose intents are its own; 0 means no engine runs (recovery), so every
// intent is retried. A committer that is not a committer.Sweeper has only
// its intents retried.
//
// Leftovers are listed before the claims are read, so an upload the engine
// starts meanwhile is either not listed or claimed: its intent is recorded
// before it starts and stays until its checkpoint is prepared (then the
// checkpoint claims it) or its abort succeeded (then it is gone).
//
// Run goes on after a failure and returns the failures joined, with what it
// did remove.
func (s *Sweep) Run(ctx context.Context, live uint64) (SweepResult, error) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var res SweepResult
	var errs []error
	intents, pending, err := s.Store.Claims()
	if err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	pendingFinal := map[string]bool{}
	for _, c := range pending {
		for _, f := range c.Files {
			pendingFinal[f.Final] = true
		}
	}
	keys := slices.Sorted(maps.Keys(intents))
	for _, k := range keys {
		id, ok := IntentCheckpoint(k)
		if live != 0 && (!ok || id >= live) {
			continue // the live engine's
		}
		f := intents[k]
		if !pendingFinal[f.Final] {
			if err := s.Committer.Abort(ctx, f); err != nil {
				errs = append(errs, fmt.Errorf("sweep: abort intent %s: %w", k, err))
				continue
			}
			log.Info("aborted an unprepared upload", "path", f.Final, "checkpoint", id, "op", "sweep")
		} // else prepared after all (the intent outlived its record): keep the file.
		if err := s.Store.DeleteIntents(k); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
			continue
		}
		if !pendingFinal[f.Final] {
			res.Intents = append(res.Intents, k)
		}
	}

	orphans, err := s.Orphans(ctx)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	for _, l := range orphans {
		if err := s.Committer.(committer.Sweeper).RemoveLeftover(ctx, l); err != nil {
			if !errors.Is(err, committer.ErrNotFound) {
				errs = append(errs, fmt.Errorf("sweep: %w", err))
			}
			continue
		}
		res.Removed = append(res.Removed, l)
		log.Warn("removed an orphan", "kind", l.Kind, "path", l.Name, "key", l.Key, "upload_id", l.UploadID, "op", "sweep")
	}
	return res, errors.Join(errs...)
}

// Orphans lists the committer's leftovers of this node that no intent and
// no prepared checkpoint (nor its manifest) claims. It removes nothing. A
// committer that is not a committer.Sweeper has none.
func (s *Sweep) Orphans(ctx context.Context) ([]committer.Leftover, error) {
	sw, ok := s.Committer.(committer.Sweeper)
	if !ok {
		return nil, nil
	}
	left, err := sw.Leftovers(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	if len(left) == 0 {
		return nil, nil
	}
	// Read after listing: see Run.
	intents, pending, err := s.Store.Claims()
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	claimed := map[string]bool{}
	for _, f := range intents {
		claimed[f.Final] = true
	}
	for _, c := range pending {
		claimed[layout.ManifestName(s.Node, c.ID)] = true
		for _, f := range c.Files {
			claimed[f.Final] = true
		}
	}
	var out []committer.Leftover
	for _, l := range left {
		if !claimed[l.Name] {
			out = append(out, l)
		}
	}
	return out, nil
}
