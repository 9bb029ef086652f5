package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/staging"
)

// Stream configuration in the engine (DESIGN.md "Streams").
//
// A PUT is a barrier, like a producer's init (awaitBarrier): it answers
// once every batch accepted under the old configuration is prepared
// (bound to commit) or aborted, and the new one is in force, so no batch
// accepted under the old one can come back, resent after a crash or an
// abort, to be judged by the new one. In order:
//
//  1. The stream is switching: its new batches are refused with
//     ErrBackpressure (a client retries after Retry-After), so none is
//     accepted under the old configuration from here on.
//  2. The barrier: when the open checkpoint holds a transaction of the
//     stream, or the checkpoint in flight is not prepared yet, a
//     checkpoint runs and the PUT waits for its end (bounded by its ctx:
//     a PUT that times out changes nothing, and the stream is written
//     again under the old configuration).
//  3. The configuration is recorded in the state store
//     (recovery.PutStream): a crash from here on restarts with it, and
//     nothing accepted under the old one is unprepared.
//  4. It is put in force (streamTable.live), and the stream accepts
//     writes again.
//
// Every transaction takes the configuration in force when it opens, and
// a stream has no transaction open when its configuration changes, so
// each file has exactly one configuration; its file record (and manifest
// entry) names format, compression and the configuration version.
//
// The write path reads live without the ingest lock to place records
// (partition template, schema check), then checks under the lock that
// the configuration it used is still the one in force, and places the batch
// again if a PUT changed it in between.
//
// A batch whose records fall into several partitions goes to each
// partition's transaction: every transaction is opened before anything is
// appended (so a refused open — too many files, EMFILE — refuses the batch
// whole), then the pieces are appended.
//
// Record content is untrusted (DESIGN.md "Streams"): whatever would make
// the pre-commit or commit of a record's file fail is refused when the
// record is placed, naming its line, so it never aborts a checkpoint (and
// with it every other stream's batches). place checks each record against
// the schema and, for Parquet, the encoder's record limit; each new
// partition against the destination's name limits (committer.Limiter) and
// eosink's own names (layout.ReservedElem, in Template.Eval); and the
// batch's distinct partitions against what one checkpoint of the stream
// may ever open (max_partitions, --max-open-files): a batch needing more
// is refused at the first record over (400), as soon as it is seen, so a
// huge fan-out batch costs no more than that many partitions. A batch that
// fits that bound but not in what is left open now is backpressure (429)
// and starts a checkpoint early (roomLocked): after it, it fits. The
// pieces of a split batch are one buffer of the batch's size, held
// against the API's in-flight body budget (Write.Hold).
//
// Should an append fail after an earlier piece was appended, that
// earlier piece can't be taken back: the transactions holding it are
// released, which makes the open checkpoint abort at its pre-commit (as a
// failed write does), and the checkpoint is asked to run now. The batch is refused; nothing of it ever commits.
// A producer's sequence number appears in the manifest ranges of every
// file holding records of its batch.

// streamConf is one stream's configuration, compiled.
type streamConf struct {
	cfg    streamconf.Config // defaults applied
	tmpl   *layout.Template
	schema *streamconf.Schema // nil: records are not checked
	strict bool               // the schema refuses unknown fields (Parquet)
	enc    staging.Encoding
}

// defaultConf is the configuration of a stream never configured.
var defaultConf = func() *streamConf {
	sc, err := compileConf(streamconf.Config{})
	if err != nil {
		panic(err) // the default template always compiles
	}
	return sc
}()

func compileConf(c streamconf.Config) (*streamConf, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.Defaults()
	t, err := c.Template()
	if err != nil {
		return nil, fmt.Errorf("compile partition template: %w", err)
	}
	return &streamConf{cfg: c, tmpl: t, schema: c.Schema, strict: c.Format == streamconf.FormatParquet, enc: staging.EncodingFor(c)}, nil
}

// streamTable holds the configurations; live is replaced whole by a PUT
// (under Engine.mu) and read without it.
type streamTable struct {
	live      atomic.Pointer[map[string]*streamConf]
	newest    map[string]recovery.StreamConfig // under Engine.mu
	switching map[string]bool                  // streams a PUT is changing; under Engine.mu
	putMu     sync.Mutex                       // serialises PUTs
}

// confFor returns the configuration in force for stream.
func (in *ingest) confFor(stream string) *streamConf {
	if m := in.streams.live.Load(); m != nil {
		if sc := (*m)[stream]; sc != nil {
			return sc
		}
	}
	return defaultConf
}

