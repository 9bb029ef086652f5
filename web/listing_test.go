package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/server"
)

// bigDir makes n files in one partition, their sizes (as listed) falling
// with the name, their times rising, plus a manifest per 1,000 files.
func bigDir(n int) (*memReader, string) {
	const dir = "clicks/dt=2026-11-29/hour=09"
	files := map[string][]byte{}
	base := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	mod := map[string]time.Time{}
	size := map[string]int64{}
	manifests := map[uint64][]layout.ManifestFile{}
	for i := range n {
		ck := uint64(i/1000 + 1)
		p := fmt.Sprintf("%s/part-n1-%020d-%04d.ndjson", dir, ck, i%1000)
		files[p] = []byte("{\"i\":" + strconv.Itoa(i) + "}\n")
		size[p] = int64(n - i)
		mod[p] = base.Add(time.Duration(i) * time.Second)
		manifests[ck] = append(manifests[ck], layout.ManifestFile{Path: p, Stream: "clicks", Bytes: int64(n - i), Records: int64(i%7 + 1)})
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
		files[layout.ManifestName("n1", ck)] = []byte(b.String())
	}
	m := newMemReader(files, base)
	for i := range m.entries {
		if t, ok := mod[m.entries[i].Path]; ok {
			m.entries[i].Modified, m.entries[i].Bytes = t, size[m.entries[i].Path]
		}
	}
	return m, dir
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
	for _, tc := range []struct {
		name  string
		files committer.Reader
	}{
		{"pager", files},
		{"list only", listOnly{files}}, // a Reader without ListPage
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeUI(t, tc.files, eng, nil, func(c *Config) { c.PageSize = 100 })
			get := func(target string) string {
				t.Helper()
				rec := serveH(h, req("GET", strings.ReplaceAll(target, "&amp;", "&"), ""))
				expectCode(t, rec, http.StatusOK)
				return rec.Body.String()
			}
			name := func(i int) string { return fmt.Sprintf("part-n1-%020d-%04d.ndjson", i/1000+1, i%1000) }

			body := get("/ui/files/" + dir + "/")
			rows := rowNames(body)
			if len(rows) != 100 || rows[0] != name(0) || rows[99] != name(99) {
				t.Fatalf("page 1: %d rows, %v ... %v", len(rows), rows[:1], rows[len(rows)-1:])
			}
			expectContains(t, body, "100 rows on this page; more follow", `href="/ui/files/`+dir+`/?after=`+name(99)+`"`, `rel="next"`)
			// Following "Next" visits every file once, in order.
			var all []string
			for next, pages := "/ui/files/"+dir+"/", 0; next != ""; pages++ {
				if pages > 5 {
					t.Fatal("paging does not end")
				}
				body := get(next)
				all = append(all, rowNames(body)...)
				next = nextLink(body)
			}
			if len(all) != 250 {
				t.Fatalf("%d rows paged, want 250", len(all))
			}
			for i, n := range all {
				if n != name(i) {
					t.Fatalf("row %d is %s, want %s", i, n, name(i))
				}
			}
			// The filter lists the names that start with it, paged too.
			body = get("/ui/files/" + dir + "/?q=" + name(120)[:len(name(120))-8])
			if rows = rowNames(body); len(rows) != 10 || rows[0] != name(120) || rows[9] != name(129) {
				t.Fatalf("filter: %d rows from %v", len(rows), rows)
			}
			expectContains(t, get("/ui/files/"+dir+"/?q=nothing-like-it"), "No name starts with")
			// Records come from the manifests.
			if body := get("/ui/files/" + dir + "/"); !strings.Contains(body, `<td class="num">1</td>`) || !strings.Contains(body, `<td class="num">7</td>`) {
				t.Error("records missing from the rows")
			}
			// The stream's folder shows the partition as one folder.
			body = get("/ui/files/clicks/")
			if rows := rowNames(body); len(rows) != 1 || rows[0] != "dt=2026-11-29" {
				t.Fatalf("stream folder rows %v", rows)
			}
			expectCode(t, serveH(h, req("GET", "/ui/files/"+dir+"/?after=a%00b", "")), http.StatusBadRequest)
		})
	}
}

// listOnly hides a Reader's ListPage.
type listOnly struct{ r committer.Reader }

func (l listOnly) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	return l.r.List(ctx, prefix)
}

func (l listOnly) Open(ctx context.Context, name string) (io.ReadSeekCloser, committer.Entry, error) {
	return l.r.Open(ctx, name)
}

var nextRE = regexp.MustCompile(`<a class="btn btn-ghost" href="([^"]+)" rel="next">`)

