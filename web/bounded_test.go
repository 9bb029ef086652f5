package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// Shape of the destination of TestPagesBounded.
const (
	bStreams     = 20000 // streams of one file each, all in checkpoint 1
	bBigFiles    = 1200  // files of the stream "big", in one partition, checkpoint 2
	bCheckpoints = 2500  // checkpoints in the store
	bBigDir      = "big/dt=2026-11-29/hour=09"
	bIDStreams   = bCheckpoints - 1 // the checkpoint of the streams' files
	bIDBig       = bCheckpoints     // of big's
)

// bigDest writes the destination of TestPagesBounded straight into a
// MemMapFs, with the manifests, and a store of bCheckpoints checkpoints:
// the next to newest holds the 20,000 streams' files and the sequence
// numbers of 20,000 producers, the newest the files of "big".
func bigDest(t *testing.T) (committer.Reader, *fakeStore) {
	t.Helper()
	fsys := afero.NewMemMapFs()
	at := time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)
	write := func(p string, b []byte) {
		if err := afero.WriteFile(fsys, path.Join(enginetest.Dest, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(id uint64, files []committer.File) {
		m := layout.Manifest{Checkpoint: id, Node: enginetest.Node, CommittedAt: at}
		for _, f := range files {
			m.Files = append(m.Files, layout.ManifestFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records,
				CRC32C: f.CRC32C, Producers: map[string]committer.SeqRanges{}})
		}
		b, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ManifestName(enginetest.Node, id), b)
	}
	var one, big []committer.File
	seqs := map[string]map[string]int64{}
	for i := range bStreams {
		stream := fmt.Sprintf("stream-%05d", i)
		p := fmt.Sprintf("%s/dt=2026-11-29/hour=09/part-%s-%020d-%04d.ndjson", stream, enginetest.Node, bIDStreams, i)
		write(p, []byte("{\"n\":1}\n"))
		one = append(one, committer.File{Stream: stream, Final: p, Bytes: 8, Records: 1, CRC32C: "00000000"})
		seqs[fmt.Sprintf("producer-%05d", i)] = map[string]int64{stream: 1}
	}
	for i := range bBigFiles {
		p := fmt.Sprintf("%s/part-%s-%020d-%04d.ndjson", bBigDir, enginetest.Node, bIDBig, i)
		write(p, []byte("{\"b\":1}\n"))
		big = append(big, committer.File{Stream: "big", Final: p, Bytes: 8, Records: 1, CRC32C: "00000000"})
	}
	manifest(bIDStreams, one)
	manifest(bIDBig, big)
	store := &fakeStore{}
	for id := uint64(1); id <= bCheckpoints; id++ {
		c := recovery.Checkpoint{ID: id, State: recovery.Committed, StartedAt: at.Add(time.Duration(id) * time.Second),
			CommittedAt: at.Add(time.Duration(id)*time.Second + time.Millisecond), DurationMS: 1}
		switch id {
		case bIDStreams:
			c.Files, c.FileCount, c.Records, c.Bytes, c.Seqs = one, len(one), int64(len(one)), 8*int64(len(one)), seqs
		case bIDBig:
			c.Files, c.FileCount, c.Records, c.Bytes = big, len(big), int64(len(big)), 8*int64(len(big))
		}
		store.cs = append(store.cs, c)
	}
	return local.New(fsys, enginetest.Dest, enginetest.Staging), store
}

var (
	ckptRowRE = regexp.MustCompile(`<tr[^>]* data-id="([0-9]+)">`)
	fileRowRE = regexp.MustCompile(`<td class="mono break"><a href="/ui/files/([^"]+)">`)
	streamRE  = regexp.MustCompile(`<tr data-name="([^"]+)">`)
)

