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

	"github.com/chromedp/chromedp"
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
	p := startUINode(t, "ui")
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
	b.Open("/")
	if loc := b.Location(); loc != "/ui/login?next=%2Fui%2F" {
		t.Fatalf("GET / led to %s, want the login form", loc)
	}
	b.Shot("login")
	b.signIn(uiAdminToken)
	if loc := b.Location(); loc != "/ui/" {
		t.Fatalf("signed in to %s, want /ui/", loc)
	}
	if txt := b.Text("#stream-table"); !strings.Contains(txt, "clicks") {
		t.Fatalf("overview streams: %q", txt)
	}
	b.Shot("overview")

	// Overview → stream → partition → hour → file.
	b.Click(`#stream-table a[href="/ui/files/clicks/"]`)
	b.Shot("stream")
	b.Click(`#rows a[href="` + uiBrowseURL(dayDir, true) + `"]`)
	if crumbs := b.Text(".crumbs"); !strings.Contains(crumbs, path.Base(dayDir)) {
		t.Errorf("partition breadcrumbs %q", crumbs)
	}
	b.Shot("partition")
	b.Click(`#rows a[href="` + uiBrowseURL(hourDir, true) + `"]`)
	b.Shot("hour")
	b.Click(`#rows a[href="` + uiBrowseURL(file, false) + `"]`)
	if loc := b.Location(); loc != uiBrowseURL(file, false) {
		t.Fatalf("at %s, want the file's page", loc)
	}
	preview := b.Text("#preview")
	for _, want := range []string{`"user": "ada"`, `"note": "hello from the binary"`, `"user": "bob"`, `"ok": true`} {
		if !strings.Contains(preview, want) {
			t.Errorf("preview lacks %q:\n%s", want, preview)
		}
	}
	b.Shot("file")

	// Download: the link serves the bytes that were posted, with the cookie
	// the browser holds (fetch sends it: same origin).
	nums := testbrowser.Eval[[]int](b.Browser, `fetch(document.getElementById('download').href).then(function (r) {
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
	b.Click("#checkpoint-now")
	loc := b.Location()
	ranStr, ok := strings.CutPrefix(loc, "/ui/checkpoints?ran=")
	ran, err := strconv.ParseUint(ranStr, 10, 64)
	if !ok || err != nil || ran <= first.ID {
		t.Fatalf("after Checkpoint now at %s, want /ui/checkpoints?ran=<id above %d>", loc, first.ID)
	}
	if txt := b.Text("#ran"); !strings.Contains(txt, fmt.Sprintf("#%d committed", ran)) || !strings.Contains(txt, "1 record") {
		t.Errorf("notice %q", txt)
	}
	if row := b.Text(fmt.Sprintf(`#checkpoint-table tr[data-id="%d"]`, ran)); !strings.Contains(row, "committed") {
		t.Errorf("new checkpoint row %q", row)
	}
	var ck checkpointAnswer
	uiAPIJSON(ctx, t, p, http.MethodGet, "/v1/checkpoints/"+strconv.FormatUint(ran, 10), nil, &ck)
	if ck.State != "committed" || ck.Records != 1 {
		t.Errorf("API on checkpoint %d: %+v, want committed with 1 record", ran, ck)
	}
	b.Shot("checkpoints")

	// Read-only: no button, and a forged POST runs no checkpoint.
	b.Click(`form[action="/ui/logout"] button`)
	if loc := b.Location(); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("signed out to %s", loc)
	}
	b.signIn(uiReadToken)
	if loc := b.Location(); loc != "/ui/" {
		t.Fatalf("signed in read-only to %s, want /ui/", loc)
	}
	if role := b.Text(".role"); role != "read" {
		t.Errorf("role %q, want read", role)
	}
	if n := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#checkpoint-now, form[action="/ui/checkpoint"]').length`); n != 0 {
		t.Fatal("a read-only session sees the Checkpoint now button")
	}
	b.Shot("overview-read-only")
	before := uiCheckpoints(ctx, t, p)
	// redirect: 'manual' shows a 3xx as status 0, so anything below 400 fails.
	status := testbrowser.Eval[int](b.Browser, `fetch('/ui/checkpoint', {method: 'POST', redirect: 'manual',
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
	b.Open("/ui/checkpoints")
	if n := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#checkpoint-now').length`); n != 0 {
		t.Error("a read-only session sees the Checkpoint now button on the checkpoints page")
	}
	b.Shot("checkpoints-read-only")
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

// startUINode starts the binary as node with the UI tests' tokens
// (uiAdminToken, uiReadToken), a local destination and no checkpoint
// interval, and waits until it is ready.
func startUINode(t *testing.T, node string) *proc {
	t.Helper()
	dir := workDir(t)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# e2e UI test\nadmin "+uiAdminToken+"\nread "+uiReadToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProc(t, dir, procConfig{Args: []string{
		"--token-file", tokens, "--checkpoint-interval", "0",
		"--dest", "file://" + filepath.Join(dir, "dest"), "--node", node}})
	p.StartReady()
	return p
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

// uiBrowser is the shared test browser (testbrowser.Browser), every step
// bounded by uiStep, with the UI's sign-in.
type uiBrowser struct{ *testbrowser.Browser }

func newUIBrowser(t *testing.T, exe, base string) *uiBrowser {
	t.Helper()
	return &uiBrowser{testbrowser.New(t, exe, base, testbrowser.Session{Budget: uiBudget, Step: uiStep, ShotPrefix: "binary-"})}
}

// signIn fills in the login form of the current page and sends it.
func (b *uiBrowser) signIn(token string) {
	b.T.Helper()
	ctx, cancel := b.Step()
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), token)); err != nil {
		b.T.Fatalf("type the token: %v", err)
	}
	b.Click("#sign-in")
}
