package staging

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/spf13/afero"
)

// Encoding as records arrive.
//
// A Txn made by CreateEncoded still appends its batches to a plain temp
// file, exactly as Create's (whole batches, truncate on failure, sticky
// error), and also encodes them, in the background, into a second temp
// file EncodedName(temp): each time DefaultStepBytes more of whole batches
// are in the plain file, a step reads them back (from the page cache) and
// feeds them to the codec. Parquet keeps one writer per file and writes a
// row group each RowGroupBytes of records; gzip and zstd write each step as
// an independent member or frame (format.Framer), which concatenate into a
// valid file, so no codec state lives between steps. PreCommit then only
// encodes what arrived since the last step, writes the last row group and
// the footer, and fsyncs and closes the encoded file: the plain one is
// neither synced nor named by the prepared record, only read.
//
// Why read back rather than encode in Append: Append stays what it was (a
// batch is in the plain file whole or not at all, a failed write truncates
// back and refuses only that batch), the encoder never sees part of a
// batch, and no encoding CPU runs on the write path under the engine's
// ingest lock. Steps run on an Encoders: at most n at once, each with its
// slot's buffers and codec state, so the memory of encoding is at most n
// slots (as many as steps ran at once lately, one at least) plus,
// per open Parquet file, its row group being built (a page buffer per
// column on the heap; the compressed pages in the page file below), not a
// file's size.
//
// A Parquet file's row group waits as compressed pages, one run per
// column, until it is complete and written in column order. They wait in
// a scratch file, PagesName(temp), beside the plain one (page cache, not
// process memory; format.NewParquetWriterPages), written from offset 0
// again for each row group and never synced: the encoded file's bytes are
// the same as with the pages on the heap.
//
// A Parquet file's records are parsed once: the write path's schema check
// keeps what it found (streamconf.Checked) and AppendChecked queues it with
// the batch, so a step takes each record's values from the queue and only
// reads the bytes back; a record the queue does not cover (none given, the
// budget spent, another length) is parsed as before. The queue is a cache:
// memory only, dropped with a refused batch, an aborted or finished file.
//
// Crash safety is the plain staging's: until the prepared record names the
// encoded file, both are temp files no prepared checkpoint names, deleted by
// the abort or by recovery. The page file is one too, and is deleted before
// the encoded file is synced: pre-commit writes durably what it did
// without it (the encoded file, then the prepared record), and a crash
// anywhere leaves it to recovery, which deletes every temp file. A failed step (a read or write error, a record
// the codec refuses) is sticky: PreCommit returns it and the checkpoint
// aborts; no step ever fsyncs, and the final fsync is not retried. It is
// not kept from the caller until then: from the step's end, Err returns
// it and Append refuses every batch with it (the file can't be finished:
// nothing more may be accepted into it), and OnEncodeFail's function is
// told at once, so the caller can end the file's checkpoint without
// waiting for a write or the pre-commit to find it.

// DefaultStepBytes is how much of whole batches a background step waits
// for: a zstd or gzip frame covers at least this much, and at most this
// much plus what arrives during a step is left to encode at pre-commit.
const DefaultStepBytes = 1 << 20

// Encoders runs the encoding steps of Txns: at most n at once, each in a
// slot that holds its buffers and codec state. Safe for concurrent use.
type Encoders struct {
	// The slots not in use, the one released last on top: a step takes
	// it, so that one slot's buffers and codec state serve a lone file's
	// steps and another's are made only when steps run at once. A slot
	// idle for slotIdle while another is idle lets its memory go (made
	// again when next taken): an overlap now and then (a checkpoint's
	// last step beside the next file's first) then does not keep a
	// second set for good, while steady concurrent files keep theirs.
	mu    sync.Mutex
	freed sync.Cond
	idle  []*slot
	now   func() time.Time

	step   int64
	inline bool
	pages  *format.PageCodecs // shared by every Parquet file's writer

	// kept is the memory of the checked values queued in all Txns
	// (AppendChecked), held to keptBudget: past it batches come without
	// them, and their records are parsed again.
	kept       atomic.Int64
	keptBudget int64
	checked    sync.Pool // *streamconf.Checked the steps are done with
}

