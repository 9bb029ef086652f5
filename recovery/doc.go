// Package recovery owns eosink's durable state and the replay on start.
//
// The state store is one bbolt file (<data>/state.db) with these buckets:
//
//	meta         "version" -> 1; "last_id" -> the highest checkpoint id ever
//	             recorded (8 bytes big-endian), so ids are never reused
//	checkpoints  id (8 bytes big-endian) -> Checkpoint as JSON
//	producers    producer id -> Producer as JSON: epoch, and per stream the
//	             next and committed sequence numbers as of the last prepared
//	             checkpoint
//	intents      key -> committer.File as JSON: uploads started before the
//	             "prepared" record, so recovery can abort them; kept until
//	             an abort of them succeeded (or the checkpoint is prepared)
//
// A checkpoint goes prepared -> committed, or is recorded aborted. The
// "prepared" record and the producers' sequence state as of its barrier are
// written in one transaction (I4, I5). Details (file lists) of committed
// checkpoints older than the retention count are pruned; their summary row
// stays.
//
// Replay, on every start: commit again every prepared checkpoint
// (idempotently), delete the staging files, abort the intents that no
// prepared checkpoint names and remove the committer's leftovers of this
// node that nothing claims (Sweep, which the engine also runs
// periodically), and hand back the producers' state.
//
// Finish publishes a checkpoint's manifest create-only; one already there
// counts as published only when it holds the same bytes (BuildManifest is
// deterministic), else committer.ErrConflict: its id was used before, by a
// state store since lost.
package recovery
