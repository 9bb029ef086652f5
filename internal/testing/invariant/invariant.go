// Package invariant checks eosink's promises from the destination alone:
// the committed files and the manifests, nothing of the engine's state. It
// reads the destination directly (Dest: a directory, or a bucket), so the
// unit tests and the end-to-end tests share one checker.
//
// Test records are NDJSON lines {"p":producer,"s":stream,"q":seq,"i":index,"n":count}
// (see Record; other fields are ignored), so the checker can tell which
// batch every line came from. Check reports:
//
//   - I1: a temp (.inprogress) name in the destination; a name that is no
//     part file, lease or manifest; a file no manifest names; a manifest
//     entry whose file is missing or whose size, record count or CRC-32C
//     differs, or that is empty or does not end with a newline (a partial
//     file); a batch cut, split or out of order within a file.
//   - I2/I3: a batch that appears more than once; a batch that must appear
//     but does not; a batch that must not appear (of an aborted checkpoint)
//     but does; with Exact, a batch that was never expected.
//   - I7: a file seen committed by an earlier Check that has changed or gone.
//   - manifest ranges: a file's producer ranges that are not exactly the
//     sequence numbers of the producer's batches in it, sorted and merged,
//     or a (producer, stream, seq) that two files' ranges claim; a manifest
//     naming a file of another checkpoint, node or stream.
//   - order: per producer and stream, sequence numbers that do not increase
//     within a file and from one checkpoint of a node to the next.
//
// Objects under _staging/ (S3 uploads in flight) are listed in the report,
// not judged: whether any may remain depends on how the test stopped.
package invariant

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// BatchID names one batch: producer ("" for anonymous batches, whose Seq is
// then a unique number), stream, sequence.
type BatchID struct {
	Producer string
	Stream   string
	Seq      int64
}

func (b BatchID) String() string { return fmt.Sprintf("%s/%s/%d", b.Producer, b.Stream, b.Seq) }

// Record renders record i of n of batch b as one NDJSON line with '\n'.
func Record(b BatchID, i, n int) []byte {
	return fmt.Appendf(nil, `{"p":%q,"s":%q,"q":%d,"i":%d,"n":%d}`+"\n", b.Producer, b.Stream, b.Seq, i, n)
}

// Batch renders a whole batch of n records.
func Batch(b BatchID, n int) []byte {
	var out []byte
	for i := range n {
		out = append(out, Record(b, i, n)...)
	}
	return out
}

// manifest is a checkpoint's manifest as the checker reads it: the
// fields docs/design.md documents, declared here rather than taken from
// layout.Manifest on purpose, so that a change to the written document's
// field names fails the checker instead of changing it along.
type manifest struct {
	Checkpoint uint64          `json:"checkpoint"`
	Node       string          `json:"node"`
	Files      []manifestEntry `json:"files"`
}

type manifestEntry struct {
	Path      string                         `json:"path"`
	Stream    string                         `json:"stream"`
	Bytes     int64                          `json:"bytes"`
	Records   int64                          `json:"records"`
	CRC32C    string                         `json:"crc32c"`
	Producers map[string]committer.SeqRanges `json:"producers"`
	// Epochs tells a producer id's incarnations apart: each claims its
	// own sequence numbers.
	Epochs map[string]committer.ProducerEpoch `json:"epochs"`
}

// Checker checks a destination. Keep one per destination across a test so
// it can check I7 between calls.
type Checker struct {
	// FS and Dest: a destination directory on an afero.Fs. Source, when
	// set, is read instead (a directory on disk, a bucket).
	FS     afero.Fs
	Dest   string
	Source Dest
	// Anonymous tells the producers whose batches were written without
	// producer headers: their manifest entries carry no ranges. Nil means
	// the producer "".
	Anonymous func(producer string) bool
	// Wire maps the producer a batch names to the producer id it was
	// sent under, which the manifest's ranges name: tests that reuse a
	// producer id for a new incarnation tell the incarnations' batches
	// apart by name. Nil: the same.
	Wire func(producer string) string
	// Foreign allows lines that are not test records (tests that write
	// records of their own): the files that hold any are checked against
	// their manifest entry but not its ranges.
	Foreign bool
	// Paths, when set, must match every data file's path.
	Paths *regexp.Regexp
	// NoEmpty: an empty data file is a problem. The engine commits one
	// when every append to a staging file failed (the model test's short
	// writes); runs without disk faults have none.
	NoEmpty bool

	seen map[string]uint32 // committed file -> crc, from earlier checks
	// removed holds the files someone else removed from the destination
	// after a Check saw them committed (Removed), as that Check read them.
	removed map[string][]byte
}

