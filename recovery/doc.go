// Package recovery owns eosink's durable state and the replay on start.
//
// The state store is one bbolt file (<data>/state.db), format version 3.
// Every value but the idempotency keys' is JSON of the store's own record
// types (records.go: checkpointRecord, fileRecord, partRecord, seqRecord,
// producerRecord), converted at the boundary from the types the rest of
// eosink uses, so renaming a field of committer.File or Checkpoint changes
// nothing on disk; the keys are fixed-size binary rows (keys.go).
// testdata/v2-state.db, written before those types, must open (migrated
// to version 3), and today's code must write its rows byte for byte the
// same, and its migrated keys as it writes keys (TestV2Fixture). The
// buckets:
//
//	meta         "version" -> 2; "last_id" -> the highest checkpoint id ever
//	             recorded or reserved (8 bytes big-endian), so ids are never
//	             reused: the engine reserves ids in blocks before it names
//	             them in answers, and a start continues beyond last_id;
//	             "last_committed" -> the newest committed id (outlives its
//	             row); "pruned_below" -> where the next prune goes on from;
//	             "epoch_floor" -> above every forgotten producer's epoch;
//	             "producer_count" -> the producers bucket's rows (counted
//	             once at open in a store written before it was kept);
//	             "forgotten_key" (32 bytes) and "forgotten_since" -> the
//	             key the node seals its forgotten-producers documents with
//	             and the checkpoint after which each is sealed
//	             (layout.ForgottenSeal; absent before sealing);
//	             "rebuilt_through" -> the newest checkpoint of the
//	             destination's manifests a rebuild of the store went
//	             through, written with the key at the end of the start
//	             that rebuilt it: a start counts it as committed when it
//	             decides whether the store kept up (absent: never rebuilt,
//	             or by a binary that did not record it)
//	checkpoints  id (8 bytes big-endian) -> checkpointRecord: the newest
//	             --checkpoint-retention rows, and every prepared one; each
//	             file's "epochs" holds its producers' epoch and incarnation
//	             at the "prepared" record, for the manifest (absent before)
//	pending      id (8 bytes big-endian) -> empty: the prepared, not yet
//	             committed checkpoints, so a start reads only those rows
//	producers    producer id -> producerRecord {"producer","epoch","active","born"}: the epoch,
//	             the last activity (its init, or the barrier of the newest
//	             checkpoint that prepared its batches) and the epoch it was
//	             created at, its incarnation (absent: 0)
//	seqs         producer id, NUL, stream -> seqRecord: the next and
//	             committed sequence numbers as of the last prepared
//	             checkpoint; a checkpoint rewrites only the entries it changed
//	active       last activity (Unix ns, 8 bytes big-endian), producer id ->
//	             empty: the index the producer expiry walks, oldest first
//	intents      "<id:020d>/<final>" -> fileRecord: uploads started before the
//	             "prepared" record, so recovery can abort them; kept until
//	             an abort of them succeeded (or the checkpoint is prepared)
//	idem         prepare time (unix ns, 8 bytes big-endian), key id (16
//	             bytes) -> body hash (16 bytes), the checkpoint that
//	             prepared it (8 bytes big-endian): one idempotency key
//	             (keys.go). The id is the first 16 bytes of SHA-256(scope
//	             0x00 stream 0x00 Idempotency-Key), the scope the client's
//	             token identity ("" without tokens); the hash the first 16
//	             bytes of the SHA-256 of the batch's decoded body. Written
//	             in that checkpoint's "prepared" transaction, so a key is
//	             never durable before its batch; by age, for expiry and the
//	             cap, which pass over the keys of checkpoints beyond
//	             last_committed. The same id may have a newer row (accepted
//	             again after it expired): the newer wins. meta "idem_count"
//	             counts the rows
//
// A checkpoint goes prepared -> committed, or is recorded aborted. The
// "prepared" record, its pending entry and the producers' sequence state as
// of its barrier are written in one transaction (I4, I5). Each commit
// deletes the rows beyond the newest retention ones, except prepared ones
// (I11); an answer may name a checkpoint whose row is gone since (GET 404).
//
// Open checks what a start reads: the meta keys, every pending checkpoint,
// and the newest rows (a bounded sample); a producer's rows are checked when
// the engine loads it, on its first use after a start. A damaged file is an
// error wrapping ErrCorrupt that names it. Start time depends on pending
// work, not on history nor on the producers kept.
//
// The sequence rule (seq.go) is applied here (Prepare, Commit,
// RestoreProducers) and by the engine's in-memory mirror through the same
// functions. The commit step shared by the live checkpoint and the replay
// is Finisher (commit.go).
//
// Version 1 kept every stream of a producer in its one row and had no
// pending, seqs or active buckets. Open migrates it once, in one
// transaction: producer rows are split, their activity set to the upgrade
// time, prepared checkpoints indexed, and the newest committed id recorded.
//
// Version 2 kept idempotency keys as JSON rows by "stream 0x00 key"
// (idem_keys: stream, key, the whole SHA-256 of the body, checkpoint,
// prepare time) with an index by age (idem_order: prepare time, stream
// 0x00 key -> empty), some 30 times the bytes of a version 3 row. Open
// migrates them once, in the same transaction as any version 1 step: each
// becomes an idem row with the empty scope's id (keys were not scoped by
// token then) and its hash cut to 16 bytes, and the two buckets are
// deleted.
//
// # Write failures
//
// Every write transaction commits as bbolt does: write the dirty pages
// (allocated from free pages, or past the end after growing the file with
// ftruncate and fsync), fdatasync, write the meta page, fdatasync. A failed
// commit rolls back bbolt's memory, but not necessarily the file: after a
// failed fdatasync the kernel may have dropped dirty pages that the page
// cache (and bbolt's mmap) still shows, so neither the process nor a
// restart can trust what it reads (bbolt issue #233; "fsyncgate"). Hence:
//
//   - A page write (pwrite) refused with ENOSPC or EDQUOT is safe to go on
//     from. It happens before the meta page is written, and the pages it
//     writes are free ones no meta page points at (bbolt is copy-on-write),
//     so the store, on disk and in memory, is exactly as before the
//     transaction. The store checks that the transaction is not visible
//     (its meta page did not land, e.g. a torn meta page on a
//     copy-on-write file system fails its checksum) and returns an error
//     wrapping durable.ErrDiskFull. The caller answers 507 and goes on;
//     nothing is half-recorded.
//   - Everything else is not: a failed fdatasync (whatever its errno, ENOSPC
//     included, as NFS and thin volumes report), EIO, a failed file resize
//     or its fsync (bbolt reports those as text, without the errno), or any
//     failure after the transaction became visible. The store returns an
//     error wrapping ErrWriteFailed and refuses every later write the same
//     way; the engine stops, and a new process (or Close and Open) reopens
//     the file, whose meta pages and checksums decide what was recorded.
//
// A transaction that its own code refuses (committing an aborted
// checkpoint, say) writes nothing and is simply an error.
//
// Tests reach these paths through Options.WriteFault, which fails a commit
// before bbolt writes anything or after it returned, as the disk would.
//
// Replay, on every start: commit again every prepared checkpoint
// (idempotently), delete the staging files, abort the intents that no
// prepared checkpoint names and remove the committer's leftovers of this
// node that nothing claims (Sweep, which the engine also runs
// periodically). Producers are not read: the engine loads each on first use.
//
// Finish publishes a checkpoint's manifest create-only; one already there
// counts as published only when it holds the same bytes (BuildManifest is
// deterministic, and a displaced file's displaced_from, which earlier
// versions did not write, is the only difference allowed), else
// committer.ErrConflict: its id was used before, by a state store since
// lost. Then it commits the table streams' files into their tables
// (Finisher.Tables), stream by stream: one failing for good is parked
// (Finisher.Park, Store.CommitParking, parked.go), then records the
// checkpoint committed. After a lost store the server finishes the
// table commits of each table stream's newest manifests
// (Rebuilt.Recent), parking again what fails for good.
package recovery
