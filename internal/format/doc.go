// Package format owns eosink's file formats as bytes: the extension →
// media type table (MediaType, used by the API's downloads and the S3
// committer's uploads alike) and the decompression of committed files by
// their extension (Decompress, used by the UI's previews).
//
// The formats a stream configuration names, and the extensions they map
// to, are internal/streamconf's (streamconf.Ext, streamconf.ParseExt).
package format