// Removed tells the checker that the committed file at name (relative to
// the destination) was removed by someone else — a retention job deleting
// old partitions — and that data is what it held. Later Checks take it as
// still there with that content: its manifest entry is not missing, its
// batches count (once), I7 holds for it; the file appearing again in the
// destination is a problem.
func (c *Checker) Removed(name string, data []byte) {
	if c.removed == nil {
		c.removed = map[string][]byte{}
	}
	c.removed[name] = data
}

// Expect says which batches must and must not be present.
type Expect struct {
	Must    map[BatchID]bool // each exactly once
	MustNot map[BatchID]bool // never
	// Exact: no batch other than Must may appear.
	Exact bool
}

// Report is what Check found.
type Report struct {
	Files     int            // data files
	Manifests int            // manifests
	Records   int            // lines of data files
	Bytes     int64          // bytes of data files
	Nodes     map[string]int // data files per node
	Staging   []string       // objects under _staging/ (S3 uploads in flight)
	// Quarantined lists the files recovery set aside under _quarantine/:
	// not data of any stream (a test that expects some says how many).
	Quarantined []string
	// Encoded counts the compressed and Parquet files read back through
	// staging's decoders, by extension ("ndjson.zst", "parquet", ...).
	Encoded map[string]int
	Batches map[BatchID]int // occurrences
	// Checkpoints lists, for every batch, the checkpoints whose manifests
	// name a file holding it (I8: an id names the data answered with it).
	Checkpoints map[BatchID][]uint64
	Problems    []string
}

// Err returns the problems as one error, nil if none.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	n := len(r.Problems)
	p := r.Problems
	if n > 20 {
		p = append(p[:20:20], fmt.Sprintf("... and %d more", n-20))
	}
	return errors.New("invariants violated:\n  " + strings.Join(p, "\n  "))
}