// loadStreams reads the stored configurations; they are in force from the
// first checkpoint of this start.
func (in *ingest) loadStreams() error {
	all, err := in.e.store.Streams()
	if err != nil {
		return fmt.Errorf("load stream configurations: %w", err)
	}
	live := make(map[string]*streamConf, len(all))
	in.streams.newest = make(map[string]recovery.StreamConfig, len(all))
	for _, c := range all {
		sc, err := compileConf(c.Config)
		if err != nil {
			return fmt.Errorf("load stream configuration %s: %w", c.Stream, err)
		}
		live[c.Stream] = sc
		in.streams.newest[c.Stream] = c
	}
	in.streams.live.Store(&live)
	return nil
}

// switchLocked refuses a batch of a stream whose configuration a PUT is
// changing (step 1 above): accepted under the old one, it could be lost
// after the barrier and come back to be judged by the new one.
func (in *ingest) switchLocked(stream string) error {
	if in.streams.switching[stream] {
		return fmt.Errorf("stream %s: its configuration is being changed: %w", stream, ErrBackpressure)
	}
	return nil
}

// streamUnpreparedLocked reports whether a batch of stream may be
// accepted and not prepared: the open checkpoint holds a transaction of
// it, or the checkpoint past its barrier is not prepared yet.
func (in *ingest) streamUnpreparedLocked(stream string) bool {
	for _, ot := range in.openTxns {
		if ot.key.Stream == stream {
			return true
		}
	}
	return in.inflight != 0 && in.lastPrepared < in.inflight
}

// tableChecker is implemented by a Tables that can tell, when a stream is
// configured, whether the table the destination holds for it can take
// its files (table.Iceberg.Check).
type tableChecker interface {
	Check(ctx context.Context, stream string, cfg streamconf.Config) error
}

// checkTable refuses a table stream's configuration that the table the
// destination holds at the stream's place can't take (another node's
// configuration of the stream, another writer's table): accepted, its
// batches' commit would fail for good after "prepared" and hold every
// later checkpoint (I13). A destination that can't be read now is left
// to the commit, which retries it.
func (e *Engine) checkTable(ctx context.Context, stream string, c streamconf.Config) error {
	tc, ok := e.fin.Tables.(tableChecker)
	if !ok || !c.IsTable() {
		return nil
	}
	err := tc.Check(ctx, stream, c)
	var fe *streamconf.FieldError
	if err != nil && !errors.As(err, &fe) {
		e.log.Warn("configure stream: its table could not be read to check the configuration against it", "stream", stream, "err", err)
		return nil
	}
	return err
}

// StreamInfo is a stream's configuration as the engine knows it.
type StreamInfo struct {
	Stream string
	// Config is the newest accepted configuration (defaults applied);
	// Version 0 for a stream never configured.
	Config    streamconf.Config
	UpdatedAt time.Time
	// ActiveVersion is the version in force: Config.Version once a PUT
	// answered.
	ActiveVersion int64
	Configured    bool
}

