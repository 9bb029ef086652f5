package catalog

// This file is the read side's own view of this node's checkpoints: the
// rows of the state store as the API and the UI show them, and the
// derivation of the two states the store does not hold (open, running),
// so that neither needs recovery's record types.

import (
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
)

// Checkpoint states as the read side shows them: the state store's, and
// the two of a checkpoint the store holds no row of yet.
const (
	Prepared  = string(recovery.Prepared)
	Committed = string(recovery.Committed)
	Aborted   = string(recovery.Aborted)
	// Open is the checkpoint taking writes.
	Open = "open"
	// Running is a checkpoint between its barrier and its "prepared" (or
	// abort) record.
	Running = "running"
)

// ErrNoCheckpoint means this node knows no checkpoint of that id.
var ErrNoCheckpoint = errors.New("checkpoint not known")

// Checkpoint is one of this node's checkpoints.
type Checkpoint struct {
	ID    uint64
	State string
	// Files are its files; only Checkpoint and CheckpointAt fill them.
	Files []committer.File
	// FileCount is how many files it has, whether Files is filled or not.
	FileCount   int
	Records     int64
	Bytes       int64
	StartedAt   time.Time
	PreparedAt  time.Time
	CommittedAt time.Time
	DurationMS  int64
	Error       string
	// Seqs holds, for every (producer, stream) whose state changed in
	// it, the next sequence number as of its barrier.
	Seqs map[string]map[string]int64
}

// Empty reports whether a stored checkpoint committed nothing.
func (c *Checkpoint) Empty() bool {
	return c.FileCount == 0 && c.Records == 0 && c.State != Open && c.State != Running
}

func viewOf(c *recovery.Checkpoint) Checkpoint {
	return Checkpoint{ID: c.ID, State: string(c.State), Files: c.Files, FileCount: max(c.FileCount, len(c.Files)),
		Records: c.Records, Bytes: c.Bytes, StartedAt: c.StartedAt, PreparedAt: c.PreparedAt,
		CommittedAt: c.CommittedAt, DurationMS: c.DurationMS, Error: c.Error, Seqs: c.Seqs}
}

// Live is what the engine reports of the checkpoints its store holds no
// row of (server.Status's fields of the same names).
type Live struct {
	Ready       bool
	OpenID      uint64 // the open checkpoint
	OpenFiles   int
	OpenRecords int64
	OpenBytes   int64
	// LastDone is the newest id whose checkpoint ended; FirstID the first
	// id this start opened (an id below it the store lacks never ran).
	LastDone uint64
	FirstID  uint64
}

// Checkpoint returns this node's stored checkpoint id with its files, or
// an error wrapping ErrNoCheckpoint.
func (c *Catalog) Checkpoint(id uint64) (Checkpoint, error) {
	ck, err := c.state.CheckpointRecord(id)
	switch {
	case errors.Is(err, recovery.ErrNotFound):
		return Checkpoint{}, fmt.Errorf("checkpoint %d: %w", id, ErrNoCheckpoint)
	case err != nil:
		return Checkpoint{}, err
	}
	return viewOf(ck), nil
}

// CheckpointAt returns checkpoint id as Checkpoint does, or, when the
// store holds no row of it, as live (asked only then) tells: the open
// checkpoint (its counts so far), or a running one. Else an error
// wrapping ErrNoCheckpoint.
func (c *Catalog) CheckpointAt(id uint64, liveNow func() Live) (Checkpoint, error) {
	ck, err := c.Checkpoint(id)
	if !errors.Is(err, ErrNoCheckpoint) {
		return ck, err
	}
	switch live := liveNow(); {
	case live.Ready && id == live.OpenID:
		return Checkpoint{ID: id, State: Open, FileCount: live.OpenFiles, Records: live.OpenRecords, Bytes: live.OpenBytes}, nil
	case live.Ready && id < live.OpenID && id > live.LastDone && id >= live.FirstID:
		return Checkpoint{ID: id, State: Running}, nil
	}
	return Checkpoint{}, err
}

// Checkpoints returns up to limit of this node's stored checkpoints with
// ids below before (0: no bound), newest first, without their files.
func (c *Catalog) Checkpoints(before uint64, limit int) ([]Checkpoint, error) {
	cs, err := c.state.CheckpointRecords(before, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Checkpoint, len(cs))
	for i := range cs {
		out[i] = viewOf(&cs[i])
	}
	return out, nil
}