func (r *Report) bad(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// dataFile is a data file as the destination holds it.
type dataFile struct {
	size  int64
	raw   []byte // as stored
	lines []byte // its records as NDJSON lines (decoded)
	node  string // from its name
	ckpt  uint64
	named int // manifests naming it
}

// span is the sequence numbers one file holds of one producer.
type span struct {
	node     string
	ckpt     uint64
	min, max int64
}

// Check reads the whole destination and checks it against exp.
func (c *Checker) Check(exp Expect) *Report { return c.CheckContext(context.Background(), exp) }

// CheckContext is Check with a context for the destination's reads. Its
// steps, in order, are checkRun's methods.
func (c *Checker) CheckContext(ctx context.Context, exp Expect) *Report {
	if c.seen == nil {
		c.seen = map[string]uint32{}
	}
	run := &checkRun{c: c, ctx: ctx, src: c.Source, r: &Report{Nodes: map[string]int{}, Batches: map[BatchID]int{}, Checkpoints: map[BatchID][]uint64{}},
		files: map[string]*dataFile{}, claims: map[[2]string][]claim{}, spans: map[[2]string][]span{}}
	if run.src == nil {
		run.src = FSDest{FS: c.FS, Dir: c.Dest}
	}
	if run.list() {
		run.readManifests()
		run.checkClaims()
		run.checkOrder()
		run.checkNamed()
		run.checkExpected(exp)
	}
	sort.Strings(run.r.Problems)
	return run.r
}

// checkRun is one Check: what it read of the destination so far, and the
// report it builds.
type checkRun struct {
	c   *Checker
	ctx context.Context
	src Dest
	r   *Report

	files     map[string]*dataFile  // data files by path
	manifests []string              // manifest paths, sorted
	claims    map[[2]string][]claim // (producer, stream) -> the ranges manifests claim
	spans     map[[2]string][]span  // (producer, stream) -> one span per file
}

// list lists the destination, sorts each object into a kind and reads the
// data files (step 1). It returns false if the listing failed.
func (run *checkRun) list() bool {
	objs, err := run.src.List(run.ctx)
	if err != nil {
		run.r.bad("list destination: %v", err)
		return false
	}
	listed := map[string]bool{}
	for _, o := range objs {
		listed[o.Path] = true
	}
	for name, data := range run.c.removed {
		if listed[name] {
			run.r.bad("%s, removed by another process, is in the destination again", name)
			continue
		}
		objs = append(objs, Object{Path: name, Size: int64(len(data))})
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Path < objs[j].Path })
	for _, o := range objs {
		switch {
		case layout.IsTempName(o.Path):
			run.r.bad("I1: temp file in destination: %s", o.Path)
		case strings.HasPrefix(o.Path, layout.StagingDir+"/"):
			run.r.Staging = append(run.r.Staging, o.Path)
		case strings.HasPrefix(o.Path, layout.QuarantineDir+"/"):
			if _, _, _, ok := layout.ParseQuarantineName(o.Path); !ok {
				run.r.bad("unexpected name under %s/: %s", layout.QuarantineDir, o.Path)
			}
			run.r.Quarantined = append(run.r.Quarantined, o.Path)
		case strings.HasPrefix(o.Path, layout.LeaseDir+"/"), strings.HasPrefix(o.Path, layout.StreamDir+"/"), strings.HasPrefix(o.Path, layout.ForgottenDir+"/"):
			// node leases, stream configurations, forgotten producers: not data
		case layout.IsTableMetadata(o.Path):
			// an Iceberg table's metadata: its readers check it
		case strings.HasPrefix(o.Path, layout.ManifestDir+"/"):
			if _, _, ok := layout.ParseManifestName(o.Path); !ok {
				run.r.bad("unexpected name under _manifests/: %s", o.Path)
				continue
			}
			run.manifests = append(run.manifests, o.Path)
		default:
			run.readDataFile(o)
		}
	}
	return true
}

// readDataFile reads one data file and checks what it alone can show: its
// name, size, that it decodes and ends with a newline (I1).
func (run *checkRun) readDataFile(o Object) {
	r := run.r
	f := &dataFile{size: o.Size}
	run.files[o.Path] = f
	node, ckpt, _, ext, ok := layout.ParsePartName(path.Base(o.Path))
	if !ok || (run.c.Paths != nil && !run.c.Paths.MatchString(o.Path)) {
		r.bad("unexpected object in the destination: %s (%d bytes)", o.Path, o.Size)
		return
	}
	f.node, f.ckpt = node, ckpt
	data, err := run.src.Read(run.ctx, o.Path)
	if kept, ok := run.c.removed[o.Path]; ok {
		data, err = kept, nil // removed by another process: as a Check read it
	}
	if err != nil {
		r.bad("read %s: %v", o.Path, err)
		return
	}
	f.raw = data
	r.Files++
	r.Bytes += int64(len(data))
	r.Nodes[node]++
	if int64(len(data)) != o.Size {
		r.bad("I1: %s: listed with %d bytes, read %d", o.Path, o.Size, len(data))
	}
	if len(data) == 0 {
		if run.c.NoEmpty {
			r.bad("empty data file %s", o.Path)
		}
		return
	}
	// Compressed and Parquet files are read back through staging's
	// decoders (a complete file decodes, a partial one does not).
	lines, encoded, err := decodeLines(o.Path, data)
	if err != nil {
		r.bad("I1: %s does not decode: %v", o.Path, err)
		return
	}
	if encoded {
		if r.Encoded == nil {
			r.Encoded = map[string]int{}
		}
		r.Encoded[ext]++
	}
	if len(lines) == 0 || lines[len(lines)-1] != '\n' {
		r.bad("I1: %s does not end with a newline (partial?)", o.Path)
	}
	f.lines = lines
}

