// Package invariant checks eosink's promises from the destination alone:
// the committed files and the manifests, nothing of the engine's state.
//
// Test records are NDJSON lines {"p":producer,"s":stream,"q":seq,"i":index,"n":count}
// (see Record), so the checker can tell which batch every line came from.
// Check reports:
//
//   - I1: a temp (.inprogress) name in the destination; a file no manifest
//     names; a manifest entry whose file is missing or whose size, record
//     count or CRC-32C differs (a partial file).
//   - I2/I3: a batch that appears more than once, split, or partially; a
//     batch that must appear but does not; a batch that must not appear (of
//     an aborted checkpoint) but does.
//   - I7: a file seen committed by an earlier Check that has changed or gone.
//   - manifest ranges: a file's producer ranges that are not exactly the
//     sequence numbers of the producer's batches in it, or a (producer,
//     stream, seq) that two files' ranges claim.
package invariant

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/staging"
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

type manifest struct {
	Checkpoint uint64 `json:"checkpoint"`
	Node       string `json:"node"`
	Files      []struct {
		Path      string                         `json:"path"`
		Stream    string                         `json:"stream"`
		Bytes     int64                          `json:"bytes"`
		Records   int64                          `json:"records"`
		CRC32C    string                         `json:"crc32c"`
		Producers map[string]committer.SeqRanges `json:"producers"`
	} `json:"files"`
}

// Checker checks a destination. Keep one per destination across a test so
// it can check I7 between calls.
type Checker struct {
	FS   afero.Fs
	Dest string
	seen map[string]uint32 // committed file -> crc, from earlier checks
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
	Files   int
	Records int
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

// Check reads the whole destination and checks it against exp.
func (c *Checker) Check(exp Expect) *Report {
	r := &Report{Batches: map[BatchID]int{}, Checkpoints: map[BatchID][]uint64{}}
	if c.seen == nil {
		c.seen = map[string]uint32{}
	}
	files := map[string]int64{}
	var manifests []string
	err := afero.Walk(c.FS, c.Dest, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, c.Dest), "/")
		if strings.HasSuffix(rel, ".inprogress") {
			r.bad("I1: temp file in destination: %s", rel)
		}
		if strings.HasPrefix(rel, "_manifests/") {
			manifests = append(manifests, rel)
		} else if strings.HasPrefix(rel, "_nodes/") {
			return nil // node leases: not data
		} else {
			files[rel] = info.Size()
		}
		return nil
	})
	if err != nil {
		r.bad("walk destination: %v", err)
		return r
	}
	named := map[string]bool{}
	claims := map[[2]string][]claim{}
	for _, m := range manifests {
		data, err := afero.ReadFile(c.FS, path.Join(c.Dest, m))
		if err != nil {
			r.bad("read manifest %s: %v", m, err)
			continue
		}
		var mf manifest
		if err := json.Unmarshal(data, &mf); err != nil {
			r.bad("I1: manifest %s is not valid JSON: %v", m, err)
			continue
		}
		if want := fmt.Sprintf("_manifests/%s/%020d.json", mf.Node, mf.Checkpoint); want != m {
			r.bad("manifest %s names checkpoint %d of node %s", m, mf.Checkpoint, mf.Node)
		}
		for _, f := range mf.Files {
			if named[f.Path] {
				r.bad("I2: %s named by two manifests", f.Path)
			}
			named[f.Path] = true
			size, ok := files[f.Path]
			if !ok {
				r.bad("I1: %s in manifest %s is missing", f.Path, m)
				continue
			}
			if size != f.Bytes {
				r.bad("I1: %s has %d bytes, manifest says %d", f.Path, size, f.Bytes)
			}
			data, err := afero.ReadFile(c.FS, path.Join(c.Dest, f.Path))
			if err != nil {
				r.bad("read %s: %v", f.Path, err)
				continue
			}
			sum := crc32.Checksum(data, castagnoli)
			if got := fmt.Sprintf("%08x", sum); got != f.CRC32C {
				r.bad("I1: %s crc32c %s, manifest says %s", f.Path, got, f.CRC32C)
			}
			if data, err = decodeLines(f.Path, data); err != nil {
				r.bad("I1: %s does not decode: %v", f.Path, err)
				continue
			}
			if n := int64(bytes.Count(data, []byte{'\n'})); n != f.Records {
				r.bad("I1: %s has %d records, manifest says %d", f.Path, n, f.Records)
			}
			if old, ok := c.seen[f.Path]; ok && old != sum {
				r.bad("I7: committed file %s was rewritten", f.Path)
			}
			c.seen[f.Path] = sum
			found := c.scan(r, f.Path, data)
			for _, b := range found {
				r.Checkpoints[b] = append(r.Checkpoints[b], mf.Checkpoint)
			}
			checkRanges(r, f.Path, f.Producers, found)
			for p, rs := range f.Producers {
				k := [2]string{p, f.Stream}
				for _, rg := range rs {
					claims[k] = append(claims[k], claim{rg, f.Path})
				}
			}
			r.Files++
		}
	}
	for k, cs := range claims {
		sort.Slice(cs, func(i, j int) bool { return cs[i].rg[0] < cs[j].rg[0] })
		for i := 1; i < len(cs); i++ {
			if cs[i].rg[0] <= cs[i-1].rg[1] {
				r.bad("manifest ranges: producer %s stream %s: %s claims %v and %s claims %v", k[0], k[1], cs[i-1].file, cs[i-1].rg, cs[i].file, cs[i].rg)
			}
		}
	}
	for p := range files {
		if !named[p] {
			r.bad("I1: %s is in the destination but in no manifest", p)
		}
	}
	for p := range c.seen {
		if _, ok := files[p]; !ok {
			r.bad("I7: committed file %s was deleted", p)
		}
	}
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
			r.bad("batch %s appears but was never expected", b)
		}
	}
	sort.Strings(r.Problems)
	return r
}

