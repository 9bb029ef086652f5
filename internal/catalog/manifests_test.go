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
