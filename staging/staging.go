package staging

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path"
	"slices"
	"sort"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/spf13/afero"
)

// Suffix ends the name of every temp file: layout.TempSuffix.
const Suffix = layout.TempSuffix

// DefaultBufferSize is how much a Txn buffers before writing to its file.
const DefaultBufferSize = 256 << 10

// Errors returned by this package.
var (
	// ErrBroken means an earlier failure left the file in an unknown state;
	// the transaction can only be aborted.
	ErrBroken = errors.New("transaction broken by an earlier failure")
	// ErrClosed means the transaction was already pre-committed or aborted.
	ErrClosed = errors.New("transaction closed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Summary describes a pre-committed transaction file.
type Summary struct {
	Temp    string // path of the temp file
	Bytes   int64  // size in bytes
	Records int64  // number of records (lines)
	CRC32C  string // CRC-32C (Castagnoli) of the content, hex
	// Producers holds each producer's exact sequence numbers in the file,
	// as ascending, disjoint, inclusive [first, last] ranges.
	Producers map[string][][2]int64
	// Plain, for an encoded file (CreateEncoded), is the plain temp file it
	// was made from: unsynced, named by nothing, for the caller to remove.
	Plain string
}

// Txn is one open temp file.
type Txn struct {
	fs      afero.Fs
	name    string
	f       afero.File
	buf     []byte
	bufSize int
	written int64 // bytes in the file, all of whole batches
	records int64
	crc     uint32
	prod    map[string][][2]int64
	err     error // sticky: set when the file can no longer be trusted
	closed  bool
	enc     *encoder // encodes as batches arrive (CreateEncoded); nil if plain
}

// TempName returns the temp file name for a final base name, in dir.
func TempName(dir, finalBase string) string { return layout.TempName(dir, finalBase) }

// IsTemp reports whether name is a staging temp file name.
func IsTemp(name string) bool { return layout.IsTempName(name) }

// Create opens a new, empty temp file at name. It fails if the file exists.
// bufSize <= 0 means DefaultBufferSize.
func Create(fs afero.Fs, name string, bufSize int) (*Txn, error) {
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	f, err := fs.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, durable.Classify(fmt.Errorf("create staging file %s: %w", name, err))
	}
	return &Txn{fs: fs, name: name, f: f, bufSize: bufSize, prod: map[string][][2]int64{}}, nil
}

// Name returns the temp file's path.
func (t *Txn) Name() string { return t.name }

// Size returns the bytes appended so far, buffered or written. For an
// encoded Txn it is the encoded file's bytes so far plus the appended
// bytes not yet encoded: what roll_size is held to.
func (t *Txn) Size() int64 {
	if t.enc != nil {
		return t.enc.size(t.written + int64(len(t.buf)))
	}
	return t.written + int64(len(t.buf))
}

// Records returns the records appended so far.
func (t *Txn) Records() int64 { return t.records }

// Err returns the error that broke the transaction, if any: a failed
// write's, or a failed encoding step's (CreateEncoded).
func (t *Txn) Err() error {
	if t.err == nil && t.enc != nil {
		return t.enc.failed()
	}
	return t.err
}

// OnEncodeFail has f told the error of the first encoding step that
// fails (CreateEncoded; a plain Txn has none), from the step: a goroutine
// of the Encoders, or, for inline Encoders, inside the Append that made
// the step due. f must not block nor wait for the caller of Append. Set
// it before the first Append.
func (t *Txn) OnEncodeFail(f func(err error)) {
	if t.enc != nil {
		t.enc.onFail = f
	}
}

// Append adds one batch of records, each terminated by '\n'. producer is ""
// for batches sent without idempotence headers; otherwise seq is the batch's
// sequence number. On error nothing of the batch is in the file.
func (t *Txn) Append(data []byte, records int, producer string, seq int64) error {
	return t.AppendChecked(data, records, producer, seq, nil)
}

// AppendChecked is Append with c, what the write path's strict check found
// in the batch's records (nil: nothing): a Parquet Txn's encoder then takes
// the records' values from c instead of parsing them again. c is used only
// if it holds records records of the encoder's schema, and is dropped with
// the batch if the append fails. c must come from data's own bytes (the
// encoder trusts its numbers); its text values are read from the records
// the encoder reads back from the file, whose bytes pre-commit holds to the
// appended ones (CRC-32C), and a record c does not fit is parsed.
func (t *Txn) AppendChecked(data []byte, records int, producer string, seq int64, c *streamconf.Checked) error {
	if t.closed {
		return ErrClosed
	}
	if err := t.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, err)
	}
	if t.enc != nil && c != nil {
		// Queued before the write that may start a step over the batch,
		// and taken back if the batch is refused.
		if t.enc.keep(t.written+int64(len(t.buf)), c, records) {
			if err := t.append(data, records, producer, seq); err != nil {
				t.enc.unkeep()
				return err
			}
			return nil
		}
	}
	return t.append(data, records, producer, seq)
}

