package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/eosink/eosink/internal/testing/testbrowser"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// browser is the shared test browser (testbrowser.Browser) with axe-core
// for a11y.
type browser struct {
	*testbrowser.Browser
	axe string // axe-core's source, for a11y
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	// A bound on the whole walk, not a timing check: the accessibility
	// walk loads 40 pages with axe on a shared 2-core machine.
	return &browser{Browser: testbrowser.New(t, testbrowser.Chromium(t), base, testbrowser.Session{Budget: 8 * time.Minute})}
}

// dark switches prefers-color-scheme to dark, or back.
func (b *browser) dark(on bool) {
	b.T.Helper()
	var f []*emulation.MediaFeature
	if on {
		f = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}
	} else {
		f = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}
	}
	if _, err := chromedp.Call(b.Ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: f}); err != nil {
		b.T.Fatal(err)
	}
}

// a11y runs axe-core on the current page and fails the test for each
// serious or critical violation, printed as rule, impact, selector and
// summary; lesser ones are logged.
func (b *browser) a11y(name string) {
	b.T.Helper()
	vs, err := testbrowser.AxeCheck(b.Ctx, b.axe)
	if err != nil {
		b.T.Fatalf("%s: %v", name, err)
	}
	for _, v := range vs {
		if v.Blocking() {
			b.T.Errorf("%s (%s): axe-core: %s", name, b.Location(), v)
		} else {
			b.T.Logf("%s (%s): axe-core, not failing the test: %s", name, b.Location(), v)
		}
	}
}

// tabTo presses Tab until the focused element matches sel, at most max
// times, and tells whether it got there.
func (b *browser) tabTo(sel string, max int) bool {
	b.T.Helper()
	for range max {
		b.Do("press Tab", chromedp.KeyEvent(kb.Tab))
		if testbrowser.Eval[bool](b.Browser, `document.activeElement !== null && document.activeElement.matches(`+jsString(sel)+`)`) {
			return true
		}
	}
	return false
}

