package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// bigDir makes n files in one partition, their sizes (as listed) falling
// with the name, their times rising, plus a manifest per 1,000 files.
func bigDir(n int) (*memReader, string) {
	const dir = "clicks/dt=2026-11-29/hour=09"
	files := map[string][]byte{}
	base := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	mod := map[string]time.Time{}
	size := map[string]int64{}
	manifests := map[uint64][]recovery.ManifestFile{}
	for i := range n {
		ck := uint64(i/1000 + 1)
		p := fmt.Sprintf("%s/part-n1-%020d-%04d.ndjson", dir, ck, i%1000)
		files[p] = []byte("{\"i\":" + strconv.Itoa(i) + "}\n")
		size[p] = int64(n - i)
		mod[p] = base.Add(time.Duration(i) * time.Second)
		manifests[ck] = append(manifests[ck], recovery.ManifestFile{Path: p, Stream: "clicks", Bytes: int64(n - i), Records: int64(i%7 + 1)})
	}
	for ck, fs := range manifests {
		var b strings.Builder
		fmt.Fprintf(&b, `{"checkpoint":%d,"node":"n1","committed_at":"2026-11-29T09:00:00Z","files":[`, ck)
		for i, f := range fs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"path":%q,"stream":"clicks","bytes":%d,"records":%d,"crc32c":"00000000","producers":{}}`, f.Path, f.Bytes, f.Records)
		}
		b.WriteString("]}")
		files[recovery.ManifestPath("n1", ck)] = []byte(b.String())
	}
	m := newMemReader(files, base)
	for i := range m.entries {
		if t, ok := mod[m.entries[i].Path]; ok {
			m.entries[i].Modified, m.entries[i].Bytes = t, size[m.entries[i].Path]
		}
	}
	return m, dir
}

// partName is the data file name of DESIGN.md; parsePart must agree.
var partName = regexp.MustCompile(`^part-(.+)-([0-9]{20})-([0-9]{4,})\.[A-Za-z0-9.]+$`)

func FuzzParsePart(f *testing.F) {
	for _, s := range []string{
		"clicks/dt=1/part-n1-00000000000000000001-0000.ndjson",
		"part-n-1.x-00000000000000000007-0012.txt.gz",
		"part-a-00000000000000000001-0001.b-00000000000000000002-0003.ndjson",
		"part--00000000000000000001-0000.ndjson",
		"part-n-00000000000000000001-000.ndjson",
		"part-n-00000000000000000001-0000.",
		"part-n-00000000000000000001-0000.nd json",
		"part-n-99999999999999999999-0000.x",
		"x/part-n.1-00000000000000000001-00001.ndjson.zst",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		node, id, ok := parsePart(p)
		m := partName.FindStringSubmatch(path.Base(p))
		if strings.HasSuffix(p, "/") {
			m = nil // path.Base drops a trailing slash; a listing never has one
		}
		var want uint64
		var err error
		if m != nil {
			want, err = strconv.ParseUint(m[2], 10, 64)
		}
		wantOK := m != nil && err == nil
		if ok != wantOK || ok && (node != m[1] || id != want) {
			t.Fatalf("parsePart(%q) = %q %d %v, regexp %q", p, node, id, ok, m)
		}
	})
}

var rowName = regexp.MustCompile(`<tr data-name="([^"]+)"`)