func (t *Txn) append(data []byte, records int, producer string, seq int64) error {
	if len(t.buf) == 0 && len(data) >= t.bufSize/2 {
		// A batch of half the buffer or more is written from the caller's
		// bytes: through the buffer it would go out in a write of its own
		// just the same, after a copy (issue 26: 200 KB batches).
		if err := t.write(data); err != nil {
			return err
		}
	} else if len(t.buf)+len(data) <= t.bufSize {
		t.buf = append(t.buf, data...)
	} else {
		// Write what is buffered, then the batch, as one write where
		// possible; a failure leaves the earlier batches in the buffer and
		// the file truncated back to whole batches.
		if len(t.buf) > 0 {
			if err := t.write(t.buf); err != nil {
				return err
			}
			t.buf = t.buf[:0]
		}
		if len(data) >= t.bufSize {
			if err := t.write(data); err != nil {
				return err
			}
		} else {
			t.buf = append(t.buf, data...)
		}
	}
	t.records += int64(records)
	t.crc = crc32.Update(t.crc, castagnoli, data)
	if producer != "" {
		// A producer's batches come in sequence order, but those that went
		// to another file or to none (empty) leave gaps.
		rs := t.prod[producer]
		if n := len(rs); n > 0 && rs[n-1][1]+1 == seq {
			rs[n-1][1] = seq
		} else {
			rs = append(rs, [2]int64{seq, seq})
		}
		t.prod[producer] = rs
	}
	return nil
}

// write appends p to the file. On a failed or short write it truncates the
// file back to t.written; if that fails too the transaction is broken.
func (t *Txn) write(p []byte) error {
	n, err := t.f.Write(p)
	if err == nil && n == len(p) {
		t.written += int64(n)
		if t.enc != nil {
			t.enc.advance(t.written)
		}
		return nil
	}
	if err == nil {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(p))
	}
	err = durable.Classify(fmt.Errorf("write staging file %s: %w", t.name, err))
	if n > 0 {
		if terr := t.f.Truncate(t.written); terr != nil {
			t.err = fmt.Errorf("truncate staging file %s after failed write: %w", t.name, terr)
			return err
		}
		if _, serr := t.f.Seek(t.written, 0); serr != nil {
			t.err = fmt.Errorf("seek staging file %s after failed write: %w", t.name, serr)
			return err
		}
	}
	return err
}

// PreCommit flushes the buffer, fsyncs and closes the file. The caller must
// still fsync the staging directory so the file's name is durable. After an
// error the transaction can only be aborted; a failed fsync is not retried.
func (t *Txn) PreCommit() (Summary, error) {
	if t.closed {
		return Summary{}, ErrClosed
	}
	if t.err != nil {
		return Summary{}, fmt.Errorf("%w: %w", ErrBroken, t.err)
	}
	if len(t.buf) > 0 {
		if err := t.write(t.buf); err != nil {
			t.err = err
			return Summary{}, err
		}
		t.buf = nil
	}
	t.closed = true
	if t.enc != nil {
		return t.preCommitEncoded()
	}
	if err := durable.SyncClose(t.f); err != nil {
		t.err = err
		return Summary{}, fmt.Errorf("pre-commit staging file: %w", err)
	}
	var sum [4]byte
	sum[0], sum[1], sum[2], sum[3] = byte(t.crc>>24), byte(t.crc>>16), byte(t.crc>>8), byte(t.crc)
	return Summary{Temp: t.name, Bytes: t.written, Records: t.records, CRC32C: hex.EncodeToString(sum[:]), Producers: t.producers()}, nil
}

// preCommitEncoded finishes, fsyncs and closes the encoded file; the plain
// one is closed unsynced: nothing names it.
func (t *Txn) preCommitEncoded() (Summary, error) {
	sum, err := t.enc.finish(t.written, t.records, t.crc)
	if err != nil {
		t.err = err
		t.enc.halt()
		_ = t.f.Close() // only read back, never named: its close error says nothing
		return Summary{}, fmt.Errorf("pre-commit staging file: %w", err)
	}
	_ = t.f.Close() // as above
	sum.Producers = t.producers()
	return sum, nil
}

func (t *Txn) producers() map[string][][2]int64 {
	prod := make(map[string][][2]int64, len(t.prod))
	for k, v := range t.prod {
		prod[k] = slices.Clone(v)
	}
	return prod
}

// Abort closes the file if open and deletes it, and the encoded one of an
// encoded Txn, after stopping its encoding. A missing file is not an error,
// so Abort can be repeated.
func (t *Txn) Abort() error {
	if !t.closed {
		t.closed = true
		_ = t.f.Close() // the file is deleted next; its close error says nothing useful
	}
	t.buf = nil
	if t.enc != nil {
		t.enc.halt()
		return errors.Join(Remove(t.fs, t.name), Remove(t.fs, t.enc.dst), t.enc.dropPages())
	}
	return Remove(t.fs, t.name)
}

// Remove deletes a temp file, ignoring a missing one.
func Remove(fs afero.Fs, name string) error {
	if err := fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove staging file %s: %w", name, err)
	}
	return nil
}

// List returns the temp files in dir, sorted. A missing dir is empty.
func List(fs afero.Fs, dir string) ([]string, error) {
	names, err := afero.ReadDir(fs, dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list staging directory %s: %w", dir, err)
	}
	var out []string
	for _, fi := range names {
		if !fi.IsDir() {
			out = append(out, path.Join(dir, fi.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// CRC32C returns the hex CRC-32C of data, as Summary reports it.
func CRC32C(data []byte) string {
	c := crc32.Checksum(data, castagnoli)
	return hex.EncodeToString([]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)})
}

// Key identifies a transaction within a checkpoint.
type Key struct {
	Stream    string
	Partition string // e.g. dt=2026-11-29/hour=09
	Ext       string // ndjson or txt
}

// Release closes the file without flushing or deleting it, as a crash would
// leave it; recovery deletes it later.
func (t *Txn) Release() {
	if !t.closed {
		t.closed = true
		_ = t.f.Close() // abandoned: recovery deletes the file
	}
	if t.enc != nil {
		t.enc.halt()
	}
	t.buf = nil
}
