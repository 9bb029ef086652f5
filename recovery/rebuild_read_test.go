package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/committer/s3"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/spf13/afero"
	"golang.org/x/sync/errgroup"
)

// publishManifests writes n checkpoints of node n1 into dest: each a data
// file of 2 bytes in one of three streams and its manifest, naming
// producer p<i%7> with the next sequence number on the stream, at epoch 1.
// Every 50th manifest is garbage (a rebuild skips it).
func publishManifests(t testing.TB, put func(name string, body []byte) error, n int) {
	t.Helper()
	seqs := map[string]int64{}
	for i := 1; i <= n; i++ {
		stream := fmt.Sprintf("s%d", i%3)
		p := fmt.Sprintf("p%d", i%7)
		final := fmt.Sprintf("%s/part-n1-%020d-0000.ndjson", stream, i)
		if err := put(final, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		seq := seqs[stream+"/"+p]
		seqs[stream+"/"+p]++
		f := committer.File{Stream: stream, Final: final, Bytes: 2, Records: 1,
			Producers: map[string]committer.SeqRanges{p: {{seq, seq}}},
			Epochs:    map[string]committer.ProducerEpoch{p: {Epoch: 1}}}
		body, err := layout.EncodeManifest(layout.NewManifest("n1", uint64(i), time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), []committer.File{f}))
		if err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			body = []byte("{not a manifest")
		}
		if err := put(layout.ManifestName("n1", uint64(i)), body); err != nil {
			t.Fatal(err)
		}
	}
}

var errInjectedRead = errors.New("injected read failure")

// slowReader delays each Open as a GET to an object store would, and
// fails the open of one name (fail).
type slowReader struct {
	committer.Reader
	delay  time.Duration
	fail   string
	opened atomic.Int64
}

func (s *slowReader) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	s.opened.Add(1)
	if name == s.fail {
		return nil, committer.Entry{}, errInjectedRead
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, committer.Entry{}, ctx.Err()
	}
	return s.Reader.Open(ctx, name)
}

// TestRebuildReadsConcurrently: a rebuild reading manifests 16 at a time
// gives what one reading them one by one gives (producers, counts, the
// newest manifest, the skipped ones), and a failed read ends it with that
// error, its other reads stopped.
func TestRebuildReadsConcurrently(t *testing.T) {
	fs := afero.NewMemMapFs()
	publishManifests(t, func(name string, body []byte) error { return afero.WriteFile(fs, "/dest/"+name, body, 0o644) }, 400)
	dest := local.New(fs, "/dest", "/staging")
	ctx := t.Context()
	one, err := rebuild(ctx, dest, "n1", 0, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if one.Manifests != 392 || one.Skipped != 8 || one.Highest != 399 || len(one.Producers) != 7 {
		t.Fatalf("one by one: %d manifests, %d skipped, highest %d, %d producers; want 392, 8, 399, 7",
			one.Manifests, one.Skipped, one.Highest, len(one.Producers))
	}
	for _, readers := range []int{2, 16, 64} {
		many, err := rebuild(ctx, &slowReader{Reader: dest, delay: time.Millisecond}, "n1", 0, nil, readers)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one, many) {
			t.Fatalf("%d readers: %+v, one by one: %+v", readers, many, one)
		}
	}
	sr := &slowReader{Reader: dest, delay: time.Millisecond, fail: layout.ManifestName("n1", 123)}
	if _, err := rebuild(ctx, sr, "n1", 0, nil, 16); !errors.Is(err, errInjectedRead) {
		t.Fatalf("a failed read: %v, want the rebuild to fail with it", err)
	}
	if got := sr.opened.Load(); got > 123+rebuildWindow+16 {
		t.Fatalf("%d manifests opened after a failed read at the 123rd: reads went on beyond the window", got)
	}
}

