package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/spf13/afero"
)

func TestListLimits(t *testing.T) {
	r := filled(t, rigOpts{})
	for _, list := range []string{"/v1/files", "/v1/streams", "/v1/checkpoints"} {
		for _, tc := range []struct {
			query  string
			status int
			code   string
		}{
			{"limit=0", 400, "invalid_limit"},
			{"limit=-1", 400, "invalid_limit"},
			{"limit=10001", 400, "invalid_limit"},
			{"limit=abc", 400, "invalid_limit"},
			{"limit=1.5", 400, "invalid_limit"},
			{"limit=", 400, "invalid_limit"},
			{"", 200, ""},
			{"limit=1", 200, ""},
			{"limit=10000", 200, ""},
		} {
			target := list + "?" + tc.query
			rec := r.do("GET", target, "")
			if tc.code == "" {
				expectStatus(t, rec, tc.status)
			} else {
				expectError(t, rec, tc.status, tc.code)
			}
		}
	}
	for _, tc := range []struct {
		target string
		code   string
	}{
		{"/v1/checkpoints?after=x", "invalid_id"},
		{"/v1/checkpoints?after=-1", "invalid_id"},
		{"/v1/streams?after=Bad..Name", "invalid_stream"},
		{"/v1/streams?after=_manifests", "invalid_stream"},
		{"/v1/files?after=a%00b", "invalid_path"},
		{"/v1/producers?after=-bad", "invalid_producer"}, // was invalid_after, a code in no list
	} {
		expectError(t, r.do("GET", tc.target, ""), http.StatusBadRequest, tc.code)
	}
}

// pageAll follows next cursors from target (which holds limit=) and returns
// every page's items, by key. between, if set, runs between two pages.
func pageAll[T any](t *testing.T, r *rig, target string, items func(T) ([]string, string), between ...func()) []string {
	t.Helper()
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("%s: no end of pages", target)
		}
		u := target
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		rec := r.do("GET", u, "")
		expectStatus(t, rec, http.StatusOK)
		keys, next := items(decode[T](t, rec))
		all = append(all, keys...)
		if next == "" {
			return all
		}
		for _, f := range between {
			f()
		}
		if len(keys) == 0 || next != keys[len(keys)-1] {
			t.Fatalf("%s after %q: next %q is not the page's last item %q", target, after, next, keys)
		}
		after = next
	}
}

func fileKeys(l FileList) ([]string, string) {
	var k []string
	for _, f := range l.Files {
		k = append(k, f.Path)
	}
	return k, l.Next
}

func streamKeys(l StreamList) ([]string, string) {
	var k []string
	for _, s := range l.Streams {
		k = append(k, s.Name)
	}
	return k, l.Next
}

func checkpointKeys(l CheckpointList) ([]string, string) {
	var k []string
	for _, c := range l.Checkpoints {
		k = append(k, fmt.Sprint(c.ID))
	}
	return k, l.Next
}

// wantOnceEach checks that got holds each of want exactly once and no item
// twice.
func wantOnceEach(t *testing.T, what string, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
		if seen[g] == 2 {
			t.Errorf("%s: %q listed twice", what, g)
		}
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("%s: %q missing", what, w)
		}
	}
}

// TestPaginationWhileWriting pages files, streams and checkpoints in small
// pages while writes and checkpoints go on: every item there before the
// paging started is listed exactly once, and no item twice.
func TestPaginationWhileWriting(t *testing.T) {
	r := newRig(t, rigOpts{})
	// Stream names whose folders sort differently from their paths.
	streams := []string{"a", "a-b", "a.b", "a0", "b", "c_1"}
	post := func(stream string, n int) {
		t.Helper()
		expectStatus(t, r.admin("POST", "/v1/streams/"+stream+"/records", fmt.Sprintf("{\"n\":%d}\n", n),
			"Content-Type", "application/x-ndjson"), http.StatusAccepted)
	}
	for i := range 4 {
		for _, s := range streams {
			post(s, i)
		}
		r.checkpoint()
	}
	before := func() (files, ckpts []string) {
		fl, _ := fileKeys(decode[FileList](t, r.do("GET", "/v1/files?limit=10000", "")))
		cl, _ := checkpointKeys(decode[CheckpointList](t, r.do("GET", "/v1/checkpoints?limit=10000", "")))
		return fl, cl
	}
	files0, ckpts0 := before()
	if len(files0) != 4*len(streams) || len(ckpts0) != 4 {
		t.Fatalf("setup: %d files, %d checkpoints", len(files0), len(ckpts0))
	}

	// Between two pages (the first 12 of each listing, so that it ends):
	// writes to old streams and to new ones on either side of the cursor,
	// and a checkpoint committing them.
	writes, pages := 0, 0
	churn := func() {
		if pages++; pages > 12 {
			return
		}
		writes++
		for _, s := range []string{streams[writes%len(streams)], fmt.Sprintf("a%03d", writes), fmt.Sprintf("z%03d", writes)} {
			post(s, writes)
		}
		r.checkpoint()
	}
	for _, limit := range []int{1, 2, 5} {
		pages = 0
		files := pageAll(t, r, fmt.Sprintf("/v1/files?limit=%d", limit), fileKeys, churn)
		wantOnceEach(t, fmt.Sprintf("files by %d", limit), files, files0)
		if !slices.IsSorted(files) {
			t.Errorf("files by %d not in path order: %q", limit, files)
		}
		pages = 0
		got := pageAll(t, r, fmt.Sprintf("/v1/streams?limit=%d", limit), streamKeys, churn)
		wantOnceEach(t, fmt.Sprintf("streams by %d", limit), got, streams)
		pages = 0
		ckpts := pageAll(t, r, fmt.Sprintf("/v1/checkpoints?limit=%d", limit), checkpointKeys, churn)
		wantOnceEach(t, fmt.Sprintf("checkpoints by %d", limit), ckpts, ckpts0)
		// A prefix pages too.
		pages = 0
		clicks := pageAll(t, r, fmt.Sprintf("/v1/files?prefix=a/&limit=%d", limit), fileKeys, churn)
		var want []string
		for _, f := range files0 {
			if strings.HasPrefix(f, "a/") {
				want = append(want, f)
			}
		}
		wantOnceEach(t, fmt.Sprintf("files under a/ by %d", limit), clicks, want)
		for _, f := range clicks {
			if !strings.HasPrefix(f, "a/") {
				t.Errorf("prefix a/: %q", f)
			}
		}
	}
	if writes < 3*4*5 {
		t.Fatalf("only %d checkpoints between pages", writes)
	}

	// At rest, the pages of streams hold each stream's counts whole.
	whole := decode[StreamList](t, r.do("GET", "/v1/streams?limit=10000", ""))
	var paged []Stream
	after := ""
	for {
		sl := decode[StreamList](t, r.do("GET", "/v1/streams?limit=1&after="+after, ""))
		paged = append(paged, sl.Streams...)
		if sl.Next == "" {
			break
		}
		after = sl.Next
	}
	if !slices.Equal(paged, whole.Streams) || whole.Next != "" {
		t.Fatalf("paged streams %+v\nwhole %+v", paged, whole)
	}
}