// readManifests reads every manifest and checks each entry against its
// file (step 2).
func (run *checkRun) readManifests() {
	for _, m := range run.manifests {
		run.r.Manifests++
		data, err := run.src.Read(run.ctx, m)
		if err != nil {
			run.r.bad("read manifest %s: %v", m, err)
			continue
		}
		var mf manifest
		if err := json.Unmarshal(data, &mf); err != nil {
			run.r.bad("I1: manifest %s is not valid JSON: %v", m, err)
			continue
		}
		if want := layout.ManifestName(mf.Node, mf.Checkpoint); want != m {
			run.r.bad("manifest %s names checkpoint %d of node %s", m, mf.Checkpoint, mf.Node)
		}
		for _, f := range mf.Files {
			run.checkEntry(m, &mf, f)
		}
	}
}

// checkEntry checks one manifest entry against the file it names: the
// file exists, is named once, by its own checkpoint, node and stream, with
// its size, checksum and record count (I1), unchanged since an earlier
// Check (I7); then scans its records and notes its ranges and spans.
func (run *checkRun) checkEntry(m string, mf *manifest, f manifestEntry) {
	r, c := run.r, run.c
	df := run.files[f.Path]
	if df == nil {
		r.bad("I1: %s in manifest %s is missing", f.Path, m)
		return
	}
	if df.named++; df.named > 1 {
		r.bad("I2: %s named by %d manifests", f.Path, df.named)
	}
	if df.raw == nil {
		return // reported by readDataFile
	}
	if df.ckpt != mf.Checkpoint || df.node != mf.Node {
		r.bad("manifest %s (checkpoint %d, node %s) names %s", m, mf.Checkpoint, mf.Node, f.Path)
	}
	if dir, _, _ := strings.Cut(f.Path, "/"); dir != f.Stream {
		r.bad("%s: in the directory of stream %q, manifest %s says stream %q", f.Path, dir, m, f.Stream)
	}
	if df.size != f.Bytes {
		r.bad("I1: %s has %d bytes, manifest says %d", f.Path, df.size, f.Bytes)
	}
	sum := crc32.Checksum(df.raw, castagnoli)
	if got := fmt.Sprintf("%08x", sum); got != f.CRC32C {
		r.bad("I1: %s crc32c %s, manifest says %s", f.Path, got, f.CRC32C)
	}
	if df.lines == nil {
		return // does not decode: reported by readDataFile
	}
	if n := int64(bytes.Count(df.lines, []byte{'\n'})); n != f.Records {
		r.bad("I1: %s has %d records, manifest says %d", f.Path, n, f.Records)
	}
	if old, ok := c.seen[f.Path]; ok && old != sum {
		r.bad("I7: committed file %s was rewritten", f.Path)
	}
	c.seen[f.Path] = sum
	found, foreign := c.scan(r, f.Path, f.Stream, df.lines)
	for _, b := range found {
		r.Checkpoints[b] = append(r.Checkpoints[b], mf.Checkpoint)
	}
	if !foreign {
		c.checkRanges(r, f.Path, f.Producers, found)
	}
	for p, rs := range f.Producers {
		k := [2]string{p, f.Stream}
		if ep, ok := f.Epochs[p]; ok {
			k[0] = fmt.Sprintf("%s (incarnation %d)", p, ep.Incarnation)
		}
		for _, rg := range rs {
			run.claims[k] = append(run.claims[k], claim{rg, f.Path})
		}
	}
	for p, sp := range fileSpans(found, mf.Node, mf.Checkpoint) {
		k := [2]string{p, f.Stream}
		run.spans[k] = append(run.spans[k], sp)
	}
}

// checkClaims: no (producer, stream, seq) is claimed by two files'
// manifest ranges (step 3).
func (run *checkRun) checkClaims() {
	for k, cs := range run.claims {
		sort.Slice(cs, func(i, j int) bool { return cs[i].rg[0] < cs[j].rg[0] })
		for i := 1; i < len(cs); i++ {
			if cs[i].rg[0] <= cs[i-1].rg[1] {
				run.r.bad("manifest ranges: producer %s stream %s: %s claims %v and %s claims %v", k[0], k[1], cs[i-1].file, cs[i-1].rg, cs[i].file, cs[i].rg)
			}
		}
	}
}

