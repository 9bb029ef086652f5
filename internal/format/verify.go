package format

import (
	"fmt"
	"io"

	"github.com/eosink/eosink/internal/streamconf"
)

// Encoded reports whether a committed file's name says its bytes are not
// the records themselves (gzip, zstd, Parquet): its records are counted by
// decoding it (CheckRecords), not by counting '\n' bytes.
func Encoded(name string) bool {
	format, compression, _, ok := streamconf.ParseExt(name)
	return ok && (format == streamconf.FormatParquet || compression != streamconf.CompressionNone)
}

// CheckRecords decodes a whole committed file and checks that it holds
// want records: the check `eosink verify` runs on every compressed and
// Parquet file (a complete file decodes cleanly; a truncated or damaged
// one does not). The error wraps ErrCorrupt when the file does not decode,
// and says both counts when they differ.
func CheckRecords(r io.ReaderAt, size int64, name string, want int64) error {
	n, err := Count(r, size, name)
	if err != nil {
		return fmt.Errorf("decode %s: %w", name, err)
	}
	if n != want {
		return fmt.Errorf("%s decodes to %d records, manifest says %d", name, n, want)
	}
	return nil
}
