package staging

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/spf13/afero"
)

// Encoding a whole plain file.
//
// The engine no longer calls Encode: its transactions encode as batches
// arrive (CreateEncoded, stream.go), because encoding at pre-commit made a
// Parquet checkpoint take 4.5x a plain one (issue 26; BENCHMARKS.md). Encode
// stays for tools and tests, and as the reference the streaming encoder is
// held to; what follows is how it was wired and why, kept for the record.
//
// A transaction's temp file is always plain NDJSON or text, appended batch
// by batch as Txn does (whole batches, truncate on failure). At pre-commit,
// after Txn.PreCommit has synced and closed it, Encode turns it into the
// final encoding as a second temp file, EncodedName(temp), written with the
// durable recipe (buffered writes, flush, Sync, checked Close). The wiring:
//
//	sum, err := txn.PreCommit()          // plain temp synced and closed
//	enc, err := staging.Encode(fs, sum, staging.EncodedName(sum.Temp), e)
//	durable.SyncDir(fs, stagingDir)      // the new name is durable
//	record prepared N with enc (its Temp, Bytes, Records, CRC32C)
//	staging.Remove(fs, sum.Temp)         // any time after; recovery deletes
//	                                     // unnamed temp files anyway
//
// The prepared record names the encoded file only, so the plain file is an
// ordinary orphan for recovery, and a crash during Encode leaves two
// orphans. Encode checks the plain file's CRC-32C and record count against
// the Summary before it writes anything final: a temp file changed on disk
// is refused (ErrSourceChanged), not encoded.
//
// Why re-encode at pre-commit rather than compress at ingest. Measured with
// BenchmarkEncode and BenchmarkIngestFrames (8 MiB of distinct order
// records, 2 loaded cores, CPU time): zstd streams at ~95-140 CPU-MB/s,
// gzip ~130; per-flush zstd frames (256 KiB, Txn's buffer) ~175 and gzip
// members ~160, and the frames compress as well as one stream (out/in
// 0.196 vs 0.201 zstd, 0.186 vs 0.185 gzip): frames concatenate into valid
// files (OpenRecords reads them) and cost nothing in ratio. The choice is
// about where the CPU goes. At ingest it runs on the write path, ~1.5 ms
// per 256 KiB flush inside the append (under the engine's ingest lock), and
// Txn's truncate-on-failure must then cut at frame boundaries. At
// pre-commit it adds about roll_size / 100 MB/s to the checkpoint (64 MiB:
// ~0.6 s of CPU), which a wait=commit client sees, and doubles the staging
// space of a file for a moment. Parquet can only be written whole, at
// pre-commit. So the wiring should re-encode at pre-commit for every
// format (one path, Txn untouched, writes never slowed), encode a
// checkpoint's files concurrently (two cores), and say in the docs that a
// compressed or Parquet stream's commit latency grows with roll_size;
// per-flush frames remain the fix if that latency turns out to matter.

// encodeBufferSize is the size of Encode's read and write buffers.
const encodeBufferSize = 256 << 10

// The codecs are internal/format's; these names keep server/'s calls as
// they were.
type (
	// Encoding is format.Encoding.
	Encoding = format.Encoding
)

// MaxRecordBytes is format.MaxRecordBytes.
const MaxRecordBytes = format.MaxRecordBytes

// EncodingFor is format.EncodingFor.
func EncodingFor(c streamconf.Config) Encoding { return format.EncodingFor(c) }

// More errors of this package.
var (
	// ErrSourceChanged means a plain temp file does not hold what its
	// Summary says (size, CRC-32C or records): it changed after PreCommit.
	ErrSourceChanged = errors.New("staging file differs from its summary")
)

// EncodedName returns the name of the encoded temp file for the plain temp
// file temp: "<final>.enc.inprogress". It ends in Suffix, and starts with
// the final base name, so recovery treats it as any temp file of its
// checkpoint.
func EncodedName(temp string) string {
	return strings.TrimSuffix(temp, Suffix) + ".enc" + Suffix
}

// PagesName returns the name of the scratch file in which a Parquet
// file's encoder keeps the compressed pages of the row group it is
// building, for the plain temp file temp: "<final>.pages.inprogress". Like
// EncodedName's, it ends in Suffix and starts with the final base name:
// recovery deletes it with the other temp files, and no checkpoint ever
// names it.
func PagesName(temp string) string {
	return strings.TrimSuffix(temp, Suffix) + ".pages" + Suffix
}

// Encode writes the plain temp file src.Temp to dst in encoding e and
// returns dst's Summary: its size, the CRC-32C of its bytes, the record
// count, and src's producers. dst must not exist. On error dst is removed
// (best effort) and the caller aborts the transaction; a failed Sync is not
// retried. Memory: gzip and zstd stream through fixed buffers (about 1 MiB
// for zstd's window and state, 256 KiB of gzip state, plus two 256 KiB I/O
// buffers); Parquet holds one row group (see DefaultRowGroupBytes).
func Encode(fs afero.Fs, src Summary, dst string, e Encoding) (Summary, error) {
	in, err := fs.Open(src.Temp)
	if err != nil {
		return Summary{}, fmt.Errorf("open staging file %s: %w", src.Temp, err)
	}
	defer in.Close() // read only: its close error says nothing about data

	f, err := fs.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return Summary{}, durable.Classify(fmt.Errorf("create encoded file %s: %w", dst, err))
	}
	out := &countingWriter{w: f}
	bw := bufio.NewWriterSize(out, encodeBufferSize)
	srcCheck := &countingWriter{w: io.Discard, lines: true}
	r := io.TeeReader(bufio.NewReaderSize(in, encodeBufferSize), srcCheck)

	records, err := format.Encode(bw, r, e)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		if e.Format != streamconf.FormatParquet {
			records = srcCheck.records
		}
		err = checkSource(src, srcCheck, records)
	}
	if err != nil {
		_ = f.Close()      // the file is removed next
		_ = fs.Remove(dst) // best effort: recovery deletes unnamed temp files
		return Summary{}, durable.Classify(fmt.Errorf("encode %s: %w", src.Temp, err))
	}
	if err := durable.SyncClose(f); err != nil {
		_ = fs.Remove(dst)
		return Summary{}, fmt.Errorf("encode %s: %w", src.Temp, err)
	}
	return Summary{Temp: dst, Bytes: out.n, Records: records, CRC32C: hexCRC(out.crc), Producers: src.Producers}, nil
}

func checkSource(src Summary, got *countingWriter, records int64) error {
	switch {
	case got.n != src.Bytes:
		return fmt.Errorf("%w: %d bytes, summary says %d", ErrSourceChanged, got.n, src.Bytes)
	case hexCRC(got.crc) != src.CRC32C:
		return fmt.Errorf("%w: CRC-32C %s, summary says %s", ErrSourceChanged, hexCRC(got.crc), src.CRC32C)
	case got.records != src.Records || records != src.Records:
		return fmt.Errorf("%w: %d lines (%d encoded), summary says %d records", ErrSourceChanged, got.records, records, src.Records)
	}
	return nil
}

func hexCRC(c uint32) string {
	return hex.EncodeToString([]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)})
}

// countingWriter counts and checksums what passes through it, and with
// lines set counts '\n' bytes.
type countingWriter struct {
	w       io.Writer
	n       int64
	crc     uint32
	lines   bool
	records int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	if c.lines {
		c.records += int64(bytes.Count(p[:n], []byte{'\n'}))
	}
	return n, err
}