// Checked returns an empty streamconf.Checked for records of s, reusing
// the memory of one a step is done with: the write path makes one per
// batch of a Parquet stream. es may be nil.
func (es *Encoders) Checked(s *streamconf.Schema, records int) *streamconf.Checked {
	if es != nil {
		if c, ok := es.checked.Get().(*streamconf.Checked); ok {
			c.Reset(s)
			return c
		}
	}
	return streamconf.NewChecked(s, records)
}

// DefaultKeptBytes bounds the checked values that all Txns of an Encoders
// hold for batches not yet encoded: 59 B for a record of the load
// harness's 8 fields, so 1 MiB is ~18,000 records (18 steps' worth of
// 1 KiB records). Steps that fall further behind parse the rest. Under
// the harness's Parquet load the queue held 87 KB at the median, 1.1 MB
// at p90, 3.5 MB at most; a 4 MiB budget saved no more CPU than 1 MiB.
const DefaultKeptBytes = 1 << 20

// slot is one step's scratch: reused from step to step, never shared.
// Its fields are made as a step needs them and dropped by bare.
type slot struct {
	br      *bufio.Reader
	bw      *bufio.Writer
	line    []byte
	framers map[string]*format.Framer
	vals    []streamconf.Value // a checked record's values (keptCursor)

	since time.Time // when it was released last
}

// bare lets the slot's buffers and codec state go.
func (s *slot) bare() {
	s.br, s.bw, s.line, s.framers, s.vals = nil, nil, nil, nil, nil
}

// empty reports whether the slot holds no buffers or codec state.
func (s *slot) empty() bool {
	return s.br == nil && s.bw == nil && s.line == nil && s.framers == nil && s.vals == nil
}

// slotIdle is how long a slot is idle, beside another idle one, before it
// lets its memory go.
const slotIdle = time.Second

// NewEncoders returns Encoders that run at most n steps at once (n < 1
// means 1), each in its own goroutine, once stepBytes (<= 0:
// DefaultStepBytes) of whole batches wait in a file.
func NewEncoders(n int, stepBytes int64) *Encoders {
	n = max(n, 1)
	if stepBytes <= 0 {
		stepBytes = DefaultStepBytes
	}
	es := &Encoders{step: stepBytes, pages: format.NewPageCodecs(n), keptBudget: DefaultKeptBytes, now: time.Now}
	es.freed.L = &es.mu
	for range n {
		es.idle = append(es.idle, &slot{})
	}
	return es
}

// NewInlineEncoders returns Encoders that run each step inside the Append
// whose write made it due, one at a time: the same steps, in an order that
// depends on nothing but the appends, so that a fault sweep can fail each
// of their operations in turn.
func NewInlineEncoders(stepBytes int64) *Encoders {
	es := NewEncoders(1, stepBytes)
	es.inline = true
	return es
}

// acquire takes the slot released last, waiting for one if all are in
// use.
func (es *Encoders) acquire() *slot {
	es.mu.Lock()
	defer es.mu.Unlock()
	for len(es.idle) == 0 {
		es.freed.Wait()
	}
	n := len(es.idle) - 1
	s := es.idle[n]
	es.idle[n] = nil
	es.idle = es.idle[:n]
	return s
}

// release puts s back on top, and lets the memory of the others go that
// have been idle for slotIdle.
func (es *Encoders) release(s *slot) {
	now := es.now()
	s.since = now
	es.mu.Lock()
	es.idle = append(es.idle, s)
	for _, o := range es.idle[:len(es.idle)-1] {
		if now.Sub(o.since) >= slotIdle {
			o.bare()
		}
	}
	es.mu.Unlock()
	es.freed.Signal()
}

