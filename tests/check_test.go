package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/eosink/eosink/staging"
	"github.com/minio/minio-go/v7"
)

// destObject is one file or object of a destination, its path relative to
// the destination's root.
type destObject struct {
	Path string
	Size int64
}

// destReader reads a destination directly: the directory on disk, or the
// bucket through minio-go. Never through eosink.
type destReader interface {
	String() string
	List(ctx context.Context) ([]destObject, error)
	Read(ctx context.Context, path string) ([]byte, error)
}

// localDest is a file:// destination.
type localDest struct{ dir string }

func (d localDest) String() string { return "file://" + d.dir }

func (d localDest) List(ctx context.Context) ([]destObject, error) {
	var out []destObject
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == d.dir {
				return filepath.SkipDir
			}
			return err
		}
		if e.IsDir() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(d.dir, p)
		if err != nil {
			return err
		}
		out = append(out, destObject{Path: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	return out, err
}

func (d localDest) Read(ctx context.Context, path string) ([]byte, error) {
	return os.ReadFile(filepath.Join(d.dir, filepath.FromSlash(path)))
}

// s3Dest is an s3://bucket/prefix destination.
type s3Dest struct {
	c      *minio.Client
	bucket string
	prefix string // without slashes at either end; "" for the bucket root
}

func (d s3Dest) String() string { return "s3://" + d.bucket + "/" + d.prefix }

func (d s3Dest) key(path string) string {
	if d.prefix == "" {
		return path
	}
	return d.prefix + "/" + path
}

func (d s3Dest) List(ctx context.Context) ([]destObject, error) {
	var out []destObject
	opts := minio.ListObjectsOptions{Recursive: true}
	if d.prefix != "" {
		opts.Prefix = d.prefix + "/"
	}
	for o := range d.c.ListObjects(ctx, d.bucket, opts) {
		if o.Err != nil {
			return nil, o.Err
		}
		out = append(out, destObject{Path: strings.TrimPrefix(o.Key, opts.Prefix), Size: o.Size})
	}
	return out, nil
}

func (d s3Dest) Read(ctx context.Context, path string) ([]byte, error) {
	o, err := d.c.GetObject(ctx, d.bucket, d.key(path), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}

var (
	dataFileRE = regexp.MustCompile(`^([a-z0-9][a-z0-9_.-]*)/dt=\d{4}-\d{2}-\d{2}/hour=\d{2}/part-([A-Za-z0-9_.]+)-(\d{20})-(\d{4})\.(ndjson|ndjson\.gz|ndjson\.zst|parquet)$`)
	manifestRE = regexp.MustCompile(`^_manifests/([A-Za-z0-9_.]+)/(\d{20})\.json$`)
)

// destReport is what checkDest found.
type destReport struct {
	Files     int
	Manifests int
	Records   int
	Batches   int
	Bytes     int64
	Nodes     map[string]int // data files per node
	Staging   []string       // objects left under _staging/
	Problems  []string
	// Encoded counts the compressed and Parquet files read back through
	// staging's decoders, by extension ("ndjson.zst", "parquet", ...).
	Encoded map[string]int
}

func (r *destReport) bad(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// fileInfo is what a data file holds.
type fileInfo struct {
	path      string
	node      string
	ckpt      uint64
	size      int64
	records   int
	producers map[string][][2]int64 // producer -> its exact seqs as ranges (one stream per file)
	named     int                   // manifests naming it
}

type manifestFile struct {
	Checkpoint uint64 `json:"checkpoint"`
	Node       string `json:"node"`
	Files      []struct {
		Path      string                `json:"path"`
		Stream    string                `json:"stream"`
		Bytes     int64                 `json:"bytes"`
		Records   int64                 `json:"records"`
		CRC32C    string                `json:"crc32c"`
		Producers map[string][][2]int64 `json:"producers"`
	} `json:"files"`
}

// checkDest reads the whole destination and checks it against want, the
// batches that must each be there exactly once. With exact, nothing else
// may be there. It checks, from the files alone:
//
//   - no temp file (.inprogress) and no unexpected name; every data file
//     named by exactly one manifest, with its size, record count and
//     producer ranges (I1);
//   - every line a test record in the directory of its stream, each batch
//     whole, contiguous and in one file;
//   - each wanted batch exactly once (I2), nothing else when exact (I3);
//   - per producer and stream, sequence numbers increase within a file and
//     from one checkpoint to the next.
func checkDest(ctx context.Context, d destReader, want map[batchKey]int, exact bool) *destReport {
	r := &destReport{Nodes: map[string]int{}}
	objs, err := d.List(ctx)
	if err != nil {
		r.bad("list %s: %v", d, err)
		return r
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Path < objs[j].Path })
	files := map[string]*fileInfo{}
	var manifests []destObject
	seen := map[batchKey]int{}
	type span struct {
		node     string
		ckpt     uint64
		min, max int64
	}
	spans := map[[2]string][]span{} // (producer, stream) -> one span per file
	for _, o := range objs {
		switch {
		case strings.HasSuffix(o.Path, ".inprogress"):
			r.bad("I1: temp file in the destination: %s", o.Path)
			continue
		case strings.HasPrefix(o.Path, "_staging/"):
			r.Staging = append(r.Staging, o.Path)
			continue
		case strings.HasPrefix(o.Path, "_nodes/"):
			continue // node leases
		case strings.HasPrefix(o.Path, "_manifests/"):
			if !manifestRE.MatchString(o.Path) {
				r.bad("unexpected name under _manifests/: %s", o.Path)
				continue
			}
			manifests = append(manifests, o)
			continue
		}
		m := dataFileRE.FindStringSubmatch(o.Path)
		if m == nil {
			r.bad("unexpected object in the destination: %s (%d bytes)", o.Path, o.Size)
			continue
		}
		stream, node := m[1], m[2]
		ckpt, _ := strconv.ParseUint(m[3], 10, 64)
		data, err := d.Read(ctx, o.Path)
		if err != nil {
			r.bad("read %s: %v", o.Path, err)
			continue
		}
		fi := &fileInfo{path: o.Path, node: node, ckpt: ckpt, size: int64(len(data)), producers: map[string][][2]int64{}}
		files[o.Path] = fi
		r.Files++
		r.Bytes += int64(len(data))
		r.Nodes[node]++
		if int64(len(data)) != o.Size {
			r.bad("I1: %s: listed with %d bytes, read %d", o.Path, o.Size, len(data))
		}
		if len(data) == 0 {
			r.bad("empty data file %s", o.Path)
			continue
		}
		// Compressed and Parquet files are read back through staging's
		// decoders (a complete file decodes, a partial one does not).
		if data, err = decodeRecords(o.Path, data); err != nil {
			r.bad("I1: %s does not decode: %v", o.Path, err)
			continue
		}
		if !strings.HasSuffix(o.Path, ".ndjson") {
			if r.Encoded == nil {
				r.Encoded = map[string]int{}
			}
			r.Encoded[m[5]]++
		}
		if len(data) == 0 || data[len(data)-1] != '\n' {
			r.bad("I1: %s does not end with a newline (partial?)", o.Path)
		}
		var cur *record // the batch being read: its first record
		curNext := 0
		lastQ := map[string]int64{}
		fileSpans := map[string]*span{}
		lines := bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'})
		for ln, line := range lines {
			fi.records++
			r.Records++
			var rec record
			if err := json.Unmarshal(line, &rec); err != nil || rec.P == "" || rec.N <= 0 {
				r.bad("%s:%d: not a test record: %.120q", o.Path, ln+1, line)
				cur = nil
				continue
			}
			if rec.S != stream {
				r.bad("%s:%d: record of stream %q in stream %q's directory", o.Path, ln+1, rec.S, stream)
			}
			if cur != nil && (rec.P != cur.P || rec.S != cur.S || rec.Q != cur.Q) {
				r.bad("%s:%d: batch %s/%s/%d cut after %d of %d records by %s/%s/%d", o.Path, ln+1, cur.P, cur.S, cur.Q, curNext, cur.N, rec.P, rec.S, rec.Q)
				cur = nil
			}
			if cur == nil {
				if rec.I != 0 {
					r.bad("%s:%d: batch %s/%s/%d starts at record %d", o.Path, ln+1, rec.P, rec.S, rec.Q, rec.I)
				}
				c := rec
				cur, curNext = &c, rec.I
				k := batchKey{rec.P, rec.S, rec.Q}
				seen[k]++
				r.Batches++
				if q, ok := lastQ[rec.P]; ok && rec.Q <= q {
					r.bad("%s:%d: %s/%s seq %d after seq %d in the same file", o.Path, ln+1, rec.P, rec.S, rec.Q, q)
				}
				lastQ[rec.P] = rec.Q
				if !strings.HasPrefix(rec.P, anonSender) { // writes without producer headers: no ranges in the manifest
					rs := fi.producers[rec.P]
					if n := len(rs); n > 0 && rs[n-1][1]+1 == rec.Q {
						rs[n-1][1] = rec.Q
					} else {
						rs = append(rs, [2]int64{rec.Q, rec.Q})
					}
					fi.producers[rec.P] = rs
				}
				sp := fileSpans[rec.P]
				if sp == nil {
					sp = &span{node: node, ckpt: ckpt, min: rec.Q, max: rec.Q}
					fileSpans[rec.P] = sp
				}
				sp.min, sp.max = min(sp.min, rec.Q), max(sp.max, rec.Q)
			}
			if rec.I != curNext || rec.N != cur.N {
				r.bad("%s:%d: batch %s/%s/%d: record %d of %d where record %d of %d was due", o.Path, ln+1, rec.P, rec.S, rec.Q, rec.I, rec.N, curNext, cur.N)
			}
			curNext++
			if curNext >= cur.N {
				cur = nil
			}
		}
		if cur != nil {
			r.bad("%s: ends inside batch %s/%s/%d (%d of %d records)", o.Path, cur.P, cur.S, cur.Q, curNext, cur.N)
		}
		for p, sp := range fileSpans {
			k := [2]string{p, stream}
			spans[k] = append(spans[k], *sp)
		}
	}

	// Manifests name every data file once, with its size, records and ranges.
	for _, mo := range manifests {
		r.Manifests++
		mm := manifestRE.FindStringSubmatch(mo.Path)
		data, err := d.Read(ctx, mo.Path)
		if err != nil {
			r.bad("read manifest %s: %v", mo.Path, err)
			continue
		}
		var m manifestFile
		if err := json.Unmarshal(data, &m); err != nil {
			r.bad("manifest %s: %v", mo.Path, err)
			continue
		}
		if id, _ := strconv.ParseUint(mm[2], 10, 64); m.Checkpoint != id || m.Node != mm[1] {
			r.bad("manifest %s says checkpoint %d of node %q", mo.Path, m.Checkpoint, m.Node)
		}
		for _, mf := range m.Files {
			fi := files[mf.Path]
			if fi == nil {
				r.bad("manifest %s names %s, which is not in the destination", mo.Path, mf.Path)
				continue
			}
			fi.named++
			if fi.ckpt != m.Checkpoint || fi.node != m.Node {
				r.bad("manifest %s (checkpoint %d, node %s) names %s", mo.Path, m.Checkpoint, m.Node, mf.Path)
			}
			if fi.size != mf.Bytes || int64(fi.records) != mf.Records {
				r.bad("I1: %s: %d bytes, %d records; manifest %s says %d bytes, %d records", mf.Path, fi.size, fi.records, mo.Path, mf.Bytes, mf.Records)
			}
			if len(mf.Producers) != len(fi.producers) {
				r.bad("%s: producers %v; manifest %s says %v", mf.Path, fi.producers, mo.Path, mf.Producers)
			} else {
				for p, rg := range fi.producers {
					if fmt.Sprint(mf.Producers[p]) != fmt.Sprint(rg) {
						r.bad("%s: producer %s seqs %v; manifest %s says %v", mf.Path, p, rg, mo.Path, mf.Producers[p])
					}
				}
			}
		}
	}
	for _, fi := range files {
		if fi.named != 1 {
			r.bad("I1: %s is named by %d manifests, want 1", fi.path, fi.named)
		}
	}

	// Order: per producer and stream, a later checkpoint of a node holds
	// later sequence numbers.
	for k, ss := range spans {
		sort.Slice(ss, func(i, j int) bool {
			if ss[i].node != ss[j].node {
				return ss[i].node < ss[j].node
			}
			return ss[i].ckpt < ss[j].ckpt
		})
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if a.node == b.node && a.ckpt < b.ckpt && a.max >= b.min {
				r.bad("%s/%s: checkpoint %d holds seqs %d..%d, later checkpoint %d holds %d..%d", k[0], k[1], a.ckpt, a.min, a.max, b.ckpt, b.min, b.max)
			}
		}
	}

	// Exactly once.
	var missing, dup, extra []string
	for k, n := range seen {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("%s x%d", k, n))
		}
		if _, ok := want[k]; !ok && exact {
			extra = append(extra, k.String())
		}
	}
	for k := range want {
		if seen[k] == 0 {
			missing = append(missing, k.String())
		}
	}
	for _, l := range [][]string{missing, dup, extra} {
		sort.Strings(l)
	}
	if len(missing) > 0 {
		r.bad("I2: %d batches sent but not committed: %s", len(missing), firstN(missing, 20))
	}
	if len(dup) > 0 {
		r.bad("I2: %d batches committed more than once: %s", len(dup), firstN(dup, 20))
	}
	if len(extra) > 0 {
		r.bad("I3: %d batches committed that no producer sent: %s", len(extra), firstN(extra, 20))
	}
	return r
}

func firstN(l []string, n int) string {
	if len(l) <= n {
		return strings.Join(l, ", ")
	}
	return strings.Join(l[:n], ", ") + fmt.Sprintf(", ... (%d more)", len(l)-n)
}

// requireDest runs checkDest and fails the test on any problem.
func requireDest(t testing.TB, d destReader, want map[batchKey]int, exact bool) *destReport {
	t.Helper()
	r := checkDest(t.Context(), d, want, exact)
	for i, p := range r.Problems {
		if i == 40 {
			t.Errorf("... and %d more problems", len(r.Problems)-40)
			break
		}
		t.Errorf("%s: %s", d, p)
	}
	return r
}

// decodeRecords returns a data file's records as NDJSON: plain files as
// they are, compressed and Parquet ones decoded by staging's readers.
func decodeRecords(name string, data []byte) ([]byte, error) {
	if strings.HasSuffix(name, ".ndjson") {
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
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(append(out, rec...), '\n')
	}
}
