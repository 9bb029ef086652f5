package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/eosink/eosink/internal/testing/testbrowser"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Knobs of the browser test, as in web/browser_test.go.
const (
	envScreenshots = "EOSINK_SCREENSHOTS" // keep the screenshots there; default a temp dir
)

const (
	uiAdminToken = "ui-admin-0f9c2a7d41"
	uiReadToken  = "ui-read-5be81c3e96"
	// uiStep bounds each browser step; uiBudget the whole browser session.
	uiStep   = 10 * time.Second
	uiBudget = time.Minute
)

// TestUIOnBinary walks the web UI of the built binary in real Chromium:
// sign in as admin, overview → stream → partition → hour → file, the
// preview, the download, "Checkpoint now"; then sign in read-only and check
// that there is no button and that a forged POST runs no checkpoint.
func TestUIOnBinary(t *testing.T) {
	exe := testbrowser.Chromium(t)
	dir := workDir(t)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# e2e UI test\nadmin "+uiAdminToken+"\nread "+uiReadToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProc(t, dir, procConfig{Args: []string{
		"--token-file", tokens, "--checkpoint-interval", "0",
		"--dest", "file://" + filepath.Join(dir, "dest"), "--node", "ui"}})
	p.StartReady()
	ctx := t.Context()

	// Ingest and commit through the API.
	posted := []byte("{\"user\":\"ada\",\"n\":1,\"note\":\"hello from the binary\"}\n{\"user\":\"bob\",\"n\":2,\"ok\":true}\n")
	if st, body := uiAPI(ctx, t, p, http.MethodPost, "/v1/streams/clicks/records", uiAdminToken, posted); st/100 != 2 {
		t.Fatalf("POST records: %d %s", st, body)
	}
	var first checkpointAnswer
	uiAPIJSON(ctx, t, p, http.MethodPost, "/v1/checkpoints", nil, &first)
	if first.State != "committed" || len(first.Files) != 1 || first.Files[0].Stream != "clicks" {
		t.Fatalf("checkpoint: %+v; want committed with one clicks file", first)
	}
	file := first.Files[0].Path
	hourDir := path.Dir(file)
	dayDir := path.Dir(hourDir)
	if path.Dir(dayDir) != "clicks" || !strings.HasPrefix(path.Base(dayDir), "dt=") {
		t.Fatalf("committed file %s: want clicks/dt=…/…/name", file)
	}

	b := newUIBrowser(t, exe, p.URL)

	// Without a cookie, / leads to the login form.
	b.open("/")
	if loc := b.location(); loc != "/ui/login?next=%2Fui%2F" {
		t.Fatalf("GET / led to %s, want the login form", loc)
	}
	b.shot("login")
	b.signIn(uiAdminToken)
	if loc := b.location(); loc != "/ui/" {
		t.Fatalf("signed in to %s, want /ui/", loc)
	}
	if txt := b.text("#stream-table"); !strings.Contains(txt, "clicks") {
		t.Fatalf("overview streams: %q", txt)
	}
	b.shot("overview")

	// Overview → stream → partition → hour → file.
	b.click(`#stream-table a[href="/ui/files/clicks/"]`)
	b.shot("stream")
	b.click(`#rows a[href="` + uiBrowseURL(dayDir, true) + `"]`)
	if crumbs := b.text(".crumbs"); !strings.Contains(crumbs, path.Base(dayDir)) {
		t.Errorf("partition breadcrumbs %q", crumbs)
	}
	b.shot("partition")
	b.click(`#rows a[href="` + uiBrowseURL(hourDir, true) + `"]`)
	b.shot("hour")
	b.click(`#rows a[href="` + uiBrowseURL(file, false) + `"]`)
	if loc := b.location(); loc != uiBrowseURL(file, false) {
		t.Fatalf("at %s, want the file's page", loc)
	}
	preview := b.text("#preview")
	for _, want := range []string{`"user": "ada"`, `"note": "hello from the binary"`, `"user": "bob"`, `"ok": true`} {
		if !strings.Contains(preview, want) {
			t.Errorf("preview lacks %q:\n%s", want, preview)
		}
	}
	b.shot("file")

	// Download: the link serves the bytes that were posted, with the cookie
	// the browser holds (fetch sends it: same origin).
	nums := uiEval[[]int](b, `fetch(document.getElementById('download').href).then(function (r) {
		if (!r.ok) throw new Error('download: ' + r.status);
		return r.arrayBuffer();
	}).then(function (buf) { return Array.from(new Uint8Array(buf)); })`)
	got := make([]byte, len(nums))
	for i, n := range nums {
		got[i] = byte(n)
	}
	if !bytes.Equal(got, posted) {
		t.Fatalf("downloaded %q, want %q", got, posted)
	}

	// "Checkpoint now" commits what came in since and lists it.
	more := []byte("{\"user\":\"cy\",\"n\":3}\n")
	if st, body := uiAPI(ctx, t, p, http.MethodPost, "/v1/streams/clicks/records", uiAdminToken, more); st/100 != 2 {
		t.Fatalf("POST records: %d %s", st, body)
	}
	b.click("#checkpoint-now")
	loc := b.location()
	ranStr, ok := strings.CutPrefix(loc, "/ui/checkpoints?ran=")
	ran, err := strconv.ParseUint(ranStr, 10, 64)
	if !ok || err != nil || ran <= first.ID {
		t.Fatalf("after Checkpoint now at %s, want /ui/checkpoints?ran=<id above %d>", loc, first.ID)
	}
	if txt := b.text("#ran"); !strings.Contains(txt, fmt.Sprintf("#%d committed", ran)) || !strings.Contains(txt, "1 record") {
		t.Errorf("notice %q", txt)
	}
	if row := b.text(fmt.Sprintf(`#checkpoint-table tr[data-id="%d"]`, ran)); !strings.Contains(row, "committed") {
		t.Errorf("new checkpoint row %q", row)
	}
	var ck checkpointAnswer
	uiAPIJSON(ctx, t, p, http.MethodGet, "/v1/checkpoints/"+strconv.FormatUint(ran, 10), nil, &ck)
	if ck.State != "committed" || ck.Records != 1 {
		t.Errorf("API on checkpoint %d: %+v, want committed with 1 record", ran, ck)
	}
	b.shot("checkpoints")

	// Read-only: no button, and a forged POST runs no checkpoint.
	b.click(`form[action="/ui/logout"] button`)
	if loc := b.location(); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("signed out to %s", loc)
	}
	b.signIn(uiReadToken)
	if loc := b.location(); loc != "/ui/" {
		t.Fatalf("signed in read-only to %s, want /ui/", loc)
	}
	if role := b.text(".role"); role != "read" {
		t.Errorf("role %q, want read", role)
	}
	if n := uiEval[int](b, `document.querySelectorAll('#checkpoint-now, form[action="/ui/checkpoint"]').length`); n != 0 {
		t.Fatal("a read-only session sees the Checkpoint now button")
	}
	b.shot("overview-read-only")
	before := uiCheckpoints(ctx, t, p)
	// redirect: 'manual' shows a 3xx as status 0, so anything below 400 fails.
	status := uiEval[int](b, `fetch('/ui/checkpoint', {method: 'POST', redirect: 'manual',
		headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'x=1'}).then(function (r) { return r.status; })`)
	if status != http.StatusForbidden && status != http.StatusBadRequest {
		t.Errorf("forged POST /ui/checkpoint as reader: status %d, want 403 or 400", status)
	}
	after := uiCheckpoints(ctx, t, p)
	if !slicesEqual(after, before) {
		t.Errorf("checkpoints after the forged POST %v, before %v: a checkpoint ran", after, before)
	}
	// Had one run, even an empty one, the open checkpoint would have moved on.
	var open checkpointAnswer
	uiAPIJSON(ctx, t, p, http.MethodGet, "/v1/checkpoints/"+strconv.FormatUint(ran+1, 10), nil, &open)
	if open.State != "open" {
		t.Errorf("checkpoint %d after the forged POST: %q, want still open", ran+1, open.State)
	}
	t.Logf("forged POST as reader: %d; checkpoints %v, #%d open", status, after, ran+1)
	b.open("/ui/checkpoints")
	if n := uiEval[int](b, `document.querySelectorAll('#checkpoint-now').length`); n != 0 {
		t.Error("a read-only session sees the Checkpoint now button on the checkpoints page")
	}
	b.shot("checkpoints-read-only")
}

