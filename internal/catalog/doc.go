// Package catalog is the one read model of committed files: what api/,
// web/ and `eosink verify` know of the destination.
//
// It owns
//   - paged listings of committed files, folders and streams (limit/after,
//     as the HTTP API's lists), built on a committer's Reader and, when it
//     has one, its Pager;
//   - the manifest cache: one per process, bounded by an estimate of the
//     bytes its parsed manifests hold (manifests are immutable, so entries
//     never go stale; absent ones are not cached);
//   - per-stream statistics, from the destination (Streams) or from the
//     newest checkpoints of the state store (Active);
//   - checkpoint lookups: this node's rows from the engine (State), every
//     node's manifests from the destination;
//   - node status from the leases _nodes/<node>.json;
//   - Verify: every manifest's files exist with the bytes, records and
//     CRC-32C it names, and no file is in no manifest;
//   - the commit feed (feed.go, its cursor in cursor.go, the long poll in
//     feedwait.go): every node's manifests, each once along a chain of
//     cursors, and LocateSeq (seqs.go): which file holds a producer's
//     batch.
//
// It covers every node's manifests under _manifests/<node>/, not only this
// node's. Names are parsed by internal/layout only.
//
// A Catalog is safe for concurrent use.
package catalog
