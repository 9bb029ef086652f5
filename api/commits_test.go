package api

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/testing/enginetest"
)

func TestCommitsFeed(t *testing.T) {
	r := filled(t, rigOpts{})
	all := getOK[CommitList](r, "/v1/commits")
	if len(all.Commits) != 2 || all.More || all.Next == "" {
		t.Fatalf("feed %+v", all)
	}
	first := all.Commits[0]
	if first.Node != enginetest.Node || first.Checkpoint >= all.Commits[1].Checkpoint || first.CommittedAt == nil ||
		first.FileCount == nil || *first.FileCount != 2 || len(first.Files) != 2 || first.Manifest == "" {
		t.Fatalf("first commit %+v", first)
	}
	records := int64(0)
	for _, c := range all.Commits {
		for _, f := range c.Files {
			records += f.Records
		}
	}
	if records != 7 {
		t.Fatalf("records %d, want 7", records)
	}
	// Its manifest is downloadable where it says.
	expectStatus(t, r.do("GET", "/v1/files/"+first.Manifest, ""), http.StatusOK)

	// A page at a time, each commit once.
	p1 := decode[CommitList](t, r.do("GET", "/v1/commits?limit=1", ""))
	if len(p1.Commits) != 1 || !p1.More || p1.Commits[0].Checkpoint != first.Checkpoint {
		t.Fatalf("page 1 %+v", p1)
	}
	p2 := decode[CommitList](t, r.do("GET", "/v1/commits?limit=1&after="+p1.Next, ""))
	if len(p2.Commits) != 1 || p2.Commits[0].Checkpoint != all.Commits[1].Checkpoint {
		t.Fatalf("page 2 %+v", p2)
	}
	end := decode[CommitList](t, r.do("GET", "/v1/commits?after="+p2.Next, ""))
	if len(end.Commits) != 0 || end.More || end.Next != p2.Next {
		t.Fatalf("end %+v", end)
	}
	// The stream filter.
	logs := decode[CommitList](t, r.do("GET", "/v1/commits?stream=logs", ""))
	if len(logs.Commits) != 1 || len(logs.Commits[0].Files) != 1 || logs.Commits[0].Files[0].Stream != "logs" || logs.Next != all.Next {
		t.Fatalf("logs %+v", logs)
	}

	// Bad parameters.
	stale := catalog.Cursor{}.With(enginetest.Node, all.Commits[1].Checkpoint+1000).String()
	other := catalog.Cursor{}.With("another-node", 1).String()
	for _, tc := range []struct{ query, code string }{
		{"after=forged", CodeInvalidCursor},
		{"after=" + stale, CodeInvalidCursor},
		{"after=" + other, CodeInvalidCursor},
		{"after=" + p1.Next + "A", CodeInvalidCursor},
		{"limit=0", CodeInvalidLimit},
		{"limit=10001", CodeInvalidLimit},
		{"wait=61", CodeInvalidWait},
		{"wait=-1s", CodeInvalidWait},
		{"wait=soon", CodeInvalidWait},
		{"stream=No", CodeInvalidStream},
		{"stream=", CodeInvalidStream},
	} {
		rec := r.do("GET", "/v1/commits?"+tc.query, "")
		if rec.Code != http.StatusBadRequest || decode[ErrorResponse](t, rec).Error != tc.code {
			t.Errorf("%s: %d %s, want 400 %s", tc.query, rec.Code, rec.Body, tc.code)
		}
	}
}

// With wait, an empty page waits for the next commit and answers with it.
func TestCommitsLongPoll(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.waitReady()
	cat, err := catalog.New(catalog.Config{Files: r.srv.files, State: r.eng, Node: enginetest.Node, FeedPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = newServer(t, r.eng, r.srv.files, func(c *Config) { c.Catalog = cat })
	start := decode[CommitList](t, r.do("GET", "/v1/commits", ""))

	// Nothing comes: the wait ends, an empty page, the same cursor.
	began := time.Now()
	empty := decode[CommitList](t, r.do("GET", "/v1/commits?wait=300ms&after="+url.QueryEscape(start.Next), ""))
	if d := time.Since(began); d < 300*time.Millisecond || len(empty.Commits) != 0 || empty.Next != start.Next {
		t.Fatalf("after %v: %+v", d, empty)
	}

	got := make(chan CommitList, 1)
	go func() {
		got <- decode[CommitList](t, r.do("GET", "/v1/commits?wait=20&after="+url.QueryEscape(start.Next), ""))
	}()
	time.Sleep(100 * time.Millisecond)
	expectStatus(t, r.admin("POST", "/v1/streams/clicks/records", "{\"n\":1}\n", "Content-Type", "application/x-ndjson"), http.StatusAccepted)
	ck := r.checkpoint()
	select {
	case page := <-got:
		if len(page.Commits) != 1 || page.Commits[0].Checkpoint != ck.ID {
			t.Fatalf("page %+v, want checkpoint %d", page, ck.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request did not see the commit")
	}

	// The server stopping ends a wait at once.
	go func() {
		got <- decode[CommitList](t, r.do("GET", "/v1/commits?wait=60&after="+url.QueryEscape(start.Next)+"&stream=views", ""))
	}()
	time.Sleep(100 * time.Millisecond)
	began = time.Now()
	r.srv.EndWaits()
	select {
	case page := <-got:
		if len(page.Commits) != 0 || time.Since(began) > 5*time.Second {
			t.Fatalf("page %+v", page)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("EndWaits did not end the wait")
	}
}

func TestCommitsRole(t *testing.T) {
	r := filled(t, rigOpts{api: withAuth})
	for tok, want := range map[string]int{"": http.StatusUnauthorized, enginetest.TokIngest: http.StatusForbidden, enginetest.TokRead: http.StatusOK, enginetest.TokAdmin: http.StatusOK} {
		var hdr []string
		if tok != "" {
			hdr = []string{"Authorization", "Bearer " + tok}
		}
		if rec := r.do("GET", "/v1/commits", "", hdr...); rec.Code != want {
			t.Errorf("token %q: %d, want %d", tok, rec.Code, want)
		}
	}
}
