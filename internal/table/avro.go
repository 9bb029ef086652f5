package table

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Avro object container files (manifests, manifest lists) are written
// uncompressed (codec "null"), whatever iceberg-go's writers chose:
// iceberg-go v0.7.0 always deflates, and npm icebird 0.3.1 cannot inflate
// what Go's compress/flate writes, while every Iceberg reader reads the
// null codec (the Avro spec requires it). Manifests are small next to the
// data they list, so the bytes saved by deflate matter less than readers.
//
// uncompressOCF rewrites an OCF file block by block: the header's
// avro.codec becomes "null", each deflate block is inflated, and the sync
// marker is derived from the content, so the same records give the same
// bytes (a retried commit can compare what it finds).

var ocfMagic = []byte{'O', 'b', 'j', 1}

// errOCF means bytes that are not the Avro container file they should be.
var errOCF = errors.New("not an Avro object container file")

func uncompressOCF(in []byte) ([]byte, error) {
	r := &ocfReader{b: in}
	if !bytes.HasPrefix(in, ocfMagic) {
		return nil, errOCF
	}
	r.off = len(ocfMagic)
	type kv struct{ k, v []byte }
	var meta []kv
	codec := "null"
	for {
		n, err := r.long()
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		if n < 0 {
			n = -n
			if _, err := r.long(); err != nil { // the block's size in bytes
				return nil, err
			}
		}
		for ; n > 0; n-- {
			k, v, err := two(r.bytes)
			if err != nil {
				return nil, err
			}
			if string(k) == "avro.codec" {
				codec = string(v)
				v = []byte("null")
			}
			meta = append(meta, kv{k, v})
		}
	}
	if codec != "null" && codec != "deflate" {
		return nil, fmt.Errorf("%w: codec %q", errOCF, codec)
	}
	sync, err := r.take(16)
	if err != nil {
		return nil, err
	}
	type block struct {
		count int64
		data  []byte
	}
	var blocks []block
	sum := sha256.New()
	for r.off < len(in) {
		count, size, err := two(r.long)
		if err != nil {
			return nil, err
		}
		if size < 0 || size > int64(len(in)-r.off) {
			return nil, fmt.Errorf("%w: block of %d bytes", errOCF, size)
		}
		data, _ := r.take(int(size))
		if codec == "deflate" {
			if data, err = io.ReadAll(flate.NewReader(bytes.NewReader(data))); err != nil {
				return nil, fmt.Errorf("inflate Avro block: %w", err)
			}
		}
		marker, err := r.take(16)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(marker, sync) {
			return nil, fmt.Errorf("%w: bad sync marker", errOCF)
		}
		sum.Write(data)
		blocks = append(blocks, block{count, data})
	}
	var out bytes.Buffer
	out.Write(ocfMagic)
	putLong(&out, int64(len(meta)))
	for _, m := range meta {
		putBytes(&out, m.k)
		putBytes(&out, m.v)
	}
	putLong(&out, 0)
	marker := sum.Sum(nil)[:16]
	out.Write(marker)
	for _, b := range blocks {
		putLong(&out, b.count)
		putLong(&out, int64(len(b.data)))
		out.Write(b.data)
		out.Write(marker)
	}
	return out.Bytes(), nil
}

type ocfReader struct {
	b   []byte
	off int
}

func (r *ocfReader) long() (int64, error) {
	u, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad varint at %d", errOCF, r.off)
	}
	r.off += n
	return int64(u>>1) ^ -int64(u&1), nil
}

func (r *ocfReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("%w: truncated at %d", errOCF, r.off)
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *ocfReader) bytes() ([]byte, error) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	return r.take(int(n))
}

// two reads two values with read, one after the other: a metadata key
// and its value, a block's count and size.
func two[T any](read func() (T, error)) (a, b T, err error) {
	if a, err = read(); err == nil {
		b, err = read()
	}
	return a, b, err
}

func putLong(w *bytes.Buffer, v int64) {
	var buf [binary.MaxVarintLen64]byte
	w.Write(buf[:binary.PutUvarint(buf[:], uint64(v<<1)^uint64(v>>63))])
}

func putBytes(w *bytes.Buffer, b []byte) {
	putLong(w, int64(len(b)))
	w.Write(b)
}