func (es *Encoders) start(f func()) {
	if es.inline {
		f()
		return
	}
	go f()
}

// CreateEncoded opens a new, empty temp file at name, like Create, whose
// records are encoded in e into EncodedName(name) as they arrive (see
// above); for a plain e it is Create. PreCommit then returns the encoded
// file's Summary, whose Plain names the plain file for the caller to
// remove.
func CreateEncoded(fs afero.Fs, name string, bufSize int, e Encoding, es *Encoders) (*Txn, error) {
	t, err := Create(fs, name, bufSize)
	if err != nil || e.Plain() {
		return t, err
	}
	if e.Format != streamconf.FormatParquet {
		if _, err := format.NewFramer(e.Compression); err != nil { // refused now, not at pre-commit
			_ = t.Abort() // empty and unnamed; Abort's error adds nothing
			return nil, err
		}
	}
	t.enc = &encoder{fs: fs, e: e, es: es, src: name, dst: EncodedName(name)}
	if e.Format == streamconf.FormatParquet {
		t.enc.pagesName = PagesName(name)
	}
	t.enc.idle.L = &t.enc.mu
	return t, nil
}

// encoder encodes one Txn's plain file into its encoded file, step by step.
type encoder struct {
	fs       afero.Fs
	e        Encoding
	es       *Encoders
	src, dst string

	mu      sync.Mutex
	idle    sync.Cond // signalled when a step ends
	avail   int64     // bytes of whole batches in the plain file
	done    int64     // bytes of the plain file encoded
	running bool      // a step is running or queued
	active  bool      // a step holds a slot and may touch the files
	err     error     // sticky: the encoded file can't be finished
	stop    atomic.Bool

	onFail func(error) // told err when a step fails (Txn.OnEncodeFail)

	// Read by Txn.Size while steps run.
	outBytes atomic.Int64 // bytes of the encoded file written so far
	covered  atomic.Int64 // bytes of the plain file those stand for

	// The checked values of batches appended but not yet encoded, by
	// their start in the plain file, ascending (Txn.AppendChecked).
	// Guarded by mu; a step takes those before its end without the lock
	// (appends only add batches after it).
	kept      []keptBatch
	keptBytes int64

	// Owned by the running step, or by the Txn once no step runs.
	in, out   afero.File
	pages     afero.File     // a Parquet row group's compressed pages (PagesName)
	pagesName string         // "" unless Parquet
	cw        countingWriter // out, counted and checksummed, through a slot's buffer
	srcSeen   countingWriter // the plain bytes read, counted, checksummed, lines counted
	pq        *format.ParquetWriter
}

// keptBatch is one batch's checked values and where the batch starts in
// the plain file.
type keptBatch struct {
	start int64
	c     *streamconf.Checked
}

// keep queues the checked values of a batch of records records about to
// be appended at start, and reports whether it did: only for a Parquet
// file of c's schema, and within the Encoders' budget.
func (en *encoder) keep(start int64, c *streamconf.Checked, records int) bool {
	if en.e.Format != streamconf.FormatParquet || c.Schema != en.e.Schema || c.Len() != records || records == 0 {
		return false
	}
	b := c.Bytes()
	if en.es.kept.Add(b) > en.es.keptBudget {
		en.es.kept.Add(-b)
		return false
	}
	en.mu.Lock()
	en.kept = append(en.kept, keptBatch{start: start, c: c})
	en.keptBytes += b
	en.mu.Unlock()
	return true
}

// unkeep drops the batch keep queued last: its append failed.
func (en *encoder) unkeep() {
	en.mu.Lock()
	n := len(en.kept) - 1
	b := en.kept[n].c.Bytes()
	en.kept[n] = keptBatch{}
	en.kept = en.kept[:n]
	en.keptBytes -= b
	en.mu.Unlock()
	en.es.kept.Add(-b)
}

