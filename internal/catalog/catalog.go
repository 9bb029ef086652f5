package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/memo"
	"github.com/eosink/eosink/recovery"
)

// Reader lists and reads the destination (a committer's read side).
// Implementations must be safe for concurrent use.
type Reader interface {
	// List returns every file under prefix, sorted by path.
	List(ctx context.Context, prefix string) ([]committer.Entry, error)
	// Open opens a committed file; a missing one is an error wrapping
	// committer.ErrNotFound.
	Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error)
}

// Pager is a Reader that lists a page at a time; the catalog finds it by
// type assertion. Without it a listing reads the whole prefix once.
type Pager interface {
	// ListPage returns, sorted by path, up to limit files under prefix
	// whose path sorts after after.
	ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error)
}

// State is what the catalog needs of the engine: this node's checkpoint
// rows, read-only. Both must not wait on the ingest lock.
type State interface {
	// CheckpointRecord returns checkpoint id with its files, or an error
	// wrapping recovery.ErrNotFound.
	CheckpointRecord(id uint64) (*recovery.Checkpoint, error)
	// CheckpointRecords returns up to limit checkpoints with ids below
	// before (0: no bound), newest first, without their files.
	CheckpointRecords(before uint64, limit int) ([]recovery.Checkpoint, error)
	// StateVersion changes after every write to the state: what was read
	// from it may be kept until it does.
	StateVersion() uint64
}

var (
	_ Reader = committer.Reader(nil)
	_ Pager  = committer.Pager(nil)
)

// Defaults for Config fields left zero.
const (
	// DefaultManifestBytes bounds the manifest cache: about 64 MiB of
	// parsed manifests (some 300,000 file entries).
	DefaultManifestBytes = 64 << 20
	// ListChunk is how many entries one destination listing call reads
	// at most.
	ListChunk = 1000
	// DefaultAnswerBytes bounds the answer cache: the API's encoded lists
	// (some 25 pages of 10,000 producers) and the UI's overview.
	DefaultAnswerBytes = 24 << 20
)

// Config holds a Catalog's dependencies.
type Config struct {
	Files Reader // required: the destination
	State State  // this node's checkpoints; nil knows none
	// Node is this process's node id: its checkpoints are in State.
	Node string
	// ManifestBytes bounds the manifest cache by the estimated bytes of
	// the manifests it holds; default DefaultManifestBytes. A manifest
	// larger than that, as a file or parsed, is not read at all
	// (ErrManifestTooLarge): its files' records are unknown.
	ManifestBytes int64
	// AnswerBytes bounds the answer cache (Answer); default
	// DefaultAnswerBytes.
	AnswerBytes int
	// Logger receives what a listing drops (an unreadable manifest); nil
	// discards.
	Logger *slog.Logger
	// Now is the clock of lease expiry; nil means time.Now.
	Now func() time.Time
	// FeedPoll is how often the commit feed's waiters look for other
	// nodes' commits (one poll shared by all); default DefaultFeedPoll.
	FeedPoll time.Duration
}

// Catalog is the read model of committed files. Safe for concurrent use.
type Catalog struct {
	files     Reader
	state     State
	node      string
	log       *slog.Logger
	now       func() time.Time
	manifests *manifestCache
	answers   *memo.Cache[any]
	watch     *feedWatch
	feedPoll  time.Duration
	reserved  reservedIDs // feedbound.go
}

// New checks cfg and returns a Catalog.
func New(cfg Config) (*Catalog, error) {
	if cfg.Files == nil {
		return nil, errors.New("new catalog: files are required")
	}
	if cfg.ManifestBytes <= 0 {
		cfg.ManifestBytes = DefaultManifestBytes
	}
	if cfg.AnswerBytes <= 0 {
		cfg.AnswerBytes = DefaultAnswerBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.State == nil {
		cfg.State = noState{}
	}
	if cfg.FeedPoll <= 0 {
		cfg.FeedPoll = DefaultFeedPoll
	}
	return &Catalog{files: cfg.Files, state: cfg.State, node: cfg.Node, log: cfg.Logger, now: cfg.Now,
		manifests: newManifestCache(cfg.Files, cfg.ManifestBytes, cfg.Logger), answers: memo.New[any](cfg.AnswerBytes),
		watch: newFeedWatch(), feedPoll: cfg.FeedPoll}, nil
}

// Answer returns what compute makes of the state store alone under key:
// kept from an earlier call until the state changes (State.StateVersion),
// else compute's value, kept if its size in bytes fits. One cache for the
// API and the UI (each under keys of its own): a client polling a list or
// the overview costs the writers about what a probe does.
func (c *Catalog) Answer(key string, compute func() (any, int, error)) (any, error) {
	return c.answers.Get(c.state.StateVersion(), key, compute)
}

// Node returns this process's node id ("" if not set).
func (c *Catalog) Node() string { return c.node }

// Open opens a committed file; a missing one is an error wrapping
// committer.ErrNotFound.
func (c *Catalog) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	return c.files.Open(ctx, name)
}

// noState is the State of a catalog without an engine (eosink verify).
type noState struct{}

func (noState) CheckpointRecord(id uint64) (*recovery.Checkpoint, error) {
	return nil, fmt.Errorf("checkpoint %d: %w", id, recovery.ErrNotFound)
}

func (noState) CheckpointRecords(uint64, int) ([]recovery.Checkpoint, error) { return nil, nil }
func (noState) StateVersion() uint64                                         { return 0 }

// AfterPast returns the smallest cursor that sorts after every path under
// the folder dir ("x/"): '0' is the byte after '/'.
func AfterPast(dir string) string { return strings.TrimSuffix(dir, "/") + "0" }

// Walk calls fn for each file under prefix that sorts after after, in path
// order, reading the destination chunk entries at a time (at most
// ListChunk), until fn says stop. fn may return skip, a cursor to go on
// from (to pass over a folder without reading it). With a Pager a walk
// costs the entries it reads; without, the prefix is listed whole, once.
func (c *Catalog) Walk(ctx context.Context, prefix, after string, chunk int,
	fn func(e committer.Entry) (skip string, stop bool)) error {
	chunk = min(max(chunk, 1), ListChunk)
	pager, ok := c.files.(Pager)
	if !ok {
		all, err := c.files.List(ctx, prefix)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, e := range all {
			if e.Path <= after {
				continue
			}
			skip, stop := fn(e)
			if stop {
				return nil
			}
			after = max(after, skip)
		}
		return nil
	}
	for {
		page, err := pager.ListPage(ctx, prefix, after, chunk)
		if err != nil {
			return fmt.Errorf("list %s after %s: %w", prefix, after, err)
		}
		jumped := false
		for _, e := range page {
			after = e.Path
			skip, stop := fn(e)
			if stop {
				return nil
			}
			if skip > after {
				after, jumped = skip, true
				break
			}
		}
		if !jumped && len(page) < chunk {
			return nil
		}
	}
}

// HasDir reports whether the destination holds a file under the folder p
// ("" is the root): one listing call.
func (c *Catalog) HasDir(ctx context.Context, p string) (bool, error) {
	if p == "" {
		return true, nil
	}
	found := false
	err := c.Walk(ctx, p+"/", "", 1, func(committer.Entry) (string, bool) {
		found = true
		return "", true
	})
	return found, err
}