// PutStream validates c, and, after a barrier over the batches accepted
// under stream's current configuration (see the comment at the top),
// records it durably and puts it in force: every write answered after it
// uses c. An invalid c is a *streamconf.FieldError (errors.Is
// streamconf.ErrInvalid). A barrier that outlasts ctx returns ctx's error
// and changes nothing.
func (e *Engine) PutStream(ctx context.Context, stream string, c streamconf.Config) (StreamInfo, error) {
	if !layout.Stream(stream) {
		return StreamInfo{}, fmt.Errorf("stream %q: %w", stream, ErrInvalidStream)
	}
	sc, err := compileConf(c)
	if err != nil {
		return StreamInfo{}, err
	}
	e.ing.mu.Lock()
	err = e.ing.writableLocked()
	e.ing.mu.Unlock()
	if err != nil {
		return StreamInfo{}, err
	}
	if c.IsTable() && e.fin.Tables == nil {
		return StreamInfo{}, &streamconf.FieldError{Field: "table", Message: "this destination is not set up for tables"}
	}
	e.ing.streams.putMu.Lock()
	defer e.ing.streams.putMu.Unlock()
	e.ing.mu.Lock()
	prev := e.ing.streams.newest[stream]
	e.ing.mu.Unlock()
	if err := streamconf.CheckChange(prev.Config, sc.cfg); err != nil {
		return StreamInfo{}, err
	}
	if err := e.checkTable(ctx, stream, sc.cfg); err != nil {
		return StreamInfo{}, err
	}
	// 1. No batch of the stream is accepted under the old configuration
	// from here on.
	e.ing.mu.Lock()
	if e.ing.streams.switching == nil {
		e.ing.streams.switching = map[string]bool{}
	}
	e.ing.streams.switching[stream] = true
	e.ing.mu.Unlock()
	defer func() {
		e.ing.mu.Lock()
		delete(e.ing.streams.switching, stream)
		e.ing.mu.Unlock()
	}()
	// 2. Those accepted before are prepared or aborted.
	if err := e.ing.awaitBarrier(ctx, func() bool { return e.ing.streamUnpreparedLocked(stream) }); err != nil {
		return StreamInfo{}, fmt.Errorf("configure stream %s: barrier: %w", stream, err)
	}
	// 3. Durable (in the state store, then in the destination: see
	// streamstore.go). Serialised with producer inits: both are admin-rate
	// store writes.
	e.ing.initMu.Lock()
	rec, err := e.store.PutStream(stream, c, e.cfg.Now())
	e.ing.initMu.Unlock()
	if err != nil {
		if errors.Is(err, durable.ErrDiskFull) {
			e.health.noteDiskFull(err)
			return StreamInfo{}, err
		}
		e.health.failOn(err)
		return StreamInfo{}, err
	}
	// 4. In force.
	e.ing.mu.Lock()
	sc.cfg.Version = rec.Config.Version
	old := e.ing.streams.live.Load()
	live := make(map[string]*streamConf, len(*old)+1)
	for k, v := range *old {
		live[k] = v
	}
	live[stream] = sc
	e.ing.streams.live.Store(&live)
	e.ing.streams.newest[stream] = rec
	info := e.ing.streamInfoLocked(stream)
	e.ing.mu.Unlock()
	return info, e.putStreamDoc(ctx, rec) // streamstore.go
}

// Stream returns a stream's configuration.
func (e *Engine) Stream(stream string) StreamInfo {
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	return e.ing.streamInfoLocked(stream)
}

func (in *ingest) streamInfoLocked(stream string) StreamInfo {
	out := StreamInfo{Stream: stream, Config: defaultConf.cfg, ActiveVersion: in.confFor(stream).cfg.Version}
	if rec, ok := in.streams.newest[stream]; ok {
		// Defaults again: a configuration stored before a field existed
		// shows the value in force (max_partitions).
		out.Config, out.UpdatedAt, out.Configured = rec.Config.Defaults(), rec.UpdatedAt, true
	}
	return out
}

// Streams returns every configured stream, by name.
func (e *Engine) Streams() []StreamInfo {
	e.ing.mu.Lock()
	defer e.ing.mu.Unlock()
	out := make([]StreamInfo, 0, len(e.ing.streams.newest))
	for s := range e.ing.streams.newest {
		out = append(out, e.ing.streamInfoLocked(s))
	}
	sortStreams(out)
	return out
}

func sortStreams(s []StreamInfo) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Stream < s[j-1].Stream; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// RecordError says which record of a batch can't be placed (a partition
// field: errors.Is layout.ErrInvalidPartition) or breaks the stream's
// schema (errors.Is streamconf.ErrSchemaMismatch). The batch is refused
// whole.
type RecordError struct {
	Line  int    // 1-based record number in the batch (the NDJSON line, blank lines not counted)
	Field string // the offending field, "" for the record as a whole
	Err   error
}

