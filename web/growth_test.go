package web

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/eosink/eosink/committer"
)

// TestOverviewDoesNotGrowWithStreams holds I11 for the overview: its answer
// is the same size whether 300 or 600 streams have committed files, so a
// UI open on a service with 100k streams does not render 100k rows on
// every refresh. ("a year in an hour", issue 12 item 6: with 1,000
// streams the overview was 347 KB, one row per stream.)
func TestOverviewDoesNotGrowWithStreams(t *testing.T) {
	size := func(streams int) int {
		r := newRig(t, rigOpts{})
		for i := range streams - 1 {
			r.write(fmt.Sprintf("s%04d", i), "{\"n\":1}\n")
		}
		r.checkpoint()
		r.write("zz-newest", "{\"n\":1}\n") // committed last: listed whatever the cap
		r.checkpoint()
		page := r.page(t, "/ui/")
		expectContains(t, page, `zz-newest`)
		return len(page)
	}
	small, large := size(300), size(600)
	if d := large - small; d > 1024 || d < -1024 {
		t.Errorf("overview is %d bytes with 300 streams and %d with 600 (%+d): it grows with the number of streams", small, large, d)
	}
}

// entryCounter counts the entries its listings return and the files
// opened.
type entryCounter struct {
	committer.Reader
	listed, opened atomic.Int64
}

func (c *entryCounter) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	es, err := c.Reader.List(ctx, prefix)
	c.listed.Add(int64(len(es)))
	return es, err
}

func (c *entryCounter) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	c.opened.Add(1)
	return c.Reader.Open(ctx, name)
}

// TestOverviewWorkDoesNotGrowWithFiles holds that one overview after a new
// checkpoint reads as many destination entries with 300 committed files as
// with 600: the listing merges the new checkpoint's files from the state
// store instead of listing the destination again. (Its CPU work, the merge
// and the per-stream totals, is still linear in the files listed; see
// "a year in an hour" in BENCHMARKS.md.)
func TestOverviewWorkDoesNotGrowWithFiles(t *testing.T) {
	work := func(files int) int64 {
		var cr *entryCounter
		r := newRig(t, rigOpts{ui: func(c *Config) {
			cr = &entryCounter{Reader: c.Files}
			c.Files = cr
		}})
		for i := range files {
			r.write(fmt.Sprintf("s%04d", i), "{\"n\":1}\n")
		}
		r.checkpoint()
		r.page(t, "/ui/")
		r.write("one-more", "{\"n\":1}\n")
		r.checkpoint()
		before := cr.listed.Load() + cr.opened.Load()
		r.page(t, "/ui/")
		return cr.listed.Load() + cr.opened.Load() - before
	}
	small, large := work(300), work(600)
	if large > small+16 {
		t.Errorf("one overview after a checkpoint read %d destination entries with 300 files and %d with 600: its cost grows with the destination", small, large)
	}
}