// jsString quotes s as a JS string literal (JSON's is one).
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// TestAccessibility runs axe-core on every page of the UI, in light and
// in dark mode, and fails on serious or critical violations: colour
// contrast, names, roles, keyboard access. It takes a screenshot of each.
// A second UI over a fake engine and store shows what a healthy engine
// does not: banners, aborted and pending checkpoints.
func TestAccessibility(t *testing.T) {
	axe := testbrowser.Axe(t)
	r := newRig(t, rigOpts{auth: true})
	file := r.seed()
	epoch := r.initProducer("billing.worker:7")
	for i := range 4 {
		r.write("clicks", strings.Repeat(fmt.Sprintf("{\"user\":\"u%d\",\"n\":%d}\n", i, i), 20*(i+1)))
		r.write("orders", fmt.Sprintf("{\"order\":%d}\n", i),
			"Producer-Id", "billing.worker:7", "Producer-Epoch", fmt.Sprint(epoch), "Producer-Seq", fmt.Sprint(i))
		r.checkpoint()
	}
	if rec := r.apiDo("POST", "/v1/producers/billing.worker:7/init", ""); rec.Code != http.StatusOK {
		t.Fatalf("init: %d", rec.Code)
	}
	if rec := r.apiDo("POST", "/v1/streams/orders/records", "{}\n", "Content-Type", "application/x-ndjson",
		"Producer-Id", "billing.worker:7", "Producer-Epoch", fmt.Sprint(epoch), "Producer-Seq", "4"); rec.Code != http.StatusConflict {
		t.Fatalf("fenced write: %d", rec.Code)
	}
	r.write("views", "{\"page\":\"/docs\"}\n") // an open checkpoint with data
	last := r.eng.Status().LastDone
	srv := httptest.NewServer(r.h)
	t.Cleanup(srv.Close)

	// A stopped engine with a stuck commit, and one still recovering, with
	// checkpoints in every state.
	now := time.Now()
	store := &fakeStore{cs: []recovery.Checkpoint{
		{ID: 1, State: recovery.Committed, FileCount: 1, Records: 10, Bytes: 900, StartedAt: now.Add(-time.Minute), CommittedAt: now.Add(-time.Minute), DurationMS: 12},
		{ID: 2, State: recovery.Aborted, Records: 3, Bytes: 300, StartedAt: now.Add(-50 * time.Second), DurationMS: 40, Error: "sync staging file: input/output error"},
		{ID: 3, State: recovery.Committed, FileCount: 2, Records: 20, Bytes: 2000, StartedAt: now.Add(-40 * time.Second), CommittedAt: now.Add(-40 * time.Second), DurationMS: 9},
		{ID: 4, State: recovery.Prepared, FileCount: 1, Records: 5, Bytes: 500, StartedAt: now.Add(-30 * time.Second), PreparedAt: now.Add(-30 * time.Second)},
	}}
	files := newMemReader(map[string][]byte{"clicks/dt=2026-01-01/hour=00/part-n1-00000000000000000001-0000.ndjson": []byte("{}\n")}, now)
	stopped := httptest.NewServer(newFakeUI(t, files, &fakeEngine{status: server.Status{Ready: true, OpenID: 5, LastDone: 3,
		Failed: "commit checkpoint 4: disk full", Stuck: "rename part: no space left on device"}}, store, nil))
	t.Cleanup(stopped.Close)
	recovering := httptest.NewServer(newFakeUI(t, files, &fakeEngine{status: server.Status{Recovering: "committing checkpoint 4 again", OpenID: 5, LastDone: 3}}, store, nil))
	t.Cleanup(recovering.Close)
	// Pages with "next" and "first" links: a folder of 25 files at 10 a
	// page, 150 checkpoints, a checkpoint of 250 files.
	big, bigPath := bigDir(25)
	many := &fakeStore{}
	for id := uint64(1); id <= 150; id++ {
		c := recovery.Checkpoint{ID: id, State: recovery.Committed, FileCount: 1, Records: int64(id), Bytes: int64(id) << 8,
			StartedAt: now.Add(time.Duration(id-150) * time.Second), CommittedAt: now.Add(time.Duration(id-150) * time.Second), DurationMS: int64(id%7 + 1)}
		if id == 150 {
			c.FileCount = 250
			for i := range 250 {
				c.Files = append(c.Files, committer.File{Stream: "clicks", Final: fmt.Sprintf("clicks/dt=2026-11-29/hour=09/part-n1-%020d-%04d.ndjson", id, i), Bytes: 8, Records: 1, CRC32C: "00000000"})
			}
		}
		many.cs = append(many.cs, c)
	}
	paged := httptest.NewServer(newFakeUI(t, big, &fakeEngine{status: server.Status{Ready: true, OpenID: 151, LastDone: 150}}, many,
		func(c *Config) { c.PageSize = 10 }))
	t.Cleanup(paged.Close)

	b := newBrowser(t, srv.URL)
	b.axe = axe
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"files", "/ui/files/"},
		{"stream", "/ui/files/clicks/"},
		{"partition", "/ui/files/" + path.Dir(path.Dir(file)) + "/"},
		{"hour", "/ui/files/" + path.Dir(file) + "/"},
		{"file", "/ui/files/" + file},
		{"manifest", fmt.Sprintf("/ui/files/_manifests/%s/%020d.json", enginetest.Node, 1)},
		{"checkpoints", "/ui/checkpoints"},
		{"checkpoints-ran", fmt.Sprintf("/ui/checkpoints?ran=%d", last)},
		{"checkpoint", fmt.Sprintf("/ui/checkpoints/%d", last)},
		{"checkpoint-open", fmt.Sprintf("/ui/checkpoints/%d", last+1)},
		{"producers", "/ui/producers"},
		{"streams", "/ui/streams"},
	}
	for _, scheme := range []string{"light", "dark"} {
		b.dark(scheme == "dark")
		b.Base = srv.URL
		if _, err := chromedp.Call(b.Ctx, network.ClearBrowserCookies, cdp.Empty{}); err != nil {
			t.Fatalf("sign out: %v", err)
		}
		b.Open("/ui/login")
		b.a11y("login-" + scheme)
		b.Shot("login-" + scheme)
		b.Do("sign in with a wrong token", chromedp.SendKeys(chromedp.ID("token"), "nope"))
		if _, err := chromedp.RunResponse(b.Ctx, chromedp.Click(chromedp.CSS("#sign-in"))); err != nil {
			t.Fatal(err)
		}
		b.a11y("login-error-" + scheme)
		b.Open("/ui/login")
		b.Do("sign in", chromedp.SendKeys(chromedp.ID("token"), enginetest.TokAdmin))
		b.Click("#sign-in")
		for _, p := range pages {
			b.Open(p.path)
			b.a11y(p.name + "-" + scheme)
			b.Shot(p.name + "-" + scheme)
		}
		// The keyboard reaches the preview box (to scroll it) and the
		// charts' bars, and shows where it is.
		b.Open("/ui/files/" + file)
		if !b.tabTo("#preview", 40) {
			t.Errorf("file page (%s): Tab never reaches the preview", scheme)
		}
		b.Open("/ui/checkpoints")
		if !b.tabTo("svg a.bar-link", 40) {
			t.Errorf("checkpoints page (%s): Tab never reaches a chart bar", scheme)
		}
		b.Shot("chart-focus-" + scheme)
		b.Visit("/ui/nowhere", http.StatusNotFound)
		b.a11y("not-found-" + scheme)
		b.Shot("not-found-" + scheme)

		b.Base = stopped.URL
		for _, p := range []struct{ name, path string }{
			{"stopped-overview", "/ui/"}, {"stopped-checkpoints", "/ui/checkpoints"}, {"aborted-checkpoint", "/ui/checkpoints/2"},
		} {
			b.Open(p.path)
			b.a11y(p.name + "-" + scheme)
			b.Shot(p.name + "-" + scheme)
		}
		b.Base = recovering.URL
		b.Open("/ui/")
		b.a11y("recovering-overview-" + scheme)
		b.Shot("recovering-overview-" + scheme)

		b.Base = paged.URL
		for _, p := range []struct{ name, path string }{
			{"paged-folder", "/ui/files/" + bigPath + "/"},
			{"paged-folder-2", "/ui/files/" + bigPath + "/?after=part-n1-00000000000000000001-0009.ndjson"},
			{"paged-checkpoints-2", "/ui/checkpoints?before=51"},
			{"paged-checkpoint-2", "/ui/checkpoints/150?from=200"},
		} {
			b.Open(p.path)
			b.a11y(p.name + "-" + scheme)
			b.Shot(p.name + "-" + scheme)
		}
	}
	b.dark(false)
}