// writeStreams puts n streams of one small file each, all in checkpoint 1,
// and its manifest, straight into the destination of fsys.
func writeStreams(t *testing.T, fsys afero.Fs, n int) {
	t.Helper()
	m := layout.Manifest{Checkpoint: 1, Node: enginetest.Node, CommittedAt: time.Now().UTC()}
	for i := range n {
		p := fmt.Sprintf("stream-%05d/dt=2026-11-29/hour=09/part-%s-%020d-%04d.ndjson", i, enginetest.Node, 1, i)
		if err := afero.WriteFile(fsys, path.Join(enginetest.Dest, p), []byte("{\"n\":1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, layout.ManifestFile{Path: p, Stream: fmt.Sprintf("stream-%05d", i), Bytes: 8, Records: 1,
			Producers: map[string]committer.SeqRanges{}})
	}
	b, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(fsys, path.Join(enginetest.Dest, layout.ManifestName(enginetest.Node, 1)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestListAnswersBounded: with 20,000 streams, no list answer grows with
// them; the pages still hold every stream and file once.
func TestListAnswersBounded(t *testing.T) {
	const n = 20000
	r := newRig(t, rigOpts{})
	r.Broken("plants files with manifests but no checksums")
	writeStreams(t, r.base, n)
	for _, tc := range []struct {
		target string
		max    int // bytes
		items  int
	}{
		// ~190 bytes a file, ~70 a stream
		{"/v1/files", 256 << 10, 1000},
		{"/v1/files?limit=10", 4 << 10, 10},
		{"/v1/streams", 96 << 10, 1000},
		{"/v1/streams?limit=10", 2 << 10, 10},
		{"/v1/files?prefix=_manifests/", 1 << 10, 1},
		{"/v1/checkpoints", 1 << 10, 0},
	} {
		rec := r.do("GET", tc.target, "")
		expectStatus(t, rec, http.StatusOK)
		if rec.Body.Len() > tc.max {
			t.Errorf("%s: %d bytes, want at most %d", tc.target, rec.Body.Len(), tc.max)
		}
		var v struct {
			Files, Streams, Checkpoints []json.RawMessage
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if got := len(v.Files) + len(v.Streams) + len(v.Checkpoints); got != tc.items {
			t.Errorf("%s: %d items, want %d", tc.target, got, tc.items)
		}
		t.Logf("%s: %d bytes", tc.target, rec.Body.Len())
	}
	streams := pageAll(t, r, "/v1/streams?limit=10000", streamKeys)
	files := pageAll(t, r, "/v1/files?limit=10000", fileKeys)
	if len(streams) != n || len(files) != n {
		t.Fatalf("%d streams, %d files paged, want %d", len(streams), len(files), n)
	}
	wantOnceEach(t, "streams", streams, nil)
	wantOnceEach(t, "files", files, nil)
	// Records come from the manifest.
	sl := decode[StreamList](t, r.do("GET", "/v1/streams?limit=2&after=stream-09999", ""))
	if len(sl.Streams) != 2 || sl.Streams[0] != (Stream{Name: "stream-10000", Files: 1, Records: 1, Bytes: 8}) || sl.Next != "stream-10001" {
		t.Fatalf("page after stream-09999: %+v", sl)
	}
}
