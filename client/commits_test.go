package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eosink/eosink/client"
)

// The iterator follows the feed across pages and a crash of the service,
// each commit once, and reads each committed record once.
func TestCommitsIterator(t *testing.T) {
	r := newRig(t, 0).start()
	p := r.initClient("feeder")
	reader := r.client("")
	want := map[string]bool{}
	send := func(tag string) {
		t.Helper()
		recs, _ := records(tag, 3)
		if _, err := p.Send(ctx(t), "clicks", recs); err != nil {
			t.Fatal(err)
		}
		for _, l := range recs {
			want[string(l)] = true
		}
		r.checkpoint()
	}
	for i := range 3 {
		send(fmt.Sprintf("a%d", i))
	}
	got := map[string]int{}
	commits := map[string]int{}
	cursor := ""
	read := func(stopAt int) {
		t.Helper()
		for page, err := range reader.Commits(ctx(t), client.FeedQuery{After: cursor, Limit: 1, Wait: 5 * time.Second}) {
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Commits) != 1 {
				t.Fatalf("page of %d commits with limit 1", len(page.Commits))
			}
			for _, c := range page.Commits {
				commits[fmt.Sprintf("%s/%d", c.Node, c.Checkpoint)]++
				for _, f := range c.Files {
					data, err := reader.Download(ctx(t), f.Path, 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
						got[string(l)]++
					}
				}
			}
			cursor = page.Next
			if len(commits) == stopAt {
				return
			}
		}
	}
	read(3)
	r.crash()
	send("b0")
	read(4)
	if len(got) != len(want) {
		t.Fatalf("read %d records, %d committed", len(got), len(want))
	}
	for l, n := range got {
		if n != 1 || !want[l] {
			t.Fatalf("record %s read %d times", l, n)
		}
	}
	for c, n := range commits {
		if n != 1 {
			t.Fatalf("commit %s seen %d times", c, n)
		}
	}

	// A cursor the service did not give.
	_, err := reader.CommitsPage(ctx(t), client.FeedQuery{After: "forged"})
	if !errors.Is(err, client.ErrInvalidCursor) {
		t.Fatalf("forged cursor: %v, want ErrInvalidCursor", err)
	}
	for _, err := range reader.Commits(ctx(t), client.FeedQuery{After: "AQ" + cursor}) {
		if !errors.Is(err, client.ErrInvalidCursor) {
			t.Fatalf("forged cursor: %v, want ErrInvalidCursor", err)
		}
		break
	}
}

func TestLocate(t *testing.T) {
	r := newRig(t, 0).start()
	p := r.initClient("locator")
	recs, _ := records("x", 2)
	res, err := p.Send(ctx(t), "clicks", recs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Locate(ctx(t), "locator", "clicks", res.Seq); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("before the commit: %v, want ErrNotFound", err)
	}
	r.checkpoint()
	loc, err := p.Locate(ctx(t), "locator", "clicks", res.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if len(loc.Locations) != 1 || loc.Locations[0].Incarnation == nil || !loc.Complete {
		t.Fatalf("locations %+v", loc)
	}
	data, err := p.Download(ctx(t), loc.Locations[0].Path, 1<<20)
	if err != nil || !bytes.Contains(data, recs[1]) {
		t.Fatalf("download %s: %q %v", loc.Locations[0].Path, data, err)
	}
}
