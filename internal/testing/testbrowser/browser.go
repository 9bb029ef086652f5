package testbrowser

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// EnvScreenshots names a folder for the browser tests' screenshots; by
// default they go to a temp dir, and each path is logged.
const EnvScreenshots = "EOSINK_SCREENSHOTS"

// Session bounds a Browser and names its screenshots.
type Session struct {
	// Budget bounds the whole session: a bound on a walk, not a timing
	// check.
	Budget time.Duration
	// Step, if set, bounds each step (a navigation, a click, a read).
	Step time.Duration
	// ShotPrefix starts each screenshot's file name.
	ShotPrefix string
}

// Browser is one headless Chromium (exe) with a fresh profile and one tab,
// on the service at Base, with a folder for screenshots: the steps the UI
// tests of web/ and tests/ take, each failing the test on an error.
type Browser struct {
	T    testing.TB
	Ctx  context.Context // the tab's, bounded by Session.Budget
	Base string          // the service's URL

	s     Session
	shots string
	n     int
}

// New starts the browser; it stops when the test ends.
func New(t testing.TB, exe, base string, s Session) *Browser {
	t.Helper()
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), s.Budget)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, Options(t, exe)...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	// The first call starts Chromium and ties it to the context it is
	// given: that must be bctx (bounded by the budget), not a step's.
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: CSPProbe}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &Browser{T: t, Ctx: bctx, Base: base, s: s, shots: shots}
}

// Step returns the context of one step: Ctx, bounded by Session.Step if
// set.
func (b *Browser) Step() (context.Context, context.CancelFunc) {
	if b.s.Step == 0 {
		return b.Ctx, func() {}
	}
	return context.WithTimeout(b.Ctx, b.s.Step)
}

// Do runs actions, what naming them in a failure.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.T.Helper()
	ctx, cancel := b.Step()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
}

// run runs a in one step and returns its result, what naming it in a
// failure.
func run[T any](b *Browser, what string, a chromedp.Action[T]) T {
	b.T.Helper()
	ctx, cancel := b.Step()
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
	return v
}

// Open navigates and expects a 200.
func (b *Browser) Open(p string) {
	b.T.Helper()
	b.Visit(p, http.StatusOK)
}

// Visit navigates and expects the status want.
func (b *Browser) Visit(p string, want int) {
	b.T.Helper()
	resp := run(b, "open "+p, chromedp.NavigateResponse(b.Base+p))
	if resp.Status != int64(want) {
		b.T.Fatalf("open %s: status %d, want %d", p, resp.Status, want)
	}
}

// Click clicks what sel finds and waits for the page it leads to, which
// must answer 200.
func (b *Browser) Click(sel string) {
	b.T.Helper()
	ctx, cancel := b.Step()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.T.Fatalf("click %s: %v", sel, err)
	}
	if resp.Status != http.StatusOK {
		b.T.Fatalf("click %s: %s answered %d", sel, resp.URL, resp.Status)
	}
}

// Location is the current address, without the service's.
func (b *Browser) Location() string {
	b.T.Helper()
	return strings.TrimPrefix(run(b, "location", chromedp.Location()), b.Base)
}

// Text is the text of what sel finds.
func (b *Browser) Text(sel string) string {
	b.T.Helper()
	return run(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// Eval evaluates js in the page, awaiting a promise, as a T.
func Eval[T any](b *Browser, js string) T {
	b.T.Helper()
	return run(b, "evaluate "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// Shot saves a full-page screenshot of the current page, logs its path,
// and checks that the page broke no rule of its Content-Security-Policy.
func (b *Browser) Shot(name string) {
	b.T.Helper()
	if v := Eval[[]string](b, `window.__csp || []`); len(v) > 0 {
		b.T.Errorf("%s: Content-Security-Policy violations: %v", name, v)
	}
	buf := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	b.n++
	p := filepath.Join(b.shots, fmt.Sprintf("%s%02d-%s.png", b.s.ShotPrefix, b.n, name))
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.T.Fatal(err)
	}
	b.T.Logf("screenshot %s", p)
}