// uiBrowseURL is the UI address of a destination path, each segment
// escaped as the UI does.
func uiBrowseURL(p string, dir bool) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u := "/ui/files/" + strings.Join(segs, "/")
	if dir {
		u += "/"
	}
	return u
}

// uiAPI does one API request with token and returns the status and body.
func uiAPI(ctx context.Context, t *testing.T, p *proc, method, target, token string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, uiStep)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.URL+target, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, target, err)
	}
	return resp.StatusCode, string(data)
}

// uiAPIJSON does one API request as admin and decodes its 2xx answer.
func uiAPIJSON(ctx context.Context, t *testing.T, p *proc, method, target string, body []byte, out any) {
	t.Helper()
	st, data := uiAPI(ctx, t, p, method, target, uiAdminToken, body)
	if st/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, target, st, data)
	}
	if err := json.Unmarshal([]byte(data), out); err != nil {
		t.Fatalf("%s %s: decode %q: %v", method, target, data, err)
	}
}

// uiCheckpoints lists the ids and states of the stored checkpoints (GET
// /v1/checkpoints as admin), newest first.
func uiCheckpoints(ctx context.Context, t *testing.T, p *proc) []string {
	t.Helper()
	var list struct {
		Checkpoints []checkpointAnswer `json:"checkpoints"`
	}
	uiAPIJSON(ctx, t, p, http.MethodGet, "/v1/checkpoints", nil, &list)
	out := make([]string, len(list.Checkpoints))
	for i, c := range list.Checkpoints {
		out[i] = fmt.Sprintf("%d:%s", c.ID, c.State)
	}
	return out
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// uiBrowser is one headless Chromium with a fresh profile and one tab, on
// the service at base; every step is bounded by uiStep.
type uiBrowser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
	n     int
}

