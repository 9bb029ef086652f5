// Package staging owns eosink's temp files: one per transaction, that is per
// (stream, partition, extension) of one checkpoint, under <data>/staging.
//
// A transaction file is named
//
//	<data>/staging/part-<node>-<checkpoint:020d>-<index:04d>.<ext>.inprogress
//
// after the final file it will become, so the name alone tells recovery which
// checkpoint it belongs to. Appends are buffered; a batch is appended whole or
// not at all: when a write fails, the file is truncated back to the last whole
// batch and the batch is refused. PreCommit flushes, fsyncs and closes the file
// and reports its size, record count, CRC-32C and the producer sequence ranges
// it holds. Abort closes and deletes it. Files never live under the destination.
//
// A temp file is always plain NDJSON or text. A compressed or Parquet
// transaction (CreateEncoded) also encodes its batches as they arrive, in
// background steps, into a second temp file named EncodedName(temp), and
// its PreCommit only finishes, fsyncs and closes that one (see stream.go
// for the steps and why). A Parquet transaction's encoder keeps the row
// group it is building in a third, scratch temp file, PagesName(temp),
// deleted at PreCommit and by Abort. Encode (encode.go) makes the same file from a
// whole plain one, for tools and tests. The codecs themselves (gzip, zstd, Parquet, and the readers previews and
// `eosink verify` use) are internal/format's. The format of a file is
// named by its extension (streamconf.Ext, streamconf.ParseExt).
//
// A Txn is not safe for concurrent use; the coordinator serialises appends.
package staging