func rowNames(body string) []string {
	var out []string
	for _, m := range rowName.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestFolderPagination(t *testing.T) {
	files, dir := bigDir(250)
	eng := &fakeEngine{status: server.Status{Ready: true, OpenID: 2, LastDone: 1}}
	h := newFakeUI(t, files, eng, nil, nil)
	get := func(q string) string {
		t.Helper()
		rec := serveH(h, req("GET", "/ui/files/"+dir+"/"+q, ""))
		expectCode(t, rec, http.StatusOK)
		return rec.Body.String()
	}
	name := func(i int) string { return fmt.Sprintf("part-n1-%020d-%04d.ndjson", i/1000+1, i%1000) }

	body := get("")
	rows := rowNames(body)
	if len(rows) != 100 || rows[0] != name(0) || rows[99] != name(99) {
		t.Fatalf("page 1: %d rows, %v ... %v", len(rows), rows[:1], rows[len(rows)-1:])
	}
	expectContains(t, body, "1–100 of 250", `href="/ui/files/`+dir+`/?page=2"`, `rel="next"`)

	rows = rowNames(get("?page=3"))
	if len(rows) != 50 || rows[0] != name(200) {
		t.Fatalf("page 3: %d rows from %v", len(rows), rows[:1])
	}
	// Past the end: the last page.
	if rows = rowNames(get("?page=99")); len(rows) != 50 {
		t.Fatalf("page 99: %d rows", len(rows))
	}
	// Largest first: the sizes fall with the name.
	body = get("?sort=size&order=desc")
	if rows = rowNames(body); rows[0] != name(0) || rows[1] != name(1) {
		t.Fatalf("by size, largest first: %v", rows[:2])
	}
	expectContains(t, body, `href="/ui/files/`+dir+`/?order=desc&amp;page=2&amp;sort=size"`)
	if rows = rowNames(get("?sort=size")); rows[0] != name(249) {
		t.Fatalf("by size, smallest first: %v", rows[:1])
	}
	if rows = rowNames(get("?sort=time&order=desc")); rows[0] != name(249) {
		t.Fatalf("by time, newest first: %v", rows[:1])
	}
	if rows = rowNames(get("?order=desc")); rows[0] != name(249) {
		t.Fatalf("by name, descending: %v", rows[:1])
	}
	// The filter applies before paging, to every page: 43 of the names
	// 0000..0249 hold a 9.
	small := newFakeUI(t, files, eng, nil, func(c *Config) { c.PageSize = 20 })
	filtered := func(q string) string {
		t.Helper()
		rec := serveH(small, req("GET", "/ui/files/"+dir+"/"+q, ""))
		expectCode(t, rec, http.StatusOK)
		return rec.Body.String()
	}
	body = filtered("?q=9")
	if rows = rowNames(body); len(rows) != 20 || rows[0] != name(9) || rows[1] != name(19) {
		t.Fatalf("filter: %d rows from %v", len(rows), rows[:2])
	}
	expectContains(t, body, "1–20 of 43 matching", `value="9"`, `href="/ui/files/`+dir+`/?page=3&amp;q=9"`)
	if rows = rowNames(filtered("?q=9&page=3")); len(rows) != 3 || rows[2] != name(249) {
		t.Fatalf("filter page 3: %d rows", len(rows))
	}
	expectContains(t, get("?q=nothing-like-it"), "No name matches")
	// Records come from the manifests.
	if body := get(""); !strings.Contains(body, `<td class="num">1</td>`) || !strings.Contains(body, `<td class="num">7</td>`) {
		t.Error("records missing from the rows")
	}
	// The stream's folder rolls the partition up.
	expectContains(t, string(serveH(h, req("GET", "/ui/files/clicks/", "")).Body.Bytes()), "250 files")
}

func TestListingRefresh(t *testing.T) {
	files, dir := bigDir(3)
	eng := &fakeEngine{status: server.Status{Ready: true, OpenID: 2, LastDone: 1}}
	store := &fakeStore{}
	h := newFakeUI(t, files, eng, store, nil)
	newName := dir + "/part-n1-00000000000000000002-0000.ndjson"
	expectCode(t, serveH(h, req("GET", "/ui/files/"+dir+"/", "")), http.StatusOK)
	// A file that appears while the listing is cached is found once a
	// checkpoint ends.
	files.data[newName] = []byte("{\"new\":true}\n")
	files.entries = newMemReader(files.data, time.Now()).entries
	expectCode(t, serveH(h, req("GET", "/ui/files/"+dir+"/", "")), http.StatusOK)
	if body := serveH(h, req("GET", "/ui/files/"+dir+"/", "")).Body.String(); strings.Contains(body, "00000000000000000002-0000") {
		t.Fatal("the cached listing changed without a checkpoint")
	}
	store.cs = append(store.cs, recovery.Checkpoint{ID: 2, State: recovery.Committed, FileCount: 1, CommittedAt: time.Now(),
		Files: []committer.File{{Final: newName, Bytes: int64(len(files.data[newName])), Records: 1}}})
	eng.status.LastDone = 2
	if body := serveH(h, req("GET", "/ui/files/"+dir+"/", "")).Body.String(); !strings.Contains(body, "00000000000000000002-0000") {
		t.Fatal("a new checkpoint did not refresh the listing")
	}
}

func TestPreview(t *testing.T) {
	t.Run("ndjson", func(t *testing.T) {
		p, err := readPreview(t.Context(), strings.NewReader("{\"a\":1,\"b\":[true,null],\"c\":\"x\\\"y\"}\nnot json\r\n\n"), "f.ndjson")
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Lines) != 3 || !p.Lines[0].JSON || p.Lines[1].JSON || p.Lines[1].Text != "not json" || p.More {
			t.Fatalf("lines %+v", p.Lines)
		}
		var got strings.Builder
		for _, s := range p.Lines[0].Segs {
			fmt.Fprintf(&got, "[%s]%s", s.Class, s.Text)
		}
		want := "[p]{[]\n  [k]\"a\"[p]:[] [n]1[p],[]\n  [k]\"b\"[p]:[] [p][[]\n    [l]true[p],[]\n    [l]null[]\n  [p]],[]\n  [k]\"c\"[p]:[] [s]\"x\\\"y\"[]\n[p]}"
		if got.String() != want {
			t.Errorf("highlight\n got %q\nwant %q", got.String(), want)
		}
	})
	t.Run("line limit", func(t *testing.T) {
		p, _ := readPreview(t.Context(), strings.NewReader(strings.Repeat("{\"n\":1}\n", 80)), "f.ndjson")
		if len(p.Lines) != previewLines || !p.More {
			t.Fatalf("%d lines, more %v", len(p.Lines), p.More)
		}
	})
	t.Run("byte limit", func(t *testing.T) {
		long := "{\"s\":\"" + strings.Repeat("y", previewBytes) + "\"}\n"
		p, _ := readPreview(t.Context(), strings.NewReader("{\"a\":1}\n"+long), "f.ndjson")
		if len(p.Lines) != 2 || !p.More || !p.Lines[1].Cut || p.Lines[1].JSON || p.BytesRead != previewBytes {
			t.Fatalf("%d lines, more %v, cut %v, read %d", len(p.Lines), p.More, p.Lines[len(p.Lines)-1].Cut, p.BytesRead)
		}
	})
	t.Run("gzip", func(t *testing.T) {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte("{\"z\":1}\n"))
		_ = zw.Close()
		p, _ := readPreview(t.Context(), &b, "f.ndjson.gz")
		if len(p.Lines) != 1 || !p.Lines[0].JSON {
			t.Fatalf("%+v", p)
		}
	})
	t.Run("binary and zstd", func(t *testing.T) {
		if p, _ := readPreview(t.Context(), strings.NewReader("a\x00b"), "f.txt"); p.Note == "" {
			t.Error("binary shown")
		}
		if p, _ := readPreview(t.Context(), strings.NewReader("zz"), "f.ndjson.zst"); p.Note == "" {
			t.Error("zstd shown")
		}
	})
}

