// Package s3 commits staging files into an S3-compatible object store with
// minio-go: Prepare uploads the closed local staging file, Commit makes it
// visible under its final key in one create-only step, Abort deletes what
// Prepare made. It also publishes manifests create-only and lists and reads
// the destination.
//
// # Keys
//
//	<prefix>/<final>                        committed files and manifests
//	<prefix>/_staging/<node>/<final>        Copy mode: the staged upload
//
// With an empty prefix the keys start at the bucket root. List and Open
// never show anything under _staging/.
//
// # Modes
//
// Multipart (the default): Prepare starts a multipart upload on the final
// key, with the file's CRC-32C as x-amz-meta-crc32c, and uploads the file as
// parts of PartSize bytes (the last may be smaller; an empty file is one
// empty part), Parallel at a time. The upload id and parts go into the
// "prepared" record. Commit is CompleteMultipartUpload with If-None-Match: *.
// Until then S3 shows nothing: an incomplete upload is not an object.
//
// Copy: Prepare puts the file at its staging key and starts a multipart upload
// on the final key (no parts yet). Commit copies the staging object into that
// upload server-side (UploadPartCopy, up to 5 GiB per part, guarded by
// x-amz-copy-source-if-match on the staging object's ETag) and completes it
// with If-None-Match: *, then deletes the staging object. A plain CopyObject
// is not used: MinIO ignores If-None-Match on CopyObject and would overwrite
// a final object (verified against the pinned server; see TestMinIOConditions).
//
// Commit follows the File, not the configured mode: a File with a
// StagingKey is committed by copy, one without by completing its upload.
//
// # Create-only
//
// Every write that can make a final key visible is conditional on the key
// being absent, checked by the server atomically with the write:
//
//	Commit   CompleteMultipartUpload  If-None-Match: *
//	Publish  PutObject (single PUT)   If-None-Match: *
//	Lease    PutObject (single PUT)   If-None-Match: * to take, If-Match: <ETag> to renew
//
// Node leases (_nodes/<node>.json, lease.go) need the server to honour both
// conditions on PutObject; MinIO does (TestMinIOConditions). Before its first
// lease write the committer probes a scratch key under _nodes/ and, on a
// server that ignores either, answers committer.ErrUnsupported: the node
// refuses to start rather than run with a lease that fences nothing.
//
// A 412 PreconditionFailed from Complete means the key is taken: by this
// file (an earlier Commit whose answer was lost) or by other content. The
// object's size and x-amz-meta-crc32c tell which: the same means done, else
// committer.ErrConflict and the object is left as it is (I7). Prepare also
// refuses a final key that already exists (a HEAD, advisory only), so a
// checkpoint whose names are taken aborts instead of being prepared with no
// way to commit.
//
// # Idempotence and crashes
//
//   - Commit after success: Complete answers 412 (or NoSuchUpload); the
//     object matches; the staging object and the local temp are deleted
//     again, missing ones ignored.
//   - Commit when the upload or staging object is gone and nothing is final
//     (MinIO aborts uploads older than 24 h by default, so a commit held up
//     that long by an outage finds its upload gone): if the local staging
//     file is still there, it is uploaded again under a new upload id and
//     completed; otherwise committer.ErrLost. The new upload id is in no
//     record: a crash during this leaves an incomplete upload, which the
//     next try of Commit aborts first (every upload on the file's exact
//     keys), and the orphan sweep once the checkpoint has committed.
//   - The local staging file is removed only by Commit, after the object is
//     final, and by Abort: a crash anywhere before leaves it for recovery.
//   - Abort aborts f.UploadID and, because a crash can fall between the
//     request that created an upload and the state-store write that
//     recorded it, every other upload on the file's exact final and staging
//     keys (MinIO lists uploads for an exact key but ignores folder
//     prefixes); then deletes the staging object and the local temp. The
//     final key is never touched. Missing pieces are not errors.
//
// # Orphans
//
// Leftovers lists this node's incomplete uploads and staging objects for
// recovery and the orphan sweep (committer.Sweeper), which remove those
// no intent and no prepared checkpoint claims. A key is this node's when it
// is, under the prefix, a part file named part-<node>-…, a manifest under
// _manifests/<node>/, or under _staging/<node>/. Uploads are listed with an
// empty prefix and filtered here, because MinIO takes a
// ListMultipartUploads prefix as an exact key; MinIO answers an empty
// prefix from memory, so uploads begun before a MinIO restart are found
// only through the intents, by exact key. With an empty prefix the keys of
// other applications at the bucket root are only told apart by these
// names: nodes sharing a bucket root need ids no other writer uses.
// RemoveLeftover only aborts uploads and deletes objects under _staging/:
// a committed file is never touched (I7).
//
// # Errors
//
// minio-go errors are classified on the raw value (minio.ToErrorResponse does
// not unwrap): NoSuchKey and NoSuchUpload become committer.ErrNotFound where a
// caller asked for an object, PreconditionFailed becomes committer.ErrExists
// (Publish) or committer.ErrConflict (Commit), and network failures, time-outs,
// SlowDown, ConditionalRequestConflict and 5xx answers are wrapped with
// committer.ErrTransient.
package s3
