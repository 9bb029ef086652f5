// Package testbrowser starts the real Chromium that eosink's browser tests
// drive with chromedp: where to find it, and the flags it needs on a
// sandboxed machine with no network.
package testbrowser

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// EnvChromium overrides where Chromium is; the default is /usr/bin/chromium,
// where scripts/chromium.sh installs Debian's package.
const EnvChromium = "EOSINK_CHROMIUM"

// CSPProbe, installed on every new document through the DevTools protocol
// (which the Content-Security-Policy does not govern), records the page's
// CSP violations in window.__csp.
const CSPProbe = `window.__csp = []; document.addEventListener('securitypolicyviolation', function (e) { window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });`

// Chromium returns the browser's path. Without one the test is skipped,
// or fails when CI=true: CI must run the browser tests.
func Chromium(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvChromium)
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		msg := fmt.Sprintf("chromium not found at %s (set %s, or run scripts/chromium.sh to install it): %v", p, EnvChromium, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Options are the allocator options for a headless Chromium at exe with a
// fresh profile in a temp dir of t: no sandbox (tests run as root), no GPU,
// and none of the background networking a closed network refuses.
func Options(t testing.TB, exe string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1280, 900),
	}
}