func (e *RecordError) Error() string { return fmt.Sprintf("record %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }

// recordError is err about record line, naming the field a schema
// mismatch (*streamconf.MismatchError) or a partition template's value
// (*layout.PartitionError) is about.
func recordError(line int, err error) *RecordError {
	field := ""
	var me *streamconf.MismatchError
	var pe *layout.PartitionError
	switch {
	case errors.As(err, &me):
		field = me.Field
	case errors.As(err, &pe):
		field = pe.Field
	}
	return &RecordError{Line: line, Field: field, Err: err}
}

// placeLimits bound what placing one batch may need; see Engine.place.
type placeLimits struct {
	parts     int // distinct partitions of one batch; 0: no bound
	node      string
	dest      committer.Limits
	maxRecord int               // bytes of one record; 0: no bound
	hold      func(int64) error // Write.Hold
	encoders  *staging.Encoders // where a batch's checked values come from; nil: new ones
}

// checked returns an empty Checked for records of s.
func (l placeLimits) checked(s *streamconf.Schema, records int) *streamconf.Checked {
	return l.encoders.Checked(s, records)
}

// place places w by sc within the limits of this engine and its
// destination.
func (in *ingest) place(sc *streamConf, now time.Time, w *Write) placed {
	l := placeLimits{parts: sc.cfg.MaxPartitions, node: in.e.cfg.Node, hold: w.Hold, encoders: in.e.cfg.Encoders}
	if m := in.e.cfg.MaxOpenFiles; m > 0 && (l.parts <= 0 || m < l.parts) {
		l.parts = m
	}
	if dl, ok := in.e.cfg.Committer.(committer.Limiter); ok {
		l.dest = dl.Limits()
	}
	if sc.cfg.Format == streamconf.FormatParquet {
		l.maxRecord = staging.MaxRecordBytes
	}
	return sc.place(now, w, l)
}

// checkName refuses a partition whose files' names the destination can't
// hold: stream/part/<the longest part name this node gives for ext>.
func (l placeLimits) checkName(stream, part, ext string) error {
	base := layout.MaxPartNameLen(l.node, ext)
	if n := len(stream) + 1 + len(part) + 1 + base; l.dest.MaxName > 0 && n > l.dest.MaxName {
		return fmt.Errorf("partition %q makes file names of up to %d bytes, the destination takes %d: %w", part, n, l.dest.MaxName, ErrNameTooLong)
	}
	if m := l.dest.MaxElem; m > 0 {
		if len(stream) > m || base > m {
			return fmt.Errorf("file names of stream %s are longer than the destination's %d bytes per name: %w", stream, m, ErrNameTooLong)
		}
		for seg := range strings.SplitSeq(part, "/") {
			if len(seg) > m {
				return fmt.Errorf("partition %q has a name of %d bytes, the destination takes %d: %w", part, len(seg), m, ErrNameTooLong)
			}
		}
	}
	return nil
}

// piece is the part of a batch bound for one partition.
type piece struct {
	part    string
	data    []byte
	records int
	checked *streamconf.Checked // its records' checked values, for a Parquet file's encoder; or nil
}

// placed is a batch placed by one configuration.
type placed struct {
	conf   *streamConf
	ext    string
	pieces []piece
	err    error
}

// place checks a batch against sc and splits it by partition, within l.
func (sc *streamConf) place(now time.Time, w *Write, l placeLimits) placed {
	p := placed{conf: sc}
	ext, err := sc.cfg.Ext(w.Ext)
	if err != nil {
		p.err = err
		return p
	}
	p.ext = ext
	if w.Records == 0 {
		return p
	}
	if !sc.tmpl.NeedsRecord() && sc.schema == nil && l.maxRecord == 0 {
		part, err := sc.tmpl.Eval(now, nil)
		if err == nil {
			err = l.checkName(w.Stream, part, ext)
		}
		if err != nil {
			p.err = &RecordError{Line: 1, Err: err}
			return p
		}
		p.pieces = []piece{{part: part, data: w.Data, records: w.Records}}
		return p
	}
	var (
		chk     *streamconf.Checker
		checked *streamconf.Checked // what the check found, kept for the Parquet encoder
	)
	if sc.schema != nil {
		chk = sc.schema.NewChecker(sc.strict)
		if sc.enc.Format == streamconf.FormatParquet && sc.enc.Schema == sc.schema {
			checked = l.checked(sc.schema, w.Records)
		}
	}
	var (
		index = map[string]int{}
		parts []string // partition of each distinct index
		sizes []int    // bytes of each partition's piece
		recs  []int    // records of each partition's piece
		of    []uint32 // partition index of each record, once there are two
	)
	// A template that reads no record field gives every record the same
	// partition: evaluated once, not once (and one string) per record.
	var (
		samePart string
		sameErr  error
	)
	needsRecord := sc.tmpl.NeedsRecord()
	if !needsRecord {
		samePart, sameErr = sc.tmpl.Eval(now, nil)
	}
	data, line := w.Data, 0
	for len(data) > 0 {
		rec := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			rec, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line++
		if l.maxRecord > 0 && len(rec) > l.maxRecord {
			p.err = &RecordError{Line: line, Err: fmt.Errorf("%d bytes, a %s file takes records of at most %d: %w", len(rec), sc.cfg.Format, l.maxRecord, ErrRecordTooLarge)}
			return p
		}
		if chk != nil {
			vals, err := chk.Fields(rec)
			if err == nil && checked != nil && !checked.Add(rec, vals) {
				checked = nil // a record it can't keep: the encoder parses the batch
			}
			if err != nil {
				p.err = recordError(line, err)
				return p
			}
		}
		part, err := samePart, sameErr
		if needsRecord {
			part, err = sc.tmpl.Eval(now, rec)
		}
		if err != nil {
			p.err = recordError(line, err)
			return p
		}
		i, ok := index[part]
		if !ok {
			if l.parts > 0 && len(parts) >= l.parts {
				p.err = &RecordError{Line: line, Err: fmt.Errorf("the batch needs more than %d partitions, the most one checkpoint of stream %s opens (max_partitions, --max-open-files): split it: %w",
					l.parts, w.Stream, ErrTooManyPartitions)}
				return p
			}
			if err := l.checkName(w.Stream, part, ext); err != nil {
				p.err = &RecordError{Line: line, Err: err}
				return p
			}
			i = len(parts)
			index[part] = i
			parts, sizes, recs = append(parts, part), append(sizes, 0), append(recs, 0)
			if i == 1 {
				// The batch splits: its pieces will take one buffer of its
				// size, and of 4 bytes a record.
				if l.hold != nil {
					if err := l.hold(int64(len(w.Data)) + 4*int64(max(w.Records, line))); err != nil {
						p.err = fmt.Errorf("split batch over partitions: %w", err)
						return p
					}
				}
				of = make([]uint32, line-1, max(w.Records, line))
			}
		}
		sizes[i] += len(rec) + 1
		recs[i]++
		if of != nil {
			of = append(of, uint32(i))
		}
	}
	if checked != nil && checked.Len() != line {
		checked = nil // not every record kept: the encoder parses the batch
	}
	if len(parts) == 1 {
		p.pieces = []piece{{part: parts[0], data: w.Data, records: recs[0], checked: checked}}
		return p
	}
	// One buffer holds every piece, each at its offset, records in batch order.
	total := 0
	p.pieces = make([]piece, len(parts))
	ends := make([]int, len(parts)) // where the next record of each piece goes
	for i, part := range parts {
		p.pieces[i] = piece{part: part, records: recs[i]}
		ends[i] = total
		total += sizes[i]
	}
	buf := make([]byte, total)
	data = w.Data
	for _, i := range of {
		rec := data
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			rec, data = data[:j], data[j+1:]
		} else {
			data = nil
		}
		n := copy(buf[ends[i]:], rec)
		buf[ends[i]+n] = '\n'
		ends[i] += n + 1
	}
	start := 0
	for i := range p.pieces {
		p.pieces[i].data = buf[start:ends[i]:ends[i]]
		start = ends[i]
	}
	if checked != nil {
		idx := make([][]int, len(parts)) // each piece's records, by their index in the batch
		for r, i := range of {
			idx[i] = append(idx[i], r)
		}
		for i := range p.pieces {
			p.pieces[i].checked = checked.Take(idx[i], l.checked(sc.schema, len(idx[i])))
		}
	}
	return p
}

// appendPlacedLocked appends a placed batch to its transactions, all or
// nothing (see the package comment above).
func (in *ingest) appendPlacedLocked(w *Write, p placed, pid string, seq int64) error {
	if err := in.roomLocked(w.Stream, p); err != nil {
		return err
	}
	ots := make([]*openTxn, len(p.pieces))
	for i, pc := range p.pieces {
		ot, err := in.txnLocked(staging.Key{Stream: w.Stream, Partition: pc.part, Ext: p.ext})
		if err != nil {
			return err
		}
		ots[i] = ot
	}
	for i, pc := range p.pieces {
		if err := ots[i].txn.AppendChecked(pc.data, pc.records, pid, seq, pc.checked); err != nil {
			switch { // doomed.go
			case i > 0:
				in.doomLocked(ots[:i])
				in.doomFile(in.openID, w.Stream, fmt.Errorf("part of a refused batch is in its files: %w", err))
			case ots[i].txn.Err() != nil: // the file is broken
				in.doomFile(in.openID, w.Stream, ots[i].txn.Err())
			}
			return fmt.Errorf("append to stream %s: %w", w.Stream, err)
		}
	}
	return nil
}

// roomLocked refuses a placed batch that needs more new transactions than
// the open checkpoint can still open (--max-open-files), or more new
// partitions of its stream (max_partitions; a roll is a new file, not a
// new partition), before any is opened, and asks for the checkpoint to end
// now: place refused the batches that could never fit, so after it this
// one does. ErrBackpressure (429).
func (in *ingest) roomLocked(stream string, p placed) error {
	files, parts, roll := 0, 0, in.rollBytes(stream)
	for _, pc := range p.pieces {
		switch ot := in.cur[staging.Key{Stream: stream, Partition: pc.part, Ext: p.ext}]; {
		case ot == nil:
			files++
			parts++
		case ot.txn.Size() >= roll:
			files++
		}
	}
	if m := in.e.cfg.MaxOpenFiles; m > 0 && files > 0 && len(in.openTxns)+files > m {
		in.earlyLocked()
		return fmt.Errorf("stream %s: the batch needs %d more staging files, %d of the most %d per checkpoint are open (--max-open-files): %w",
			stream, files, len(in.openTxns), m, ErrBackpressure)
	}
	if m := p.conf.cfg.MaxPartitions; m > 0 && parts > 0 {
		open := 0
		for k := range in.cur {
			if k.Stream == stream {
				open++
			}
		}
		if open+parts > m {
			in.earlyLocked()
			return fmt.Errorf("stream %s: the batch needs %d more partitions, %d of its most %d per checkpoint are open (max_partitions): %w",
				stream, parts, open, m, ErrBackpressure)
		}
	}
	return nil
}

// doomLocked releases transactions that hold part of a refused batch:
// the open checkpoint then aborts at its pre-commit, and runs now.
func (in *ingest) doomLocked(ots []*openTxn) {
	for _, ot := range ots {
		ot.txn.Release()
		if in.cur[ot.key] == ot {
			delete(in.cur, ot.key)
		}
	}
	in.e.log.Warn("a batch spanning partitions failed after part of it was appended: the open checkpoint will abort",
		"checkpoint", in.openID, "stream", ots[0].key.Stream)
	in.earlyLocked()
}

// rollLocked returns the roll size of stream's files.
func (in *ingest) rollBytes(stream string) int64 {
	if r := in.confFor(stream).cfg.RollSize; r > 0 {
		return r
	}
	return in.e.cfg.RollBytes
}

// removePlain deletes the plain temp file a pre-committed encoded one was
// made from (staging.CreateEncoded: compressed and Parquet files are
// encoded as their batches arrive, and pre-commit only finishes them).
// Nothing names it: a crash or failure leaves it to the abort or recovery.
func (pipe *pipeline) removePlain(sum staging.Summary) {
	if sum.Plain == "" {
		return
	}
	if err := staging.Remove(pipe.e.cfg.FS, sum.Plain); err != nil {
		// Unnamed by any checkpoint: recovery deletes it at the next start.
		pipe.e.log.Warn("remove plain staging file after encoding", "path", sum.Plain, "err", err)
	}
}

// fileFormat returns what a file record says of its encoding.
func (ot *openTxn) fileFormat() (format, compression string, version int64) {
	format, compression, _, _ = streamconf.ParseExt(ot.final)
	if ot.conf == nil {
		return format, compression, 0
	}
	if format == streamconf.FormatParquet {
		compression = ot.conf.cfg.Compression
	}
	return format, compression, ot.conf.cfg.Version
}

// dropEmpty aborts the transactions that hold no record (opened for a
// batch spanning partitions that was then refused) and returns the others:
// an empty file is never committed.
func (pipe *pipeline) dropEmpty(txns []*openTxn) []*openTxn {
	out := txns[:0:0]
	for _, ot := range txns {
		if ot.txn.Records() == 0 && ot.txn.Err() == nil {
			if err := ot.txn.Abort(); err != nil {
				pipe.e.log.Warn("delete empty staging file; recovery will", "path", ot.txn.Name(), "err", err)
			}
			continue
		}
		out = append(out, ot)
	}
	return out
}

// dedupKey returns the idempotency key of w: key (the client's), or for
// a stream configured with "dedup": "body", when w has neither producer
// headers nor a key, the SHA-256 of its decoded body (DESIGN.md
// "Idempotency keys").
func (sc *streamConf) dedupKey(w *Write, key *IdempotencyKey) *IdempotencyKey {
	if key != nil || w.Producer != nil || w.Body == nil || sc.cfg.Dedup != streamconf.DedupBody {
		return key
	}
	return BodyKey(w.Body)
}
