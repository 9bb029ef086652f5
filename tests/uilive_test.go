package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/testbrowser"
)

// TestUILiveCommits: signed in with a read token (the UI's cookie), the
// overview and the checkpoints page show a new commit without a reload:
// their script follows GET /v1/commits with the session's cookie.
func TestUILiveCommits(t *testing.T) {
	exe := testbrowser.Chromium(t)
	p := startUINode(t, "live")
	ctx := t.Context()
	commit := func(body string) uint64 {
		t.Helper()
		if st, b := uiAPI(ctx, t, p, http.MethodPost, "/v1/streams/clicks/records", uiAdminToken, []byte(body)); st/100 != 2 {
			t.Fatalf("POST records: %d %s", st, b)
		}
		var ck checkpointAnswer
		uiAPIJSON(ctx, t, p, http.MethodPost, "/v1/checkpoints", nil, &ck)
		if ck.State != "committed" {
			t.Fatalf("checkpoint %+v", ck)
		}
		return ck.ID
	}
	old := commit("{\"n\":1}\n")

	b := newUIBrowser(t, exe, p.URL)
	b.Open("/")
	b.signIn(uiReadToken)
	for _, page := range []string{"/ui/", "/ui/checkpoints"} {
		b.Open(page)
		// A mark that a reload would wipe out.
		testbrowser.Eval[bool](b.Browser, `window.__noReload = true`)
		if n := testbrowser.Eval[int](b.Browser, `document.querySelectorAll('#live-commits tr[data-checkpoint]').length`); n != 0 {
			t.Fatalf("%s: the live table shows %d commits of before the page", page, n)
		}
		id := commit("{\"n\":2}\n{\"n\":3}\n")
		if id <= old {
			t.Fatalf("checkpoint %d after %d", id, old)
		}
		sel := fmt.Sprintf(`#live-commits tr[data-node="live"][data-checkpoint="%d"]`, id)
		deadline := time.Now().Add(10 * time.Second)
		for testbrowser.Eval[int](b.Browser, `document.querySelectorAll('`+sel+`').length`) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: checkpoint %d never appeared in the live table: %q", page, id, b.Text("#live-panel"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !testbrowser.Eval[bool](b.Browser, `window.__noReload === true`) {
			t.Fatalf("%s: the page reloaded", page)
		}
		row := b.Text(sel)
		if !strings.Contains(row, fmt.Sprintf("#%d", id)) || !strings.Contains(row, "2") {
			t.Errorf("%s: row %q", page, row)
		}
		if href := testbrowser.Eval[string](b.Browser, `document.querySelector('`+sel+` a').getAttribute('href')`); href != fmt.Sprintf("/ui/checkpoints/%d", id) {
			t.Errorf("%s: link %q", page, href)
		}
		b.Shot("live" + strings.ReplaceAll(page, "/", "-"))
		old = id
	}
}
