// Package table owns table formats over the destination: Apache Iceberg
// (format v2) tables of streams configured "table": "iceberg"
// (docs/design.md "Tables").
//
// Layout of a table stream's directory:
//
//	<stream>/<partition path>/part-....parquet            data files, committed as any stream's
//	<stream>/metadata/v<N>.metadata.json                  table metadata, version N (create-only)
//	<stream>/metadata/version-hint.text                   N of the newest, as text (compare-and-swap, never lowered)
//	<stream>/metadata/eosink-<node>-<ckpt:020d>-m<n>.avro the manifest of one checkpoint's files (m0; m1, … when a name holds other content)
//	<stream>/metadata/snap-<snapshot id>-<token>.avro     a manifest list (one per try)
//	<stream>/metadata/merged-<snapshot id>-<token>.avro   merged manifests (maintain.go)
//
// Avro files are written with the null codec (see avro.go for why).
//
// The commit (Iceberg.Commit), run by recovery.Finisher after every file
// of a checkpoint is final and its eosink manifest is published, before
// the checkpoint is recorded committed, one stream at a time (and by the
// server's loop for a parked stream's commits, and after a lost state
// store for each table stream's newest manifests; docs/tables.md
// "Parked tables"):
//
//  1. Load the newest metadata: from the version hint, probe vN+1, vN+2, …
//     Versions that do not parse and claim not to be the table's are
//     passed over (Load); vN is the newest that parses, the next write
//     is the first version above it not passed over (never past a gap).
//  2. If a snapshot's summary names this node with this checkpoint (in
//     the replay, or a later one up to Iceberg.Bound), the checkpoint is
//     in the table: raise the hint, done. (Flink's Iceberg sink does the
//     same with its max-committed-checkpoint-id.) The table property
//     eosink.committed.<node> is written, never believed alone: planted
//     metadata must not make a commit skip its snapshot (I13).
//  3. Write the checkpoint's manifest (a fixed name: a retry finds it),
//     a manifest list of it and the parent's manifests, and build vN+1
//     with one append snapshot, summary eosink.node/eosink.checkpoint,
//     snapshot id derived from (stream, node, checkpoint).
//  4. Publish vN+1 create-only (S3 If-None-Match: *, locally a rename
//     that never replaces). Taken: another node won the race, or an
//     earlier try of ours whose answer was lost: go to 1.
//  5. Raise the version hint to N+1.
//
// Appends never conflict, so a lost race is a reload and retry within the
// commit, not a failure. A crash anywhere leaves either no vN+1 (the
// replay appends) or a vN+1 holding the snapshot (the replay sees it in
// step 2): every checkpoint is in the table exactly once. Files written
// by a try that lost are never named by any metadata; readers ignore them.
//
// Field ids: the table schema's ids are the stream schema's positions
// from 1, which internal/format writes into the Parquet files; schemas
// only grow by optional fields at the end (streamconf.CheckChange).
package table