func TestChart(t *testing.T) {
	var cs []recovery.Checkpoint
	for i := 100; i >= 1; i-- {
		state := recovery.Committed
		if i == 50 {
			state = recovery.Aborted
		}
		cs = append(cs, recovery.Checkpoint{ID: uint64(i), State: state, DurationMS: int64(i), Bytes: int64(i) << 10})
	}
	c := barChart("Duration", "ms", false, cs, func(c *recovery.Checkpoint) float64 { return float64(c.DurationMS) }, func(v float64) string { return fmtMS(int64(v)) })
	if len(c.Bars) != 100 || c.Empty {
		t.Fatalf("%d bars", len(c.Bars))
	}
	// Oldest on the left, the tallest (newest) reaching the nice top.
	if c.Bars[0].X >= c.Bars[99].X || c.Bars[99].H <= c.Bars[0].H || c.Bars[49].Class != "bar bar-aborted" {
		t.Errorf("bars %+v ... %+v", c.Bars[0], c.Bars[99])
	}
	if len(c.Ticks) != 6 || c.Ticks[1].Label != "20 ms" || c.Ticks[5].Label != "100 ms" || c.Peak != "100 ms" || c.Last != "100 ms" {
		t.Errorf("ticks %+v peak %s", c.Ticks, c.Peak)
	}
	for _, tc := range []struct {
		peak   float64
		binary bool
		want   float64
	}{
		{1, false, 1}, {9, false, 2}, {100, false, 20}, {101, false, 50}, {4813, true, 1024},
		{3 << 20, true, 1 << 20}, {900 << 20, true, 200 << 20}, {1100, true, 512}, {0.2, false, 1},
	} {
		if got := niceStep(tc.peak, tc.binary); got != tc.want {
			t.Errorf("niceStep(%v, %v) = %v, want %v", tc.peak, tc.binary, got, tc.want)
		}
	}
	for _, b := range c.Bars {
		if b.Y < c.PlotY || b.Y+b.H > c.Bottom+0.05 {
			t.Fatalf("bar %+v outside the plot", b)
		}
	}
	if c := barChart("x", "", false, nil, nil, nil); !c.Empty {
		t.Error("an empty chart with bars")
	}
}

