// Package recovery owns eosink's durable state and the replay on start.
//
// The state store is one bbolt file (<data>/state.db) with these buckets:
//
//	meta         "version" -> 1; "last_id" -> the highest checkpoint id ever
//	             recorded or reserved (8 bytes big-endian), so ids are never
//	             reused: the engine reserves ids in blocks before it names
//	             them in answers, and a start continues beyond last_id
//	checkpoints  id (8 bytes big-endian) -> Checkpoint as JSON
//	producers    producer id -> Producer as JSON: epoch, and per stream the
//	             next and committed sequence numbers as of the last prepared
//	             checkpoint
//	intents      key -> committer.File as JSON: uploads started before the
//	             "prepared" record, so recovery can abort them
//
// A checkpoint goes prepared -> committed, or is recorded aborted. The
// "prepared" record and the producers' sequence state as of its barrier are
// written in one transaction (I4, I5). Details (file lists) of committed
// checkpoints older than the retention count are pruned; their summary row
// stays.
//
// Replay, on every start: commit again every prepared checkpoint
// (idempotently), delete the staging files and abort the intents that no
// prepared checkpoint names, and hand back the producers' state.
package recovery
