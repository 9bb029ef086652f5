package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Content codings of write bodies (DESIGN "Write request"): gzip and zstd,
// decoded while the body is read, so every limit applies to the decoded
// bytes and a decompression bomb is refused (413) once it passes the limit,
// never inflated beyond it.

// zstdMaxWindow bounds the memory a zstd frame may ask for. 8 MiB is
// zstd's window at its standard levels (up to 19); a frame that needs more
// (--long, --ultra) is refused as undecodable. A zstd body holds this much
// of the in-flight body budget while it is read, on top of its bytes.
const zstdMaxWindow = 8 << 20

// errDecode: the body does not decode in its Content-Encoding.
var errDecode = errors.New("body does not decode")

// errUnsupportedEncoding: a Content-Encoding the service does not decode.
var errUnsupportedEncoding = errors.New("unsupported content encoding")

// bodyCoding returns the one content coding of a write body ("" for
// identity), from every Content-Encoding line. Stacked codings are refused.
func bodyCoding(values []string) (string, error) {
	coding := ""
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
				continue
			case "x-gzip":
				c = "gzip"
			case "gzip", "zstd":
			default:
				return "", fmt.Errorf("Content-Encoding %q: %w; send gzip, zstd or identity", c, errUnsupportedEncoding)
			}
			if coding != "" {
				return "", fmt.Errorf("Content-Encoding %q after %q: %w; send one coding", c, coding, errUnsupportedEncoding)
			}
			coding = c
		}
	}
	return coding, nil
}

// decodedBody reads src decoded from coding, at most limit decoded bytes:
// more is an *http.MaxBytesError. A body that does not decode is an error
// wrapping errDecode, so a truncated stream is never taken for its end.
type decodedBody struct {
	dec   io.Reader
	close func()
	left  int64
	limit int64
}

func newDecodedBody(coding string, src io.Reader, limit int64) (*decodedBody, error) {
	d := &decodedBody{left: limit, limit: limit, close: func() {}}
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, classifyDecode(err)
		}
		d.dec, d.close = zr, func() { _ = zr.Close() }
	case "zstd":
		zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, fmt.Errorf("start zstd decoder: %w", err)
		}
		d.dec, d.close = zr, zr.Close
	default:
		return nil, fmt.Errorf("Content-Encoding %q: %w", coding, errUnsupportedEncoding)
	}
	return d, nil
}

func (d *decodedBody) Read(p []byte) (int, error) {
	if d.left <= 0 {
		// One byte more than the limit tells a body over it from one at it.
		var one [1]byte
		n, err := d.dec.Read(one[:])
		if n > 0 {
			return 0, &http.MaxBytesError{Limit: d.limit}
		}
		if err == nil {
			return 0, nil
		}
		return 0, classifyDecode(err)
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.dec.Read(p)
	d.left -= int64(n)
	if err != nil {
		err = classifyDecode(err)
	}
	return n, err
}

// classifyDecode keeps the end of the body, a raw body over the limit and
// a read deadline as they are, and makes anything else errDecode.
func classifyDecode(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case err == io.EOF, errors.As(err, &mbe), errors.Is(err, os.ErrDeadlineExceeded):
		return err
	}
	// %v: a decoder's io.ErrUnexpectedEOF must not read as the body's end.
	return fmt.Errorf("%w: %v", errDecode, err)
}
