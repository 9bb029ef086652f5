package catalog

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
)

// openCounter is a Reader that counts the opens of each file.
type openCounter struct {
	Reader
	mu    sync.Mutex
	opens map[string]int
}

func (o *openCounter) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	o.mu.Lock()
	o.opens[name]++
	o.mu.Unlock()
	return o.Reader.Open(ctx, name)
}

// TestManifestTooLargeReadOnce: a manifest too large for the cache was
// read and parsed again for every file a listing counted (GET
// /v1/streams/s took 13 CPU-minutes after 330 writes). It is now read at
// most once, whether its size alone is over the cache (not even parsed)
// or only its parsed form is; its files' records are unknown, and the
// listing still answers.
func TestManifestTooLargeReadOnce(t *testing.T) {
	const files = 60
	d := newDest(t)
	ck := &recovery.Checkpoint{ID: 1, State: recovery.Committed, PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	for i := range files {
		p := fmt.Sprintf("s/k=%03d/%s", i, layout.PartName("n1", 1, i, "ndjson"))
		d.write(p, []byte("{}\n"))
		ck.Files = append(ck.Files, committer.File{Stream: "s", Final: p, Bytes: 3, Records: 1, CRC32C: "00000000"})
	}
	doc, err := recovery.BuildManifest("n1", ck)
	if err != nil {
		t.Fatal(err)
	}
	mp := layout.ManifestName("n1", 1)
	d.write(mp, doc)
	parsed, err := layout.ReadManifest(t.Context(), d.local, mp)
	if err != nil {
		t.Fatal(err)
	}
	size, cost := int64(len(doc)), manifestCost(parsed)
	if cost <= size {
		t.Fatalf("the parsed manifest costs %d, its file %d: the test needs it to cost more", cost, size)
	}
	for _, tt := range []struct {
		name string
		max  int64
	}{
		{"file over the cache", size / 2},
		{"parsed form over the cache", (size + cost) / 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			oc := &openCounter{Reader: d.local, opens: map[string]int{}}
			c := d.catalog(Config{Files: oc, ManifestBytes: tt.max})
			var sts []StreamStat
			for range 2 {
				st, err := c.Stream(t.Context(), "s")
				if err != nil {
					t.Fatal(err)
				}
				sts = append(sts, st)
			}
			if n := oc.opens[mp]; n != 1 {
				t.Fatalf("two listings of %d files opened their manifest %d times, want once", files, n)
			}
			for _, st := range sts {
				if st.Files != files || st.Unknown != files {
					t.Fatalf("stream: %+v, want %d files of unknown records", st, files)
				}
			}
			// The manifest alone (a checkpoint's page) is still refused
			// without being read again, with a reason.
			if _, err := c.Manifest(t.Context(), "n1", 1); err == nil || !strings.Contains(err.Error(), "too large") {
				t.Fatalf("manifest: %v, want too large", err)
			}
			if n := oc.opens[mp]; n != 1 {
				t.Fatalf("opened %d times", n)
			}
		})
	}
	// Within the cache, it is read once and its records are known.
	oc := &openCounter{Reader: d.local, opens: map[string]int{}}
	c := d.catalog(Config{Files: oc})
	st, err := c.Stream(t.Context(), "s")
	if err != nil || st.Records != files || st.Unknown != 0 || oc.opens[mp] != 1 {
		t.Fatalf("stream %+v %v, opens %d", st, err, oc.opens[mp])
	}
}

// commitSeqs writes node's checkpoint id: one file of stream holding
// producer p's ranges rs in incarnation inc.
func (d *dest) commitSeqs(node string, id uint64, stream, p string, inc int64, rs committer.SeqRanges) string {
	d.t.Helper()
	data := []byte("{}\n")
	path := stream + "/dt=2026-11-29/hour=09/" + layout.PartName(node, id, 0, "ndjson")
	d.write(path, data)
	c := &recovery.Checkpoint{ID: id, State: recovery.Committed, PreparedAt: time.Date(2026, 11, 29, 9, 0, int(id), 0, time.UTC),
		Files: []committer.File{{Stream: stream, Final: path, Bytes: 3, Records: 1, CRC32C: "00000000",
			Producers: map[string]committer.SeqRanges{p: rs},
			Epochs:    map[string]committer.ProducerEpoch{p: {Epoch: inc + 1, Incarnation: inc}}}}}
	m, err := recovery.BuildManifest(node, c)
	if err != nil {
		d.t.Fatal(err)
	}
	d.write(layout.ManifestName(node, id), m)
	return path
}

func TestLocateSeq(t *testing.T) {
	d := newDest(t)
	old := d.commitSeqs("a", 1, "clicks", "p1", 0, committer.SeqRanges{{0, 4}})
	d.commitSeqs("a", 2, "clicks", "p1", 0, committer.SeqRanges{{5, 7}, {9, 9}})
	d.commitSeqs("a", 3, "views", "p1", 0, committer.SeqRanges{{0, 9}})
	// Deleted and created again: a new incarnation counts from 0 again.
	cur := d.commitSeqs("a", 5, "clicks", "p1", 3, committer.SeqRanges{{0, 2}})
	c := d.catalog(Config{})
	for _, tc := range []struct {
		seq  int64
		want []string
	}{
		{1, []string{"a/5/inc3@" + cur, "a/1/inc0@" + old}},
		{4, []string{"a/1/inc0@" + old}},
		{8, nil},
		{9, []string{"a/2/inc0@" + layout.PartName("a", 2, 0, "ndjson")}},
		{100, nil},
	} {
		locs, complete, err := c.LocateSeq(t.Context(), "p1", "clicks", tc.seq, 0)
		if err != nil || !complete {
			t.Fatalf("seq %d: %v complete %v", tc.seq, err, complete)
		}
		var got []string
		for _, l := range locs {
			s := fmt.Sprintf("%s/%d/inc%d@%s", l.Node, l.Checkpoint, l.Incarnation, l.Path)
			if tc.seq == 9 {
				s = fmt.Sprintf("%s/%d/inc%d@%s", l.Node, l.Checkpoint, l.Incarnation, layout.PartName("a", 2, 0, "ndjson"))
				if l.First != 9 || l.Last != 9 {
					t.Errorf("seq 9: range %d-%d", l.First, l.Last)
				}
			}
			got = append(got, s)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("seq %d: %v, want %v", tc.seq, got, tc.want)
		}
	}
	// Beyond the budget: said so.
	for id := uint64(10); id < 120; id++ {
		d.commitSeqs("a", id, "other", "p2", 0, committer.SeqRanges{{int64(id), int64(id)}})
	}
	locs, complete, err := c.LocateSeq(t.Context(), "p1", "clicks", 1, 100)
	if err != nil || complete || len(locs) != 0 {
		t.Fatalf("bounded: %v %v %v", locs, complete, err)
	}
}
