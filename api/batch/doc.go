// Package batch turns the body of one write request into the bytes that are
// appended to a stream's file.
//
// It owns the write request rules of the HTTP API (docs/design.md, "HTTP API v1"):
// which Content-Types are accepted, what counts as a record, which records
// are refused and with which error. It does no I/O and keeps no state; the
// api package maps its errors to statuses and staging appends [Batch.Data].
//
// # Media types
//
// The media type is compared case-insensitively; parameters such as
// "; charset=utf-8" are ignored.
//
//	application/x-ndjson  NDJSON: one JSON value per line    -> .ndjson
//	application/ndjson    accepted as a synonym of x-ndjson  -> .ndjson
//	application/json      one JSON array, one record/element -> .ndjson
//	text/plain            raw lines, not checked             -> .txt
//
// Anything else, an empty Content-Type included, is
// [ErrUnsupportedMediaType].
//
// # Records
//
// A physical line is a run of bytes ended by '\n' or by the end of the body.
// One trailing '\r' is dropped from every line, so "\r\n" bodies are stored
// with "\n" endings.
//
//   - NDJSON: a line that is empty, or holds only JSON whitespace (space,
//     tab, '\r'), is skipped. Every other line must be exactly one valid JSON
//     value and is stored as sent (not re-encoded), minus the trailing '\r'.
//     JSON text is UTF-8 (RFC 8259): a line holding bytes that are not
//     UTF-8, in a string or anywhere, is not valid JSON.
//   - JSON array: the body must be one JSON array. Each element is stored as
//     one line, compacted as by [encoding/json.Compact] (insignificant
//     whitespace removed, nothing escaped or reordered); its bytes must be
//     UTF-8, like an NDJSON line's. "[]" is a valid,
//     empty batch.
//   - text/plain: every line is a record, empty lines included, unchecked.
//     Only the empty segment after a final '\n' is not a record, so "a\nb\n"
//     and "a\nb" are both two records and "a\n\nb" is three.
//
// # Output
//
// [Batch.Data] holds every record followed by '\n', in body order: the exact
// bytes to append. Its length is the byte count and [Batch.Records] the line
// count that go into a file's manifest entry.
//
// # Limits and errors
//
// A body longer than [Limits.MaxBody], or a record (as stored, without its
// '\n') longer than [Limits.MaxRecord], is [ErrTooLarge]. A record that is
// not valid JSON is [ErrInvalidJSON]. Errors about one line are a
// [*LineError] whose Line is 1-based and counts every physical line of the
// body, skipped ones included; when a body has several bad lines, the first
// one is reported. Use [errors.Is] for the class and [errors.As] for the line.
package batch
