// Package format owns eosink's file formats as bytes, used by staging, the
// catalog, the UI and the invariant checker:
//
//   - the codecs: Encode turns plain records (NDJSON or text lines) into
//     gzip, zstd or Parquet (encode.go, parquet.go); OpenRecords, Count,
//     Preview and CheckRecords read a committed file back by its extension
//     (decode.go, preview.go, verify.go);
//   - the extension → media type table (MediaType), which the API's
//     downloads and the S3 committer's uploads both use;
//   - Decompress, the streaming reader of a gzip or zstd file's start for
//     the UI's previews.
//
// The formats a stream configuration names, and the extensions they map
// to, are internal/streamconf's (streamconf.Ext, streamconf.ParseExt).
// Temp files, and the order of steps that makes an encoded one durable,
// are staging's.
package format