type line struct {
	P string `json:"p"`
	S string `json:"s"`
	Q int64  `json:"q"`
	I int    `json:"i"`
	N int    `json:"n"`
}

// scan counts the batches in one file: a batch's records must be whole and
// in order (i = 0..n-1, contiguous). It returns the batches in file order.
func (c *Checker) scan(r *Report, name string, data []byte) []BatchID {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var cur *line
	var found []BatchID
	lineNo := 0
	for sc.Scan() {
		lineNo++
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			r.bad("%s:%d: not a test record: %v", name, lineNo, err)
			return found
		}
		r.Records++
		if cur != nil && (l.P != cur.P || l.S != cur.S || l.Q != cur.Q || (l.I == 0 && cur.I == cur.N-1)) {
			if cur.I != cur.N-1 {
				r.bad("I1: %s:%d: batch %s/%s/%d cut after record %d of %d", name, lineNo, cur.P, cur.S, cur.Q, cur.I, cur.N)
			}
			cur = nil
		}
		if cur == nil {
			if l.I != 0 {
				r.bad("I1: %s:%d: batch %s/%s/%d starts at record %d", name, lineNo, l.P, l.S, l.Q, l.I)
			}
			r.Batches[BatchID{l.P, l.S, l.Q}]++
			found = append(found, BatchID{l.P, l.S, l.Q})
		} else if l.I != cur.I+1 {
			r.bad("I1: %s:%d: batch %s/%s/%d record %d follows %d", name, lineNo, l.P, l.S, l.Q, l.I, cur.I)
		}
		cur = &l
	}
	if cur != nil && cur.I != cur.N-1 {
		r.bad("I1: %s: batch %s/%s/%d cut after record %d of %d", name, cur.P, cur.S, cur.Q, cur.I, cur.N)
	}
	return found
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
}

type claim struct {
	rg   [2]int64
	file string
}

// checkRanges compares a file's manifest ranges with the producer batches
// found in it: they must name exactly those sequence numbers.
func checkRanges(r *Report, name string, manifest map[string]committer.SeqRanges, found []BatchID) {
	seqs := map[string][]int64{}
	for _, b := range found {
		if b.Producer != "" {
			seqs[b.Producer] = append(seqs[b.Producer], b.Seq)
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
		got := append(committer.SeqRanges(nil), manifest[p]...)
		sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] })
		var merged committer.SeqRanges
		for _, rg := range got {
			if n := len(merged); n > 0 && merged[n-1][1]+1 >= rg[0] {
				merged[n-1][1] = max(merged[n-1][1], rg[1])
			} else {
				merged = append(merged, rg)
			}
		}
		if fmt.Sprint(merged) != fmt.Sprint(want) {
			r.bad("manifest ranges: %s: producer %s has seqs %v, manifest says %v", name, p, want, manifest[p])
		}
	}
}

// decodeLines returns a committed file's records as NDJSON lines: the
// bytes themselves for plain files, decoded (staging's readers) for
// compressed and Parquet ones.
func decodeLines(name string, data []byte) ([]byte, error) {
	format, compression, _, ok := streamconf.ParseExt(name)
	if !ok || format != streamconf.FormatParquet && compression == streamconf.CompressionNone {
		return data, nil
	}
	recs, err := staging.OpenRecords(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		return nil, err
	}
	defer recs.Close()
	var out []byte
	for {
		rec, err := recs.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(append(out, rec...), '\n')
	}
}