// BenchmarkFolder100k pages through a folder of 100,000 files, sorted by
// size, filtered, and by name: what a request costs once the listing is
// cached (the first request lists the destination).
func BenchmarkFolder100k(b *testing.B) {
	files, dir := bigDir(100_000)
	eng := &fakeEngine{status: server.Status{Ready: true, OpenID: 101, LastDone: 100}}
	h := newFakeUI(b, files, eng, nil, func(c *Config) { c.ListMaxAge = time.Hour })
	for _, q := range []string{"?page=1", "?page=500", "?sort=size&order=desc&page=700", "?sort=time&page=3", "?q=-0999&page=2"} {
		b.Run(strings.TrimPrefix(q, "?"), func(b *testing.B) {
			rec := serveH(h, req("GET", "/ui/files/"+dir+"/"+q, ""))
			if rec.Code != http.StatusOK || len(rowNames(rec.Body.String())) == 0 {
				b.Fatalf("%d, %d rows", rec.Code, len(rowNames(rec.Body.String())))
			}
			for b.Loop() {
				serveH(h, req("GET", "/ui/files/"+dir+"/"+q, ""))
			}
		})
	}
	b.Run("overview", func(b *testing.B) {
		for b.Loop() {
			serveH(h, req("GET", "/ui/", ""))
		}
	})
	b.Run("relist", func(b *testing.B) {
		for b.Loop() {
			eng.status.LastDone++ // every request lists the destination again
			serveH(h, req("GET", "/ui/files/"+dir+"/?page=2", ""))
		}
	})
}

// countingReader counts the listings of the destination.
type countingReader struct {
	committer.Reader
	lists atomic.Int64
}

func (c *countingReader) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	c.lists.Add(1)
	return c.Reader.List(ctx, prefix)
}

// TestListingFollowsCheckpoints: once listed, the destination is not
// listed again for new checkpoints; their files come from the state store.
func TestListingFollowsCheckpoints(t *testing.T) {
	var cr *countingReader
	r := newRig(t, rigOpts{ui: func(c *Config) { cr = &countingReader{Reader: c.Files}; c.Files = cr }})
	file := r.seed()
	dir := path.Dir(file)
	r.page(t, "/ui/files/"+dir+"/")
	lists := func(want int64) {
		t.Helper()
		if got := cr.lists.Load(); got != want {
			t.Fatalf("%d listings, want %d", got, want)
		}
	}
	lists(1)
	r.checkpoint() // empty
	r.checkpoint()
	r.page(t, "/ui/")
	lists(1)

	r.write("clicks", "{\"late\":1}\n{\"late\":2}\n{\"late\":3}\n")
	c := r.checkpoint()
	newFile := c.Files[0].Path
	body := r.page(t, "/ui/files/"+path.Dir(newFile)+"/")
	expectContains(t, body, path.Base(newFile), `<td class="num">3</td>`, fmt.Sprintf(`href="/ui/checkpoints/%d"`, c.ID))
	expectContains(t, r.page(t, "/ui/files/_manifests/n1/"), fmt.Sprintf("%020d.json", c.ID))
	lists(1)

	// A file another node put there shows once the listing is a moment old.
	other := "clicks/dt=2026-01-01/hour=00/part-n2-00000000000000000001-0000.ndjson"
	if err := afero.WriteFile(r.base, path.Join(tDest, other), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectCode(t, r.get("/ui/files/"+other, ""), http.StatusNotFound)
	r.clock.t = time.Now().Add(relistAfter + time.Second)
	expectCode(t, r.get("/ui/files/"+other, ""), http.StatusOK)
	lists(2)

	// A listing older than ListMaxAge is taken again in the background.
	r.clock.t = r.clock.t.Add(DefaultListMaxAge + time.Second)
	r.page(t, "/ui/files/")
	deadline := time.Now().Add(10 * time.Second)
	for cr.lists.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lists(3)
}