// TestPagesBounded: with 20,000 streams in one checkpoint, 2,500
// checkpoints and a folder of 1,200 files, no page of the UI grows with
// them (bytes, not time), no page lists the whole destination, and paging
// with the pages' own links visits every stream, folder, file and
// checkpoint exactly once.
func TestPagesBounded(t *testing.T) {
	files, store := bigDest(t)
	cr := &countingReader{Reader: files}
	eng := &fakeEngine{status: server.Status{Ready: true, OpenID: bCheckpoints + 1, LastDone: bCheckpoints}}
	h := newFakeUI(t, cr, eng, store, func(c *Config) { c.Node = enginetest.Node })
	get := func(target string) string {
		t.Helper()
		rec := serveH(h, req("GET", target, ""))
		expectCode(t, rec, http.StatusOK)
		return rec.Body.String()
	}
	for _, tc := range []struct {
		target string
		max    int // bytes
		want   []string
	}{
		{"/ui/", 64 << 10, []string{`href="/ui/streams"`, `href="/ui/files/stream-00000/"`}},
		{"/ui/streams", 96 << 10, []string{`href="/ui/files/big/"`, `href="/ui/files/stream-00098/"`, `rel="next"`}},
		{"/ui/files/", 384 << 10, []string{`href="/ui/files/stream-00497/"`, `rel="next"`}},
		{"/ui/files/" + bBigDir + "/", 640 << 10, []string{`rel="next"`}},
		{"/ui/files/" + bBigDir + "/" + fmt.Sprintf("part-%s-%020d-%04d.ndjson", enginetest.Node, bIDBig, 7), 32 << 10, []string{"Manifest entry"}},
		{"/ui/checkpoints", 160 << 10, []string{`rel="next"`}},
		{fmt.Sprintf("/ui/checkpoints/%d", bIDStreams), 256 << 10, []string{"1–200 of 20,000", `rel="next"`, "the first 200 of 20,000"}},
		{fmt.Sprintf("/ui/checkpoints/%d", bIDBig), 160 << 10, []string{"1–200 of 1,200"}},
		{"/ui/producers", 96 << 10, nil},
	} {
		body := get(tc.target)
		t.Logf("%s: %d bytes", tc.target, len(body))
		if len(body) > tc.max {
			t.Errorf("%s: %d bytes, want at most %d", tc.target, len(body), tc.max)
		}
		expectContains(t, body, tc.want...)
	}
	if n := cr.lists.Load(); n != 0 {
		t.Errorf("the destination was listed whole %d times", n)
	}

	// pageAll follows "next" links from target and returns what re finds
	// on every page.
	pageAll := func(target string, re *regexp.Regexp) []string {
		t.Helper()
		var out []string
		for pages := 0; target != ""; pages++ {
			if pages > 1000 {
				t.Fatalf("paging from %s does not end", target)
			}
			body := get(target)
			for _, m := range re.FindAllStringSubmatch(body, -1) {
				out = append(out, m[1])
			}
			target = nextLink(body)
		}
		return out
	}
	wantEach := func(what string, got []string, want func(i int) string, n int) {
		t.Helper()
		if len(got) != n {
			t.Errorf("%s: %d paged, want %d", what, len(got), n)
		}
		for i := range min(n, len(got)) {
			if got[i] != want(i) {
				t.Fatalf("%s: item %d is %s, want %s", what, i, got[i], want(i))
			}
		}
	}
	streamName := func(i int) string { return fmt.Sprintf("stream-%05d", i) }
	// The root: "_manifests", "big", then the streams, each once.
	root := pageAll("/ui/files/", rowName)
	wantEach("root folder", root, func(i int) string {
		switch i {
		case 0:
			return "_manifests"
		case 1:
			return "big"
		}
		return streamName(i - 2)
	}, bStreams+2)
	wantEach("big folder", pageAll("/ui/files/"+bBigDir+"/", rowName), func(i int) string {
		return fmt.Sprintf("part-%s-%020d-%04d.ndjson", enginetest.Node, bIDBig, i)
	}, bBigFiles)
	streams := pageAll("/ui/streams", streamRE)
	wantEach("streams", streams, func(i int) string {
		if i == 0 {
			return "big"
		}
		return streamName(i - 1)
	}, bStreams+1)
	wantEach("checkpoints", pageAll("/ui/checkpoints", ckptRowRE), func(i int) string { return fmt.Sprint(bCheckpoints - i) }, bCheckpoints)
	wantEach("checkpoint files", pageAll(fmt.Sprintf("/ui/checkpoints/%d", bIDStreams), fileRowRE), func(i int) string {
		return fmt.Sprintf("%s/dt=2026-11-29/hour=09/part-%s-%020d-%04d.ndjson", streamName(i), enginetest.Node, bIDStreams, i)
	}, bStreams)
	if n := cr.lists.Load(); n != 0 {
		t.Errorf("the destination was listed whole %d times", n)
	}
	// The overview's streams are the newest checkpoints' (big's, from the
	// newest, first), at most topStreams of them, read from the store.
	overviewStreams := regexp.MustCompile(`<td><a class="strong" href="/ui/files/([^"/]+)/">`)
	pages := cr.pages.Load()
	body := get("/ui/")
	if cr.pages.Load() != pages {
		t.Error("the overview listed the destination though the store knows recent streams")
	}
	rows := overviewStreams.FindAllStringSubmatch(body, -1)
	if len(rows) != topStreams || rows[0][1] != "big" || rows[1][1] != "stream-00000" {
		t.Errorf("overview streams: %d, first %v", len(rows), rows[:min(2, len(rows))])
	}
	expectContains(t, body, "most recently committed", fmt.Sprintf("(%s more active)", fmtNum(bStreams+1-topStreams)))
	// Without recent checkpoints, the first streams by name, from one
	// bounded page of the destination.
	bare := newFakeUI(t, cr, eng, &fakeStore{}, nil)
	rec := serveH(bare, req("GET", "/ui/", ""))
	expectCode(t, rec, http.StatusOK)
	if rows := overviewStreams.FindAllStringSubmatch(rec.Body.String(), -1); len(rows) != topStreams || rows[0][1] != "big" || rows[1][1] != "stream-00000" {
		t.Errorf("overview streams by name: %d, first %v", len(rows), rows[:min(2, len(rows))])
	}
	if rec.Body.Len() > 64<<10 {
		t.Errorf("overview by name: %d bytes", rec.Body.Len())
	}
	expectContains(t, rec.Body.String(), "the first by name")
	for _, bad := range []string{"/ui/checkpoints?before=x", "/ui/checkpoints/1?from=-1", "/ui/streams?after=_x", "/ui/files/?after=a/b"} {
		expectCode(t, serveH(h, req("GET", bad, "")), http.StatusBadRequest)
	}
}