// TestRebuildReadsS3Speed times the rebuild of EOSINK_REBUILD_S3
// manifests on a MinIO, one reader against rebuildReaders, alternating
// three rounds; it checks both give the same answer.
func TestRebuildReadsS3Speed(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EOSINK_REBUILD_S3"))
	if n <= 0 {
		t.Skip("EOSINK_REBUILD_S3=<manifests> runs it")
	}
	srv := testsrv.StartMinIO(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	dest, err := s3.New(s3.Config{Client: client, Bucket: srv.Bucket, Prefix: "rebuild", Node: "n1", Staging: afero.NewMemMapFs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	begin := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	put := func(name string, body []byte) error {
		g.Go(func() error { return dest.Publish(ctx, name, body) })
		return nil
	}
	publishManifests(t, put, n)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d manifests and data files published in %s", n, time.Since(begin).Round(time.Millisecond))
	var want *Rebuilt
	took := map[int][]time.Duration{}
	for range 3 {
		for _, readers := range []int{1, rebuildReaders} {
			begin := time.Now()
			got, err := rebuild(ctx, dest, "n1", 0, nil, readers)
			if err != nil {
				t.Fatal(err)
			}
			took[readers] = append(took[readers], time.Since(begin))
			if want == nil {
				want = got
			} else if !reflect.DeepEqual(want, got) {
				t.Fatalf("%d readers: another rebuild", readers)
			}
		}
	}
	for _, readers := range []int{1, rebuildReaders} {
		d := took[readers]
		slices.Sort(d)
		t.Logf("%d readers: rebuild of %d manifests in %v (median %v; %.2f ms a manifest)", readers, n, d, d[1],
			float64(d[1].Microseconds())/1000/float64(n))
	}
}

// cancelAt cancels the rebuild's context at its Open number at and reads
// on regardless, as a Reader that does not watch the context (the local
// destination's Open) does.
type cancelAt struct {
	committer.Reader
	at     int64
	cancel context.CancelFunc
	opened atomic.Int64
}

func (c *cancelAt) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	if c.opened.Add(1) == c.at {
		c.cancel()
	}
	return c.Reader.Open(ctx, name)
}

// TestRebuildCancelledReturns: a rebuild whose context ends (the engine
// closing during a start) returns, with the context's error, also when
// the reads it started end well: it waits for no read that was never
// started.
func TestRebuildCancelledReturns(t *testing.T) {
	fs := afero.NewMemMapFs()
	publishManifests(t, func(name string, body []byte) error { return afero.WriteFile(fs, "/dest/"+name, body, 0o644) }, 400)
	dest := local.New(fs, "/dest", "/staging")
	// At the 200th open at least 72 manifests were taken (the window is
	// 128): each stream's folder is listed already, so only the reads
	// can see the context end.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := rebuild(ctx, &cancelAt{Reader: dest, at: 200, cancel: cancel}, "n1", 0, nil, rebuildReaders)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("rebuild with its context cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rebuild did not return 10 s after its context was cancelled")
	}
}

// cutBody serves the manifest cut of half its bytes, then fails the read
// as a connection reset in the middle of a GET's body does.
type cutBody struct {
	committer.Reader
	cut string
}

var errInjectedReset = errors.New("injected: connection reset by peer")

func (c *cutBody) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	rc, en, err := c.Reader.Open(ctx, name)
	if err != nil || name != c.cut {
		return rc, en, err
	}
	return &resetHalfway{ReadSeekCloser: rc, left: en.Bytes / 2}, en, nil
}

type resetHalfway struct {
	io.ReadSeekCloser
	left int64
}

func (r *resetHalfway) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, errInjectedReset
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.ReadSeekCloser.Read(p)
	r.left -= int64(n)
	return n, err
}

// TestRebuildReadCutShortIsNoGarbage: a manifest whose read fails halfway
// is an error of the rebuild (retried), not a manifest that does not
// parse: skipped, its producers' committed batches would be taken for
// lost and written again when their clients resend (I2).
func TestRebuildReadCutShortIsNoGarbage(t *testing.T) {
	fs := afero.NewMemMapFs()
	publishManifests(t, func(name string, body []byte) error { return afero.WriteFile(fs, "/dest/"+name, body, 0o644) }, 40)
	dest := local.New(fs, "/dest", "/staging")
	rb, err := rebuild(t.Context(), &cutBody{Reader: dest, cut: layout.ManifestName("n1", 17)}, "n1", 0, nil, rebuildReaders)
	if !errors.Is(err, errInjectedReset) {
		t.Fatalf("a manifest's read cut short: %v (rebuilt %+v), want the rebuild to fail with the read's error", err, rb)
	}
}

// pagesOnly is a destination that lists a page at a time and refuses to
// list the whole of it at once (which would hold every name of a bucket
// of millions in memory).
type pagesOnly struct {
	*local.Local
	pages atomic.Int64
}

func (p *pagesOnly) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	if prefix == "" {
		return nil, errors.New("the whole destination listed at once")
	}
	return p.Local.List(ctx, prefix)
}

func (p *pagesOnly) ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	p.pages.Add(1)
	return p.Local.ListPage(ctx, prefix, after, limit)
}