// checkOrder: per producer and stream, a later checkpoint of a node holds
// later sequence numbers (step 4).
func (run *checkRun) checkOrder() {
	for k, ss := range run.spans {
		sort.Slice(ss, func(i, j int) bool {
			if ss[i].node != ss[j].node {
				return ss[i].node < ss[j].node
			}
			return ss[i].ckpt < ss[j].ckpt
		})
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if a.node == b.node && a.ckpt < b.ckpt && a.max >= b.min {
				run.r.bad("order: %s/%s: checkpoint %d holds seqs %d..%d, later checkpoint %d holds %d..%d", k[0], k[1], a.ckpt, a.min, a.max, b.ckpt, b.min, b.max)
			}
		}
	}
}

// checkNamed: every data file is named by a manifest (I1), and every file
// an earlier Check saw committed is still there (I7) (step 5).
func (run *checkRun) checkNamed() {
	for p, f := range run.files {
		if f.named == 0 {
			run.r.bad("I1: %s is in the destination but in no manifest", p)
		}
	}
	for p := range run.c.seen {
		if _, ok := run.files[p]; !ok {
			run.r.bad("I7: committed file %s was deleted", p)
		}
	}
}

// checkExpected compares the batches found with exp (I2, I3) (step 6).
func (run *checkRun) checkExpected(exp Expect) {
	r := run.r
	for b := range exp.Must {
		if n := r.Batches[b]; n != 1 {
			r.bad("I2: batch %s appears %d times, want exactly once", b, n)
		}
	}
	for b := range exp.MustNot {
		if n := r.Batches[b]; n != 0 {
			r.bad("I3: batch %s of an aborted checkpoint appears %d times", b, n)
		}
	}
	for b, n := range r.Batches {
		if n > 1 && !exp.Must[b] {
			r.bad("I2: batch %s appears %d times", b, n)
		}
		if exp.Exact && !exp.Must[b] && !exp.MustNot[b] {
			r.bad("I3: batch %s appears but was never expected", b)
		}
	}
}

// fileSpans returns the sequence numbers each producer but "" has in one
// file.
func fileSpans(found []BatchID, node string, ckpt uint64) map[string]span {
	out := map[string]span{}
	for _, b := range found {
		if b.Producer == "" {
			continue
		}
		sp, ok := out[b.Producer]
		if !ok {
			sp = span{node: node, ckpt: ckpt, min: b.Seq, max: b.Seq}
		}
		sp.min, sp.max = min(sp.min, b.Seq), max(sp.max, b.Seq)
		out[b.Producer] = sp
	}
	return out
}

func (c *Checker) anonymous(producer string) bool {
	if c.Anonymous == nil {
		return producer == ""
	}
	return c.Anonymous(producer)
}

type line struct {
	P string `json:"p"`
	S string `json:"s"`
	Q int64  `json:"q"`
	I int    `json:"i"`
	N int    `json:"n"`
}

// scan counts the batches in one file of stream: a batch's records must be
// whole and in order (i = 0..n-1, contiguous), and a producer's batches in
// increasing order. It returns the batches in file order, and whether the
// file holds lines that are not test records (with Foreign).
func (c *Checker) scan(r *Report, name, stream string, data []byte) (found []BatchID, foreign bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var cur *line
	last := map[string]int64{} // producer -> its last seq in this file
	lineNo := 0
	for sc.Scan() {
		lineNo++
		r.Records++
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.N <= 0 || l.S == "" {
			if !c.Foreign {
				r.bad("%s:%d: not a test record: %.120q", name, lineNo, sc.Bytes())
				return found, false
			}
			foreign = true
			if cur != nil && cur.I != cur.N-1 {
				r.bad("I1: %s:%d: batch %s/%s/%d cut after record %d of %d", name, lineNo, cur.P, cur.S, cur.Q, cur.I, cur.N)
			}
			cur = nil
			continue
		}
		if l.S != stream {
			r.bad("%s:%d: record of stream %q in a file of stream %q", name, lineNo, l.S, stream)
		}
		if cur != nil && (l.P != cur.P || l.S != cur.S || l.Q != cur.Q || cur.I == cur.N-1) {
			if cur.I != cur.N-1 {
				r.bad("I1: %s:%d: batch %s/%s/%d cut after record %d of %d", name, lineNo, cur.P, cur.S, cur.Q, cur.I, cur.N)
			}
			cur = nil
		}
		if cur == nil {
			if l.I != 0 {
				r.bad("I1: %s:%d: batch %s/%s/%d starts at record %d", name, lineNo, l.P, l.S, l.Q, l.I)
			}
			b := BatchID{l.P, l.S, l.Q}
			r.Batches[b]++
			found = append(found, b)
			if q, ok := last[l.P]; ok && l.P != "" && l.Q <= q {
				r.bad("order: %s:%d: %s/%s seq %d after seq %d in the same file", name, lineNo, l.P, l.S, l.Q, q)
			}
			last[l.P] = l.Q
		} else if l.I != cur.I+1 || l.N != cur.N {
			r.bad("I1: %s:%d: batch %s/%s/%d record %d of %d follows record %d of %d", name, lineNo, l.P, l.S, l.Q, l.I, l.N, cur.I, cur.N)
		}
		cur = &l
	}
	if cur != nil && cur.I != cur.N-1 {
		r.bad("I1: %s: batch %s/%s/%d cut after record %d of %d", name, cur.P, cur.S, cur.Q, cur.I, cur.N)
	}
	return found, foreign
}

