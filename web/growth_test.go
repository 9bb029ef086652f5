package web

import (
	"fmt"
	"testing"
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
		expectContains(t, page, fmt.Sprintf("%d streams", streams), `href="/ui/files/zz-newest`)
		return len(page)
	}
	small, large := size(300), size(600)
	if d := large - small; d > 1024 || d < -1024 {
		t.Errorf("overview is %d bytes with 300 streams and %d with 600 (%+d): it grows with the number of streams", small, large, d)
	}
}