// TestUnnamedPartsPages: the look for part files without a manifest (every
// new node's first start, a rebuild) lists the destination a page at a
// time where it can, keeping only this node's names: its memory does not
// grow with the other nodes' files. It finds what a whole listing finds.
func TestUnnamedPartsPages(t *testing.T) {
	fs := afero.NewMemMapFs()
	put := func(name string) {
		if err := afero.WriteFile(fs, "/dest/"+name, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 2500; i++ {
		put(fmt.Sprintf("s%d/part-other-%020d-0000.ndjson", i%3, i))
	}
	put("s1/part-n1-00000000000000000007-0000.ndjson")
	put("s2/part-n1-00000000000000000007-0001.ndjson")
	put("tb/metadata/version-hint.text")
	put("tb/part-n1-00000000000000000009-0000.parquet")
	put(layout.QuarantineName("n1", "s0/part-n1-00000000000000000011-0000.ndjson"))
	dest := &pagesOnly{Local: local.New(fs, "/dest", "/staging")}
	parts, highest, err := UnnamedParts(t.Context(), dest, "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"s1/part-n1-00000000000000000007-0000.ndjson", "s2/part-n1-00000000000000000007-0001.ndjson"}
	if !reflect.DeepEqual(parts, want) || highest != 11 {
		t.Fatalf("parts %v, highest %d; want %v, 11", parts, highest, want)
	}
	if dest.pages.Load() < 3 {
		t.Fatalf("%d pages for 2,505 files", dest.pages.Load())
	}
}

// listWhole hides a destination's pages: UnnamedParts lists it whole, as
// before a30e297.
type listWhole struct{ committer.Reader }

// TestUnnamedPartsCost times the first start's look for part files over
// EOSINK_UNNAMED_FILES files of other nodes on the local file system
// (100 folders), listed whole against a page at a time, alternating three
// rounds, with the bytes each allocates and the heap it leaves in use
// at its peak (sampled every millisecond).
func TestUnnamedPartsCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EOSINK_UNNAMED_FILES"))
	if n <= 0 {
		t.Skip("EOSINK_UNNAMED_FILES=<files> runs it")
	}
	dir := t.TempDir()
	fs := afero.NewOsFs()
	for i := range n {
		name := fmt.Sprintf("%s/dest/s/d=%03d/part-other-%020d-0000.ndjson", dir, i%100, i+1)
		if i < 100 {
			if err := fs.MkdirAll(path.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := afero.WriteFile(fs, name, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dest := local.New(fs, dir+"/dest", dir+"/staging")
	for round := range 3 {
		for _, how := range []string{"whole", "pages"} {
			var r committer.Reader = dest
			if how == "whole" {
				r = listWhole{dest}
			}
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			peak := atomic.Uint64{}
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				var ms runtime.MemStats
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
						runtime.ReadMemStats(&ms)
						if ms.HeapInuse > peak.Load() {
							peak.Store(ms.HeapInuse)
						}
					}
				}
			}()
			begin := time.Now()
			parts, _, err := UnnamedParts(t.Context(), r, "n1", 0, 0)
			took := time.Since(begin)
			close(stop)
			<-sampled
			if err != nil || len(parts) != 0 {
				t.Fatal(parts, err)
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			t.Logf("round %d %s: %d files in %v, %.1f MB allocated, heap in use at peak %.1f MB above the start",
				round, how, n, took.Round(time.Millisecond), float64(after.TotalAlloc-before.TotalAlloc)/1e6,
				float64(int64(peak.Load())-int64(before.HeapInuse))/1e6)
		}
	}
}

// hugeManifests lists every manifest as MaxManifest bytes long (planted
// ones can be) and counts the reads in flight at once.
type hugeManifests struct {
	committer.Reader
	now, most atomic.Int64
}

func (h *hugeManifests) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	entries, err := h.Reader.List(ctx, prefix)
	for i := range entries {
		if strings.HasPrefix(entries[i].Path, layout.ManifestDir+"/") {
			entries[i].Bytes = layout.MaxManifest
		}
	}
	return entries, err
}

func (h *hugeManifests) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	n := h.now.Add(1)
	defer h.now.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	time.Sleep(time.Millisecond)
	return h.Reader.Open(ctx, name)
}

// TestRebuildReadsBoundBytes: manifests are read 16 at a time and up to
// 128 held, but not their bytes: a destination's manifests (planted ones
// up to MaxManifest, 1 GiB, each) are read only as many at once as a
// budget of bytes takes, one at a time when each is as large as it. Read
// 16 at once, 16 planted 1 GiB manifests took 16 GiB.
func TestRebuildReadsBoundBytes(t *testing.T) {
	fs := afero.NewMemMapFs()
	publishManifests(t, func(name string, body []byte) error { return afero.WriteFile(fs, "/dest/"+name, body, 0o644) }, 60)
	dest := &hugeManifests{Reader: local.New(fs, "/dest", "/staging")}
	if _, err := rebuild(t.Context(), dest, "n1", 0, nil, rebuildReaders); err != nil {
		t.Fatal(err)
	}
	if most := dest.most.Load(); most != 1 {
		t.Fatalf("%d manifests of %d bytes read at once, want 1", most, layout.MaxManifest)
	}
}
