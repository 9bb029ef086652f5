package format

import (
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// Preview bounds of a Parquet file. A file in the destination may be one
// eosink did not write, and the Parquet reader allocates what a page
// header claims (a compressed page of 2 GiB is a 2 GiB buffer) before it
// reads a byte of it: Preview first walks the page headers of the pages
// it will read, from the file's own metadata, and refuses the file when
// one claims more than these. eosink's own pages are about 256 KiB (one
// record can make one larger).
const (
	// PreviewMaxPage bounds one page, compressed or not, in bytes.
	PreviewMaxPage = 16 << 20
	// previewMaxRead bounds the pages a preview reads, all columns
	// together, compressed and uncompressed sizes summed.
	previewMaxRead = 64 << 20
	// previewMaxValues bounds the values one page claims: levels and
	// value slots are allocated by count, and run-length encoding makes a
	// count of billions cost a few bytes.
	previewMaxValues = 1 << 21
	// previewMaxPages bounds the pages walked per column chunk.
	previewMaxPages = 4096
	// previewHeaderFirst and PreviewMaxPage bound the bytes read to decode
	// one page header (statistics make it grow with the values).
	previewHeaderFirst = 64 << 10
)

// ErrTooLargeToPreview means a file's pages claim more memory than a
// preview may take; it may still be downloaded.
var ErrTooLargeToPreview = errors.New("pages too large to preview")

// checkPreview walks the page headers of the pages a preview of rows rows
// reads and refuses the file if one claims more than the preview bounds.
func (p *parquetRecords) checkPreview(r io.ReaderAt, size int64, rows int) error {
	need := int64(rows)
	var read int64
	for _, rg := range p.f.Metadata().RowGroups {
		if need <= 0 {
			break
		}
		want := min(need, rg.NumRows)
		for i := range rg.Columns {
			cm := &rg.Columns[i].MetaData
			// Where the reader starts: the dictionary page if any.
			base := cm.DataPageOffset
			if cm.DictionaryPageOffset != 0 {
				base = cm.DictionaryPageOffset
			}
			end := base + cm.TotalCompressedSize
			if base < 0 || cm.TotalCompressedSize < 0 || end < base || end > size {
				return fmt.Errorf("%w: column chunk at %d of %d bytes in a file of %d", ErrCorrupt, base, cm.TotalCompressedSize, size)
			}
			var got int64
			for pages, off := 0, base; off < end && got < want; pages++ {
				if pages == previewMaxPages {
					return fmt.Errorf("%w: over %d pages before row %d", ErrTooLargeToPreview, previewMaxPages, want)
				}
				h, n, err := readPageHeader(r, off, end)
				if err != nil {
					return err
				}
				values := int32(0)
				switch {
				case h.DataPageHeader.Valid:
					values = h.DataPageHeader.V.NumValues
					got += int64(values)
				case h.DataPageHeaderV2.Valid:
					values = max(h.DataPageHeaderV2.V.NumValues, h.DataPageHeaderV2.V.NumRows)
					got += int64(h.DataPageHeaderV2.V.NumRows)
				case h.DictionaryPageHeader.Valid:
					values = h.DictionaryPageHeader.V.NumValues
				}
				if h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 || values < 0 {
					return fmt.Errorf("%w: page at %d: negative size or count", ErrCorrupt, off)
				}
				if h.CompressedPageSize > PreviewMaxPage || h.UncompressedPageSize > PreviewMaxPage || values > previewMaxValues {
					return fmt.Errorf("%w: page at %d claims %d bytes (%d uncompressed) and %d values; a preview reads pages of at most %d bytes and %d values",
						ErrTooLargeToPreview, off, h.CompressedPageSize, h.UncompressedPageSize, values, PreviewMaxPage, previewMaxValues)
				}
				if read += int64(h.CompressedPageSize) + int64(h.UncompressedPageSize); read > previewMaxRead {
					return fmt.Errorf("%w: the first %d rows take over %d bytes of pages", ErrTooLargeToPreview, rows, previewMaxRead)
				}
				off += n + int64(h.CompressedPageSize)
			}
		}
		need -= want
	}
	return nil
}

// readPageHeader decodes the page header at off, before end, from a
// window of the file that grows up to PreviewMaxPage bytes: the header's
// own lengths (statistics) can then claim no more than the window holds.
// It returns the header and its length.
func readPageHeader(r io.ReaderAt, off, end int64) (*pqformat.PageHeader, int64, error) {
	var proto thrift.CompactProtocol
	for window := int64(previewHeaderFirst); ; window *= 4 {
		window = min(window, end-off, PreviewMaxPage)
		buf := make([]byte, window)
		if n, err := r.ReadAt(buf, off); int64(n) < window {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, 0, fmt.Errorf("read Parquet page header: %w", err)
		}
		br := proto.NewReaderFromBytes(buf)
		h := new(pqformat.PageHeader)
		err := thrift.NewDecoder(br).Decode(h)
		if err == nil {
			return h, int64(br.BytesRead()), nil
		}
		switch {
		case window == end-off:
			return nil, 0, fmt.Errorf("%w: page header at %d: %w", ErrCorrupt, off, err)
		case window == PreviewMaxPage:
			return nil, 0, fmt.Errorf("%w: page header at %d over %d bytes", ErrTooLargeToPreview, off, PreviewMaxPage)
		}
	}
}