// nextLink returns a page's "next" link, "" without one.
func nextLink(body string) string {
	m := nextRE.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestFolderIsLive: a folder page lists the destination as it is, so a
// file committed a moment ago (by this node or another) shows at once.
func TestFolderIsLive(t *testing.T) {
	files, dir := bigDir(3)
	h := newFakeUI(t, files, nil, nil, nil)
	newName := dir + "/part-n2-00000000000000000002-0000.ndjson"
	if body := serveH(h, req("GET", "/ui/files/"+dir+"/", "")).Body.String(); strings.Contains(body, "00000000000000000002-0000") {
		t.Fatal("listed before it exists")
	}
	files.data[newName] = []byte("{\"new\":true}\n")
	files.entries = newMemReader(files.data, time.Now()).entries
	if body := serveH(h, req("GET", "/ui/files/"+dir+"/", "")).Body.String(); !strings.Contains(body, "00000000000000000002-0000") {
		t.Fatal("a new file is not listed")
	}
	expectCode(t, serveH(h, req("GET", "/ui/files/"+newName, "")), http.StatusOK)
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
	var cs []catalog.Checkpoint
	for i := 100; i >= 1; i-- {
		state := catalog.Committed
		if i == 50 {
			state = catalog.Aborted
		}
		cs = append(cs, catalog.Checkpoint{ID: uint64(i), State: state, DurationMS: int64(i), Bytes: int64(i) << 10})
	}
	c := barChart("Duration", "ms", false, cs, func(c *catalog.Checkpoint) float64 { return float64(c.DurationMS) }, func(v float64) string { return fmtMS(int64(v)) })
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

// BenchmarkFolder100k serves pages of a folder of 100,000 files: the first,
// one deep in (by cursor), a filtered one, and the overview.
func BenchmarkFolder100k(b *testing.B) {
	files, dir := bigDir(100_000)
	eng := &fakeEngine{status: server.Status{Ready: true, OpenID: 101, LastDone: 100}}
	h := newFakeUI(b, files, eng, nil, nil)
	for _, q := range []string{"", "?after=part-n1-00000000000000000050-0499.ndjson", "?q=part-n1-00000000000000000099-09"} {
		b.Run("q="+strings.TrimPrefix(q, "?"), func(b *testing.B) {
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
}

// countingReader counts the whole listings (List) and the pages
// (ListPage) taken of the destination.
type countingReader struct {
	committer.Reader
	lists, pages atomic.Int64
}

func (c *countingReader) List(ctx context.Context, prefix string) ([]committer.Entry, error) {
	c.lists.Add(1)
	return c.Reader.List(ctx, prefix)
}

func (c *countingReader) ListPage(ctx context.Context, prefix, after string, limit int) ([]committer.Entry, error) {
	c.pages.Add(1)
	return c.Reader.(committer.Pager).ListPage(ctx, prefix, after, limit)
}

// TestStreamsCapped: the streams page counts at most streamCountCap files
// of a stream and says so, and pages by name.
func TestStreamsCapped(t *testing.T) {
	files, _ := bigDir(streamCountCap + 100)
	for i := range 3 {
		p := fmt.Sprintf("s%d/dt=2026-11-29/hour=09/part-n1-%020d-0000.ndjson", i, 1)
		files.data[p] = []byte("{}\n")
	}
	files.entries = newMemReader(files.data, time.Now()).entries
	h := newFakeUI(t, files, nil, nil, nil)
	body := serveH(h, req("GET", "/ui/streams", "")).Body.String()
	if rows := streamRows.FindAllStringSubmatch(body, -1); len(rows) != 4 || rows[0][1] != "clicks" || rows[3][1] != "s2" {
		t.Fatalf("streams %v", rows)
	}
	expectContains(t, body, `<td class="num">1,000+</td>`, `<td class="num">1</td>`)
	body = serveH(h, req("GET", "/ui/streams?after=s0", "")).Body.String()
	if rows := streamRows.FindAllStringSubmatch(body, -1); len(rows) != 2 || rows[0][1] != "s1" {
		t.Fatalf("streams after s0: %v", rows)
	}
}

var streamRows = regexp.MustCompile(`<tr data-name="([^"]+)">`)

// TestNodeLeasesHidden: node leases (_nodes/) are not data: no folder page
// lists them and no page shows one.
func TestNodeLeasesHidden(t *testing.T) {
	files, _ := bigDir(3)
	files.data["_nodes/n1.json"] = []byte(`{"node":"n1"}`)
	files.entries = newMemReader(files.data, time.Now()).entries
	h := newFakeUI(t, files, nil, nil, nil)
	rec := serveH(h, req("GET", "/ui/files/", ""))
	expectCode(t, rec, http.StatusOK)
	if rows := rowNames(rec.Body.String()); len(rows) != 2 || rows[0] != "_manifests" || rows[1] != "clicks" {
		t.Fatalf("root rows %v", rows)
	}
	expectCode(t, serveH(h, req("GET", "/ui/files/_nodes/", "")), http.StatusNotFound)
	expectCode(t, serveH(h, req("GET", "/ui/files/_nodes/n1.json", "")), http.StatusNotFound)
}