// Inherit takes over what an earlier checker saw committed, for a test that
// moves to a new filesystem (a power cut's clone) and must still check I7.
func (c *Checker) Inherit(old *Checker) {
	if c.seen == nil {
		c.seen = map[string]uint32{}
	}
	for k, v := range old.seen {
		c.seen[k] = v
	}
	for k, v := range old.removed {
		c.Removed(k, v)
	}
}

type claim struct {
	rg   [2]int64
	file string
}

// checkRanges compares a file's manifest ranges with the producer batches
// found in it: they must name exactly those sequence numbers, as sorted,
// merged ranges; anonymous producers have none.
func (c *Checker) checkRanges(r *Report, name string, manifest map[string]committer.SeqRanges, found []BatchID) {
	seqs := map[string][]int64{}
	for _, b := range found {
		if !c.anonymous(b.Producer) {
			p := b.Producer
			if c.Wire != nil {
				p = c.Wire(p)
			}
			seqs[p] = append(seqs[p], b.Seq)
		}
	}
	for p := range manifest {
		if _, ok := seqs[p]; !ok {
			seqs[p] = nil
		}
	}
	for p, qs := range seqs {
		sort.Slice(qs, func(i, j int) bool { return qs[i] < qs[j] })
		var want committer.SeqRanges
		for _, q := range qs {
			if n := len(want); n > 0 && want[n-1][1]+1 >= q {
				want[n-1][1] = max(want[n-1][1], q)
			} else {
				want = append(want, [2]int64{q, q})
			}
		}
		if fmt.Sprint(manifest[p]) != fmt.Sprint(want) {
			r.bad("manifest ranges: %s: producer %s has seqs %v, manifest says %v", name, p, want, manifest[p])
		}
	}
}

// decodeLines returns a data file's records as NDJSON lines: a plain
// file's bytes as they are, a compressed or Parquet one's decoded by
// internal/format's readers (encoded true).
func decodeLines(name string, data []byte) (lines []byte, encoded bool, err error) {
	if !format.Encoded(name) {
		return data, false, nil
	}
	recs, err := format.OpenRecords(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		return nil, true, err
	}
	defer recs.Close()
	var out []byte
	for {
		rec, err := recs.Next()
		if errors.Is(err, io.EOF) {
			return out, true, nil
		}
		if err != nil {
			return nil, true, err
		}
		out = append(append(out, rec...), '\n')
	}
}

// FileBatches returns the batches of test records in a data file's
// content (name tells its encoding), in file order: what a test needs to
// know of a file it is about to remove (Checker.Removed).
func FileBatches(name string, data []byte) ([]BatchID, error) {
	lines, _, err := decodeLines(name, data)
	if err != nil {
		return nil, err
	}
	var out []BatchID
	for l := range bytes.Lines(lines) {
		var rec line
		if err := json.Unmarshal(l, &rec); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if rec.I == 0 {
			out = append(out, BatchID{rec.P, rec.S, rec.Q})
		}
	}
	return out, nil
}
