package catalog

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/eosink/eosink/internal/format"
)

// checkEncoded decodes a compressed or Parquet file of the destination and
// checks its record count (format.CheckRecords). Files opened as an
// io.ReaderAt (local files, S3 objects) are read in place; others are read
// whole into memory.
func checkEncoded(ctx context.Context, r Reader, name string, size, records int64) error {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	ra, ok := rc.(io.ReaderAt)
	if !ok {
		data, err := io.ReadAll(rc)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		ra = bytes.NewReader(data)
	}
	return format.CheckRecords(ra, size, name, records)
}
