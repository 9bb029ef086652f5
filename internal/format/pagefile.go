package format

import (
	"errors"
	"fmt"
	"io"
)

// PageFile is where a ParquetWriter keeps the compressed pages of the row
// group it is building, instead of the heap (NewParquetWriterPages): a
// scratch file, written from offset 0 again for each row group. Nothing
// in it needs to survive a crash: the row group is re-derived from the
// records, or the file aborted.
type PageFile interface {
	io.ReaderAt
	io.WriterAt
}

// pageFilePool is a parquet.BufferPool whose buffers are lists of extents
// of one PageFile. parquet-go takes a buffer per column at the column's
// first page in a row group, appends its pages, reads it once when it
// writes the row group, and puts every buffer back before the next row
// group starts: once none is out, the file is reused from offset 0, so it
// is as large as the largest row group's compressed pages.
//
// Writes are gathered in pend and go to the file pageFileIO bytes at a
// time, and the row group's write reads it back in reads of as much
// through the same memory (no page is written while a row group is being
// written): system calls, not bytes, are most of the file's cost. Used by
// one ParquetWriter, which is not used concurrently: no lock.
type pageFilePool struct {
	f    PageFile
	end  int64  // the file's bytes in use, pend's included
	pend []byte // the bytes at [end-len(pend), end), not yet written; WriteTo's reads
	out  int    // buffers taken and not put back
	err  error  // sticky: a failed write or read of f
}

const pageFileIO = 256 << 10 // pend's capacity

func newPageFilePool(f PageFile) *pageFilePool {
	return &pageFilePool{f: f}
}

func (p *pageFilePool) GetBuffer() io.ReadWriteSeeker {
	p.out++
	return &pageFileBuffer{p: p}
}

func (p *pageFilePool) PutBuffer(b io.ReadWriteSeeker) {
	pb, ok := b.(*pageFileBuffer)
	if !ok || pb.p != p {
		return
	}
	pb.p, pb.ext = nil, nil
	if p.out--; p.out == 0 {
		// The row group is written (or abandoned): its pages are not
		// needed again, and the next group starts at 0.
		p.end, p.pend = 0, p.pend[:0]
	}
}

// flush writes pend.
func (p *pageFilePool) flush() error {
	if p.err != nil {
		return p.err
	}
	if len(p.pend) == 0 {
		return nil
	}
	if _, err := p.f.WriteAt(p.pend, p.end-int64(len(p.pend))); err != nil {
		p.err = fmt.Errorf("write Parquet page file: %w", err)
		return p.err
	}
	p.pend = p.pend[:0]
	return nil
}

// add appends b to the file and returns where it went.
func (p *pageFilePool) add(b []byte) (int64, error) {
	if p.err != nil {
		return 0, p.err
	}
	off := p.end
	if p.pend == nil {
		p.pend = make([]byte, 0, pageFileIO)
	}
	if len(p.pend)+len(b) > pageFileIO {
		// pend is filled up first: the file is written in whole
		// pageFileIO pieces.
		k := pageFileIO - len(p.pend)
		p.pend = append(p.pend, b[:k]...)
		p.end += int64(k)
		b = b[k:]
		if err := p.flush(); err != nil {
			return 0, err
		}
	}
	if len(b) < pageFileIO {
		p.pend = append(p.pend, b...)
		p.end += int64(len(b))
		return off, nil
	}
	if _, err := p.f.WriteAt(b, p.end); err != nil {
		p.err = fmt.Errorf("write Parquet page file: %w", err)
		return 0, p.err
	}
	p.end += int64(len(b))
	return off, nil
}

// extent is a run of a buffer's bytes in the file.
type extent struct{ off, n int64 }

// pageFileBuffer is one column's pages of a row group: appended to,
// then read from the start.
type pageFileBuffer struct {
	p    *pageFilePool
	ext  []extent
	size int64
	seek int64
}

var errPageFileBuffer = errors.New("parquet page file buffer: write not at its end, or after it was put back")

func (b *pageFileBuffer) Write(data []byte) (int, error) {
	if b.p == nil || b.seek != b.size {
		return 0, errPageFileBuffer
	}
	if len(data) == 0 {
		return 0, nil
	}
	off, err := b.p.add(data)
	if err != nil {
		return 0, err
	}
	n := int64(len(data))
	if k := len(b.ext); k > 0 && b.ext[k-1].off+b.ext[k-1].n == off {
		b.ext[k-1].n += n
	} else {
		b.ext = append(b.ext, extent{off, n})
	}
	b.size += n
	b.seek = b.size
	return len(data), nil
}

// at returns the part of the extent holding the buffer's byte pos: its
// offset in the file and how many bytes of it follow pos.
func (b *pageFileBuffer) at(pos int64) (off, n int64) {
	for _, e := range b.ext {
		if pos < e.n {
			return e.off + pos, e.n - pos
		}
		pos -= e.n
	}
	return 0, 0
}

func (b *pageFileBuffer) Read(dst []byte) (int, error) {
	if b.p == nil {
		return 0, errPageFileBuffer
	}
	if b.seek >= b.size {
		return 0, io.EOF
	}
	if len(dst) == 0 {
		return 0, nil
	}
	if err := b.p.flush(); err != nil {
		return 0, err
	}
	off, n := b.at(b.seek)
	n = min(n, int64(len(dst)))
	got, err := b.p.f.ReadAt(dst[:n], off)
	b.seek += int64(got)
	if got == int(n) {
		return got, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return got, fmt.Errorf("read Parquet page file: %w", err)
}

// WriteTo copies the rest of the buffer to w (the row group's write: io.Copy
// uses it) through the pool's pend, empty once flushed.
func (b *pageFileBuffer) WriteTo(w io.Writer) (int64, error) {
	if b.p == nil {
		return 0, errPageFileBuffer
	}
	if err := b.p.flush(); err != nil {
		return 0, err
	}
	if b.p.pend == nil {
		b.p.pend = make([]byte, 0, pageFileIO)
	}
	scratch := b.p.pend[:cap(b.p.pend)]
	var total int64
	for b.seek < b.size {
		n, err := b.Read(scratch)
		if err != nil {
			return total, err
		}
		m, err := w.Write(scratch[:n])
		total += int64(m)
		if err == nil && m != n {
			err = io.ErrShortWrite
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (b *pageFileBuffer) Seek(offset int64, whence int) (int64, error) {
	var pos int64
	switch whence {
	case io.SeekStart:
		pos = offset
	case io.SeekCurrent:
		pos = b.seek + offset
	case io.SeekEnd:
		pos = b.size + offset
	default:
		return b.seek, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if pos < 0 {
		return b.seek, fmt.Errorf("seek: negative offset %d", pos)
	}
	b.seek = min(pos, b.size)
	return b.seek, nil
}
