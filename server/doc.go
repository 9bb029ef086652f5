// Package server is eosink's checkpoint coordinator and process: it wires
// staging, committer and recovery into an Engine that accepts batches,
// tracks producers (epochs, sequence numbers) and runs checkpoints.
//
// Checkpoint N:
//
//  1. barrier: under the ingest lock, N's open transactions and the
//     producers' sequence state are taken and N+1 opened. Ingest is
//     blocked only for this swap.
//  2. pre-commit: all of N's files are flushed, fsynced and closed in
//     parallel, the staging directory is fsynced, and the committer
//     prepares each file (uploads on S3).
//  3. prepared: one state-store transaction records N with its files and
//     the producers' sequence state as of the barrier.
//  4. commit: every file is committed, the manifest published, and
//     "committed N" recorded. Failures here are retried with backoff until
//     they succeed (I4); a failed fsync stops the engine instead, and
//     recovery finishes the job on the next start.
//
// Ids are handed out from a block reserved durably in the state store
// beforehand (the next block is reserved when half of the current one is
// used), and a restart continues beyond the highest reservation: an id an
// answer named is never reused for other data, whatever crash follows (I8).
//
// A failure before step 3 aborts N: its files are deleted, "aborted N" is
// recorded, and the producers' state returns to the last prepared
// checkpoint's. Batches accepted after the barrier (checkpoint N+1) may
// follow sequence numbers that N lost, so N+1's open transactions are
// aborted too and ingest continues in N+2. Clients resend from the
// expected_seq they are told.
package server