// keptBefore returns the queued batches that start before upto: a step to
// upto reads them.
func (en *encoder) keptBefore(upto int64) []keptBatch {
	en.mu.Lock()
	defer en.mu.Unlock()
	n := 0
	for n < len(en.kept) && en.kept[n].start < upto {
		n++
	}
	return en.kept[:n:n]
}

// dropKept drops the first n queued batches (n < 0: all).
func (en *encoder) dropKept(n int) {
	en.mu.Lock()
	if n < 0 || n > len(en.kept) {
		n = len(en.kept)
	}
	var b int64
	for _, kb := range en.kept[:n] {
		b += kb.c.Bytes()
		en.es.checked.Put(kb.c) // no step reads it again, and the write path let it go with its batch
	}
	en.kept = slices.Delete(en.kept, 0, n)
	en.keptBytes -= b
	en.mu.Unlock()
	en.es.kept.Add(-b)
}

// keptCursor walks the queued batches along the records a step reads.
type keptCursor struct {
	batches []keptBatch
	b, r    int   // batch and record next
	at      int64 // where record r of batch b starts
}

func newKeptCursor(batches []keptBatch) keptCursor {
	c := keptCursor{batches: batches}
	if len(batches) > 0 {
		c.at = batches[0].start
	}
	return c
}

// values puts the checked values of the record line, read at off, in out
// and reports whether it found them.
func (c *keptCursor) values(off int64, line []byte, out []streamconf.Value) bool {
	for c.b < len(c.batches) {
		kb := c.batches[c.b]
		switch {
		case c.r >= kb.c.Len():
			c.b, c.r = c.b+1, 0
			if c.b < len(c.batches) {
				c.at = c.batches[c.b].start
			}
			continue
		case off < c.at:
			return false // a batch appended without values
		case off > c.at:
			c.at += int64(kb.c.RecordLen(c.r)) + 1 // out of step (a changed file: pre-commit refuses it)
			c.r++
			continue
		}
		ok := kb.c.Value(c.r, line, out)
		c.at += int64(kb.c.RecordLen(c.r)) + 1
		c.r++
		return ok
	}
	return false
}

// errStopped ends a step that an abort or release interrupted.
var errStopped = errors.New("encoding stopped")

// stopReader reads r until stop is set, then fails with errStopped.
type stopReader struct {
	r    io.Reader
	stop *atomic.Bool
}

func (s stopReader) Read(p []byte) (int, error) {
	if s.stop.Load() {
		return 0, errStopped
	}
	return s.r.Read(p)
}

// advance notes that avail bytes of whole batches are in the plain file
// and starts a step if enough wait. Called by Append.
func (en *encoder) advance(avail int64) {
	en.mu.Lock()
	en.avail = avail
	due := !en.running && en.err == nil && avail-en.done >= en.es.step
	if due {
		en.running = true
	}
	en.mu.Unlock()
	if due {
		en.es.start(en.run)
	}
}

// run encodes steps while enough waits.
func (en *encoder) run() {
	s := en.es.acquire()
	defer en.es.release(s)
	en.mu.Lock()
	en.active = true
	for en.err == nil && !en.stop.Load() && en.avail-en.done >= en.es.step {
		upto := en.avail
		en.mu.Unlock()
		err := en.encode(s, upto)
		en.mu.Lock()
		if err != nil {
			en.err = err
			if f := en.onFail; f != nil && !en.stop.Load() {
				en.mu.Unlock()
				f(err)
				en.mu.Lock()
			}
		}
	}
	en.running, en.active = false, false
	en.idle.Broadcast()
	en.mu.Unlock()
}

// failed returns the sticky error of a failed step, if any.
func (en *encoder) failed() error {
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.err
}

// wait returns once no step runs.
func (en *encoder) wait() {
	en.mu.Lock()
	for en.running {
		en.idle.Wait()
	}
	en.mu.Unlock()
}