func newUIBrowser(t *testing.T, exe, base string) *uiBrowser {
	t.Helper()
	shots := os.Getenv(envScreenshots)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testbrowser.Options(t, exe)
	ctx, cancel := context.WithTimeout(t.Context(), uiBudget)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	b := &uiBrowser{t: t, ctx: bctx, base: base, shots: shots}
	// The first call starts Chromium and ties it to the context it is given:
	// that must be bctx (bounded by uiBudget), not a shorter step's.
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: testbrowser.CSPProbe}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// step returns a context for one browser step.
func (b *uiBrowser) step() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, uiStep)
}

// open navigates and expects a 200.
func (b *uiBrowser) open(p string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+p))
	if err != nil {
		b.t.Fatalf("open %s: %v", p, err)
	}
	if resp.Status != http.StatusOK {
		b.t.Fatalf("open %s: status %d", p, resp.Status)
	}
}

// click clicks what sel finds and waits for the page it leads to, which
// must answer 200.
func (b *uiBrowser) click(sel string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
	if resp.Status != http.StatusOK {
		b.t.Fatalf("click %s: %s answered %d", sel, resp.URL, resp.Status)
	}
}

// signIn fills in the login form of the current page and sends it.
func (b *uiBrowser) signIn(token string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), token)); err != nil {
		b.t.Fatalf("type the token: %v", err)
	}
	b.click("#sign-in")
}

// location is the current address without the server's.
func (b *uiBrowser) location() string {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimPrefix(loc, b.base)
}

func (b *uiBrowser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func uiEval[T any](b *uiBrowser, js string) T {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shot saves a full-page screenshot of the current page, logs its path,
// and checks that the page broke no rule of its Content-Security-Policy.
func (b *uiBrowser) shot(name string) {
	b.t.Helper()
	if v := uiEval[[]string](b, `window.__csp || []`); len(v) > 0 {
		b.t.Errorf("%s: Content-Security-Policy violations: %v", name, v)
	}
	ctx, cancel := b.step()
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	b.n++
	p := filepath.Join(b.shots, fmt.Sprintf("binary-%02d-%s.png", b.n, name))
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}