// TestBrowser walks the UI in real Chromium as an admin and then as a
// read-only user: sign in, overview, stream, partition, file, preview,
// download, "Checkpoint now", and forged POSTs.
func TestBrowser(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	file := r.seed()
	// More producers, a fenced write and a few more checkpoints, so the
	// tables and charts have something to show.
	r.initProducer("billing.worker:7")
	epoch := r.initProducer("billing.worker:7")
	for i := range 12 {
		seq := fmt.Sprint(i)
		r.write("clicks", strings.Repeat(fmt.Sprintf("{\"user\":\"u%d\",\"n\":%d}\n", i, i), 40*(i%5+1)))
		r.write("orders", fmt.Sprintf("{\"order\":%d,\"total\":%d.5}\n", i, i*10),
			"Producer-Id", "billing.worker:7", "Producer-Epoch", fmt.Sprint(epoch), "Producer-Seq", seq)
		if i == 3 {
			rec := r.apiDo("POST", "/v1/streams/orders/records", "{}\n", "Content-Type", "application/x-ndjson",
				"Producer-Id", "billing.worker:7", "Producer-Epoch", fmt.Sprint(epoch-1), "Producer-Seq", "9")
			if rec.Code != http.StatusConflict {
				t.Fatalf("fenced write: %d", rec.Code)
			}
		}
		if i < 11 {
			r.checkpoint()
		}
	}
	// Hostile names and content, as a destination could hold them.
	const hostile = `clicks/dt=x/"><img src=x onerror=window.__xss=1>.ndjson`
	r.Broken("plants a file with a hostile name")
	if err := afero.WriteFile(r.base, path.Join(enginetest.Dest, hostile), []byte("<script>window.__xss=2</script>\n{\"h\":\"<img src=x onerror=window.__xss=3>\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.h)
	t.Cleanup(srv.Close)
	b := newBrowser(t, srv.URL)

	// Without a cookie, the UI asks for a token.
	b.Open("/")
	if loc := b.Location(); loc != "/ui/login?next=%2Fui%2F" {
		t.Fatalf("GET / led to %s, want the login form", loc)
	}
	b.Shot("login")
	b.Do("sign in", chromedp.SendKeys(chromedp.ID("token"), enginetest.TokAdmin))
	b.Click("#sign-in")
	if loc := b.Location(); loc != "/ui/" {
		t.Fatalf("signed in to %s, want /ui/", loc)
	}
	if cookies := testbrowser.Eval[string](b.Browser, `document.cookie`); strings.Contains(cookies, enginetest.TokAdmin) {
		t.Fatal("the token cookie is readable from script: want HttpOnly")
	}

	// Overview → stream → partition (two folder levels) → file.
	if txt := b.Text("#stream-table"); !strings.Contains(txt, "clicks") || !strings.Contains(txt, "views") {
		t.Fatalf("overview streams: %q", txt)
	}
	b.Shot("overview")
	b.Click(`#stream-table a[href="/ui/files/clicks/"]`)
	b.Shot("stream")
	dir := path.Dir(file)
	day := path.Dir(dir)
	b.Click(`#rows a[href="/ui/files/` + day + `/"]`)
	b.Click(`#rows a[href="/ui/files/` + dir + `/"]`)
	if loc := b.Location(); loc != "/ui/files/"+dir+"/" {
		t.Fatalf("at %s, want the partition", loc)
	}
	if crumbs := b.Text(".crumbs"); !strings.Contains(crumbs, "clicks") || !strings.Contains(crumbs, path.Base(dir)) {
		t.Errorf("breadcrumbs %q", crumbs)
	}
	b.Shot("partition")
	// The filter box narrows the page as one types.
	b.Do("filter", chromedp.SendKeys(chromedp.ID("filter"), "0001-0000"))
	if shown := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#rows tbody tr[data-name]:not([hidden])').length`); shown != 1 {
		t.Errorf("%d rows shown after filtering, want 1", shown)
	}
	b.Do("clear filter", chromedp.SendKeys(chromedp.ID("filter"), kb.Escape))
	if shown := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#rows tbody tr[data-name]:not([hidden])').length`); shown < 7 {
		t.Errorf("%d rows shown after Escape", shown)
	}
	b.Click(`#rows a[href="/ui/files/` + file + `"]`)
	preview := b.Text("#preview")
	for _, want := range []string{`"user": "ada"`, `"n": 1`, `"ok": true`, `"tags": [`} {
		if !strings.Contains(preview, want) {
			t.Errorf("preview lacks %q:\n%s", want, preview)
		}
	}
	if m := b.Text("#manifest"); !strings.Contains(m, "app-1") || !strings.Contains(m, "CRC-32C") {
		t.Errorf("manifest entry: %q", m)
	}
	b.Shot("file")

	// Download: the link serves the committed bytes.
	want, err := afero.ReadFile(r.base, path.Join(enginetest.Dest, file))
	if err != nil {
		t.Fatal(err)
	}
	got := testbrowser.Eval[[]byte](b.Browser, `fetch(document.getElementById('download').href).then(function (r) {
		if (!r.ok) throw new Error('download: ' + r.status);
		return r.arrayBuffer();
	}).then(function (buf) { return Array.from(new Uint8Array(buf)); })`)
	if gotBytes := jsonBytes(t, got); string(gotBytes) != string(want) {
		t.Fatalf("downloaded %q, want %q", gotBytes, want)
	}

	// "Checkpoint now" commits what came in since and lists it.
	r.write("views", "{\"page\":\"/pricing\"}\n{\"page\":\"/docs\"}\n")
	st := r.eng.Status()
	next := st.OpenID
	b.Click("#checkpoint-now")
	if loc := b.Location(); loc != fmt.Sprintf("/ui/checkpoints?ran=%d", next) {
		t.Fatalf("after checkpoint at %s", loc)
	}
	if ran := b.Text("#ran"); !strings.Contains(ran, fmt.Sprintf("#%d committed", next)) || !strings.Contains(ran, fmt.Sprintf("%d records", st.OpenRecords)) {
		t.Errorf("notice %q", ran)
	}
	if row := b.Text(fmt.Sprintf(`#checkpoint-table tr[data-id="%d"]`, next)); !strings.Contains(row, "committed") {
		t.Errorf("new checkpoint row %q", row)
	}
	if bars := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('svg rect.bar').length`); bars < 2*int(next) {
		t.Errorf("%d bars in the charts, want %d", bars, 2*next)
	}
	b.Shot("checkpoints")
	b.Click(fmt.Sprintf(`#checkpoint-table a[href="/ui/checkpoints/%d"]`, next))
	if files := b.Text("#checkpoint-files"); !strings.Contains(files, "views/") {
		t.Errorf("checkpoint files %q", files)
	}
	b.Shot("checkpoint")
	b.Click(`.nav a[href="/ui/producers"]`)
	if p := b.Text("#producer-table"); !strings.Contains(p, "app-1") || !strings.Contains(p, "billing.worker:7") {
		t.Errorf("producers %q", p)
	}
	b.Shot("producers")
	b.dark(true)
	b.Open("/ui/checkpoints")
	b.Shot("checkpoints-dark")
	b.Open("/ui/files/" + file)
	b.Shot("file-dark")
	b.dark(false)

	// A POST without the form token is refused, even from our own page.
	if status := testbrowser.Eval[int](b.Browser, forgedPost("")); status != http.StatusForbidden {
		t.Errorf("forged POST as admin: %d, want 403", status)
	}

	// Read-only: no button, and no checkpoint however the POST is made.
	b.Click(`form[action="/ui/logout"] button`)
	if loc := b.Location(); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("signed out to %s", loc)
	}
	b.Do("sign in as reader", chromedp.SendKeys(chromedp.ID("token"), enginetest.TokRead))
	b.Click("#sign-in")
	if n := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#checkpoint-now, form[action="/ui/checkpoint"]').length`); n != 0 {
		t.Fatal("a read-only session sees the checkpoint button")
	}
	if role := b.Text(".role"); role != "read" {
		t.Errorf("role %q", role)
	}
	b.Shot("overview-read-only")
	open := r.eng.Status().OpenID
	if status := testbrowser.Eval[int](b.Browser, forgedPost("")); status != http.StatusForbidden {
		t.Errorf("forged POST as reader: %d, want 403", status)
	}
	// Even with the session's own form token (from the sign-out form).
	if status := testbrowser.Eval[int](b.Browser, forgedPost(`document.querySelector('input[name="csrf"]').value`)); status != http.StatusForbidden {
		t.Errorf("POST with a reader's form token: %d, want 403", status)
	}
	if got := r.eng.Status().OpenID; got != open {
		t.Errorf("a read-only session ran a checkpoint: open %d, was %d", got, open)
	}
	b.Open("/ui/files/" + file)
	b.Shot("file-read-only")

	// Hostile names show as text and run nothing (and shot checks that
	// the CSP had nothing to block).
	b.Open("/ui/files/clicks/dt=x/")
	if rows := b.Text("#rows"); !strings.Contains(rows, `"><img src=x onerror=window.__xss=1>.ndjson`) {
		t.Errorf("hostile name not shown as text: %q", rows)
	}
	b.Shot("hostile-folder")
	b.Click(`#rows tbody a`)
	if p := b.Text("#preview"); !strings.Contains(p, "<script>window.__xss=2</script>") || !strings.Contains(p, "<img src=x onerror=window.__xss=3>") {
		t.Errorf("hostile content not shown as text: %q", p)
	}
	if xss := testbrowser.Eval[string](b.Browser, `typeof window.__xss`); xss != "undefined" {
		t.Errorf("hostile script ran: window.__xss is %s", xss)
	}
	b.Shot("hostile-file")
}

// forgedPost is script that posts the checkpoint form from the page,
// with csrf (a JS expression) as the form token or none, and answers the
// status.
func forgedPost(csrf string) string {
	body := `'x=1'`
	if csrf != "" {
		body = `'csrf=' + encodeURIComponent(` + csrf + `)`
	}
	return `fetch('/ui/checkpoint', {method: 'POST', redirect: 'manual', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ` + body + `}).then(function (r) { return r.status; })`
}

// jsonBytes turns the numbers of a JS byte array, which Evaluate hands
// over as JSON, into bytes.
func jsonBytes(t *testing.T, raw []byte) []byte {
	t.Helper()
	var nums []int
	if err := json.Unmarshal(raw, &nums); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(nums))
	for i, n := range nums {
		if n < 0 || n > 255 {
			t.Fatal(errors.New("not a byte"))
		}
		out[i] = byte(n)
	}
	return out
}
