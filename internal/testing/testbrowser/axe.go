package testbrowser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// EnvAxe overrides where axe-core's axe.min.js is; the default is where
// scripts/axe.sh installs it, AxeDefaultPath.
const EnvAxe = "EOSINK_AXE"

// AxeDefaultPath is where scripts/axe.sh puts axe.min.js:
// ${XDG_CACHE_HOME:-$HOME/.cache}/eosink/axe/node_modules/axe-core/axe.min.js.
func AxeDefaultPath() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(cache, "eosink", "axe", "node_modules", "axe-core", "axe.min.js")
}

// Axe returns the source of axe.min.js. Without it the test is skipped, or
// fails when CI=true: CI must run the accessibility checks.
func Axe(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvAxe)
	if p == "" {
		p = AxeDefaultPath()
	}
	src, err := os.ReadFile(p)
	if err == nil && !strings.Contains(string(src), "axe") {
		err = fmt.Errorf("%s does not look like axe-core", p)
	}
	if err != nil {
		msg := fmt.Sprintf("axe-core not found at %s (set %s, or run scripts/axe.sh to install it): %v", p, EnvAxe, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return string(src)
}

// AxeViolation is one rule that axe-core found broken on a page.
type AxeViolation struct {
	ID     string    `json:"id"`     // the rule, e.g. color-contrast
	Impact string    `json:"impact"` // minor, moderate, serious or critical
	Help   string    `json:"help"`   // what the rule asks
	Nodes  []AxeNode `json:"nodes"`
}

// AxeNode is one element that breaks a rule.
type AxeNode struct {
	Target  string `json:"target"`  // a CSS selector for it
	Summary string `json:"summary"` // why it fails, e.g. the contrast found
}

// Blocking tells whether the violation is serious or critical: what the
// browser tests fail on.
func (v AxeViolation) Blocking() bool { return v.Impact == "serious" || v.Impact == "critical" }

// String is the violation as a few readable lines: rule, impact, what it
// asks, then each element's selector and summary.
func (v AxeViolation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", v.ID, v.Impact, v.Help)
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "\n    %s\n      %s", n.Target, strings.ReplaceAll(strings.TrimSpace(n.Summary), "\n", "\n      "))
	}
	return b.String()
}

// axeRun runs every rule of axe-core's default set on the document and
// answers its violations, each element named by its selector (joined
// across shadow roots and frames, which the UI has none of).
const axeRun = `axe.run(document, {resultTypes: ['violations']}).then(function (r) {
	return r.violations.map(function (v) {
		return {id: v.id, impact: v.impact || '', help: v.help, nodes: v.nodes.map(function (n) {
			return {target: n.target.map(function (s) { return Array.isArray(s) ? s.join(' >>> ') : String(s); }).join(' >>> '),
				summary: n.failureSummary || ''};
		})};
	});
})`

// AxeCheck injects axe-core (src, from Axe) into the page of ctx, through
// the DevTools protocol, which the page's Content-Security-Policy does not
// govern, and answers every violation it finds there.
func AxeCheck(ctx context.Context, src string) ([]AxeViolation, error) {
	loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof window.axe === 'object'`))
	if err != nil {
		return nil, fmt.Errorf("look for axe-core: %w", err)
	}
	if !loaded {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src+"\n;undefined")); err != nil {
			return nil, fmt.Errorf("inject axe-core: %w", err)
		}
	}
	vs, err := chromedp.Run(ctx, chromedp.Evaluate[[]AxeViolation](axeRun, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("run axe-core: %w", err)
	}
	return vs, nil
}