// encode feeds the plain file's bytes from en.done to upto (a batch
// boundary) to the codec, and writes what the codec made of them.
func (en *encoder) encode(s *slot, upto int64) (err error) {
	if en.in == nil {
		if en.in, err = en.fs.Open(en.src); err != nil {
			return durable.Classify(fmt.Errorf("open staging file %s to encode: %w", en.src, err))
		}
	}
	if en.out == nil {
		if en.out, err = en.fs.OpenFile(en.dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err != nil {
			return durable.Classify(fmt.Errorf("create encoded file %s: %w", en.dst, err))
		}
	}
	if s.bw == nil {
		s.bw = bufio.NewWriterSize(en.out, encodeBufferSize)
	}
	s.bw.Reset(en.out)
	en.cw.w = s.bw
	en.srcSeen.w, en.srcSeen.lines = io.Discard, true
	// Abort and Release (under the engine's ingest lock) wait for a
	// running step: stopReader ends it within one read.
	r := io.TeeReader(stopReader{io.NewSectionReader(en.in, en.done, upto-en.done), &en.stop}, &en.srcSeen)
	switch {
	case en.e.Format == streamconf.FormatParquet:
		err = en.encodeParquet(s, r, upto)
	case upto == en.done:
		// nothing new: no empty frame
	default:
		err = en.encodeFrame(s, r)
	}
	if err == nil {
		err = s.bw.Flush()
	}
	en.cw.w = nil // a slot's buffer is not ours between steps
	if err != nil {
		return durable.Classify(fmt.Errorf("encode %s: %w", en.src, err))
	}
	if en.srcSeen.n != upto {
		return fmt.Errorf("encode %s: %w: read %d bytes, want %d", en.src, ErrSourceChanged, en.srcSeen.n, upto)
	}
	en.mu.Lock()
	en.done = upto
	en.mu.Unlock()
	covered := upto
	if en.pq != nil {
		covered -= en.pq.Buffered()
	}
	en.covered.Store(covered)
	en.outBytes.Store(en.cw.n)
	return nil
}

func (en *encoder) encodeFrame(s *slot, r io.Reader) error {
	f := s.framers[en.e.Compression]
	if f == nil {
		var err error
		if f, err = format.NewFramer(en.e.Compression); err != nil {
			return err
		}
		if s.framers == nil {
			s.framers = map[string]*format.Framer{}
		}
		s.framers[en.e.Compression] = f
	}
	return f.Frame(&en.cw, r)
}

func (en *encoder) encodeParquet(s *slot, r io.Reader, upto int64) error {
	if en.pq == nil {
		// The row group's compressed pages wait in a scratch file beside
		// the staged data, not on the heap (~6 MiB per open Parquet file
		// at 8 MiB row groups of the load harness's records): the page
		// cache holds them, and no process memory does.
		if en.pages == nil {
			pages, err := en.fs.OpenFile(en.pagesName, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
			if err != nil {
				return durable.Classify(fmt.Errorf("create Parquet page file %s: %w", en.pagesName, err))
			}
			en.pages = pages
		}
		pq, err := format.NewParquetWriterPages(&en.cw, en.e, en.es.pages, en.pages)
		if err != nil {
			return err
		}
		en.pq = pq
	}
	if s.br == nil {
		s.br = bufio.NewReaderSize(r, encodeBufferSize)
	}
	s.br.Reset(r)
	defer func() {
		s.br.Reset(nil)
		if cap(s.line) > encodeBufferSize {
			s.line = nil // a huge record's buffer is not kept
		}
	}()
	kept := en.keptBefore(upto)
	cur := newKeptCursor(kept)
	if n := len(en.e.Schema.Fields); cap(s.vals) < n {
		s.vals = make([]streamconf.Value, n)
	}
	vals := s.vals[:len(en.e.Schema.Fields)]
	defer clear(vals) // no references into s.line
	for off := en.done; ; {
		// line is a slice of s.br's buffer when it fits (no copy), valid
		// until the next read: the writer copies what it keeps.
		line, err := format.PeekLine(s.br, s.line[:0])
		if err == io.EOF {
			en.dropKept(len(kept))
			return nil
		}
		if err != nil {
			return err
		}
		if cur.values(off, line, vals) {
			err = en.pq.WriteChecked(line, vals)
		} else {
			err = en.pq.WriteRecord(line)
		}
		if err != nil {
			return err
		}
		off += int64(len(line)) + 1
	}
}

// size returns the encoded file's size so far, counting the plain bytes
// not yet in it (raw bytes appended in all) as they are.
func (en *encoder) size(raw int64) int64 {
	return en.outBytes.Load() + raw - en.covered.Load()
}

// finish encodes the rest of the plain file's written bytes, completes,
// fsyncs and closes the encoded file, and checks that what was encoded is
// what the Txn appended.
func (en *encoder) finish(written, records int64, crc uint32) (Summary, error) {
	en.wait()
	en.mu.Lock()
	err := en.err
	en.mu.Unlock()
	if err != nil {
		return Summary{}, err
	}
	s := en.es.acquire()
	defer en.es.release(s)
	err = en.encode(s, written)
	en.dropKept(-1) // the last step read every appended batch
	if err != nil {
		return Summary{}, err
	}
	if en.pq != nil {
		s.bw.Reset(en.out)
		en.cw.w = s.bw
		err := en.pq.Close()
		if err == nil {
			err = s.bw.Flush()
		}
		en.cw.w = nil
		if err != nil {
			return Summary{}, durable.Classify(fmt.Errorf("encode %s: %w", en.src, err))
		}
	}
	// The page file is scratch: gone before the encoded file is synced
	// and the prepared record names it. A failed removal fails the
	// pre-commit, whose abort tries again (recovery at the latest).
	if err := en.dropPages(); err != nil {
		return Summary{}, err
	}
	got := records
	if en.pq != nil {
		got = en.pq.Records()
	}
	switch {
	case hexCRC(en.srcSeen.crc) != hexCRC(crc):
		return Summary{}, fmt.Errorf("encode %s: %w: CRC-32C %s, appended %s", en.src, ErrSourceChanged, hexCRC(en.srcSeen.crc), hexCRC(crc))
	case en.srcSeen.records != records || got != records:
		return Summary{}, fmt.Errorf("encode %s: %w: %d lines (%d encoded), appended %d records", en.src, ErrSourceChanged, en.srcSeen.records, got, records)
	}
	out := en.out
	en.out = nil
	if err := durable.SyncClose(out); err != nil {
		return Summary{}, fmt.Errorf("encode %s: %w", en.src, err)
	}
	en.closeIn()
	return Summary{Temp: en.dst, Bytes: en.cw.n, Records: records, CRC32C: hexCRC(en.cw.crc), Plain: en.src}, nil
}

// halt stops the steps, waits for an active one (a queued one will see
// stop before it touches anything) and closes the files.
func (en *encoder) halt() {
	en.stop.Store(true)
	en.mu.Lock()
	for en.active {
		en.idle.Wait()
	}
	en.mu.Unlock()
	en.dropKept(-1)
	en.closeIn()
	en.closePages()
	if en.out != nil {
		_ = en.out.Close() // abandoned or deleted next: its close error says nothing
		en.out = nil
	}
}

// closePages closes the page file if open; dropPages also deletes it.
func (en *encoder) closePages() {
	if en.pages != nil {
		_ = en.pages.Close() // scratch, deleted next or by recovery: its close error says nothing
		en.pages = nil
	}
}

func (en *encoder) dropPages() error {
	en.closePages()
	if en.pagesName == "" {
		return nil
	}
	return Remove(en.fs, en.pagesName)
}

func (en *encoder) closeIn() {
	if en.in != nil {
		_ = en.in.Close() // read only: its close error says nothing about data
		en.in = nil
	}
}
