package server

import "github.com/eosink/eosink/recovery"

// Read-only queries of the state store for the read side (api/, web/,
// internal/catalog): they never take the ingest lock, and give no way to
// write the store.

// CheckpointRecord returns the stored row of checkpoint id with its files,
// or an error wrapping recovery.ErrNotFound (the open checkpoint, one not
// yet prepared, or one beyond retention).
func (e *Engine) CheckpointRecord(id uint64) (*recovery.Checkpoint, error) {
	return e.store.Get(id)
}

// CheckpointRecords returns up to limit stored checkpoints with ids below
// before (0: no bound), newest first, without their files.
func (e *Engine) CheckpointRecords(before uint64, limit int) ([]recovery.Checkpoint, error) {
	return e.store.ListBefore(before, limit)
}

// StateVersion returns a number that changes after every write to the
// state store: what a reader derives from the store (checkpoints,
// producers) may be kept until it changes. Read it before the store.
func (e *Engine) StateVersion() uint64 { return e.store.Version() }
