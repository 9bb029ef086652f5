package web

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/eosink/eosink/server"
)

func TestPages(t *testing.T) {
	testPages(t, newRig(t, rigOpts{}))
}

// TestPagesS3 serves the same pages over an S3 destination (a real MinIO
// server; skipped without its binary, failed then under CI=true).
func TestPagesS3(t *testing.T) {
	testPages(t, newRig(t, rigOpts{s3: testsrv.StartMinIO(t)}))
}

func testPages(t *testing.T, r *rig) {
	file := r.seed()
	dir := path.Dir(file) // clicks/dt=.../hour=..
	partition := strings.TrimPrefix(dir, "clicks/")
	day, _, _ := strings.Cut(partition, "/")

	t.Run("overview", func(t *testing.T) {
		body := r.page(t, "/ui/")
		expectContains(t, body, "Overview", `href="/ui/files/clicks/"`, `href="/ui/files/views/"`,
			"Ingest rate", "Open checkpoint", `id="checkpoint-now"`, "#1", "committed", "Recent checkpoints")
		if strings.Contains(body, "banner-recovery") || strings.Contains(body, "banner-stuck") {
			t.Error("a banner on a healthy engine")
		}
	})
	t.Run("root folder", func(t *testing.T) {
		body := r.page(t, "/ui/files/")
		expectContains(t, body, `href="/ui/files/clicks/"`, `href="/ui/files/views/"`, "_manifests")
	})
	t.Run("stream folder", func(t *testing.T) {
		body := r.page(t, "/ui/files/clicks/")
		expectContains(t, body, day+"/", `href="/ui/files/clicks/`+day+`/"`, "destination", "clicks")
	})
	t.Run("partition folder", func(t *testing.T) {
		body := r.page(t, "/ui/files/"+dir+"/")
		expectContains(t, body, path.Base(file), `href="/ui/files/`+file+`"`, `href="/v1/files/`+file+`"`,
			`href="/ui/checkpoints/1"`, ">2<") // two records
	})
	t.Run("file", func(t *testing.T) {
		body := r.page(t, "/ui/files/"+file)
		expectContains(t, body, path.Base(file), `id="preview"`, `<span class="jk">&#34;user&#34;</span>`,
			`<span class="js">&#34;ada&#34;</span>`, `<span class="jl">true</span>`, `href="/v1/files/`+file+`"`,
			`id="crc32c"`, "app-1", "Manifest entry", `href="/ui/files/_manifests/n1/00000000000000000001.json"`)
	})
	t.Run("manifest file", func(t *testing.T) {
		body := r.page(t, "/ui/files/_manifests/n1/00000000000000000001.json")
		expectContains(t, body, `<span class="jk">&#34;checkpoint&#34;</span>`, "This file is the manifest of checkpoint")
	})
	t.Run("checkpoints", func(t *testing.T) {
		body := r.page(t, "/ui/checkpoints")
		expectContains(t, body, "<svg", `class="bar"`, "Duration", "Bytes committed", `href="/ui/checkpoints/1"`, "taking writes")
	})
	t.Run("checkpoint", func(t *testing.T) {
		body := r.page(t, "/ui/checkpoints/1")
		expectContains(t, body, "Checkpoint <span class=\"mono\">#1</span>", file, `id="checkpoint-files"`, "app-1", "Producer sequence numbers")
	})
	t.Run("open checkpoint", func(t *testing.T) {
		expectContains(t, r.page(t, "/ui/checkpoints/2"), "badge-open", "Taking writes now")
	})
	t.Run("producers", func(t *testing.T) {
		body := r.page(t, "/ui/producers")
		expectContains(t, body, "app-1", "clicks", `id="producer-table"`)
	})
	t.Run("download", func(t *testing.T) {
		rc, _, err := r.files.Open(t.Context(), file)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := io.ReadAll(rc)
		_ = rc.Close()
		rec := r.get("/v1/files/"+file, enginetest.TokRead)
		expectCode(t, rec, http.StatusOK)
		if rec.Body.String() != string(want) || !strings.Contains(string(want), `"user":"ada"`) {
			t.Fatalf("download %q, want %q", rec.Body.String(), want)
		}
	})
	t.Run("checkpoint now", func(t *testing.T) {
		r.write("views", "{\"page\":\"/new\"}\n")
		next := r.eng.Status().OpenID
		csrf := csrfOf(t, r.page(t, "/ui/"))
		rec := r.form("/ui/checkpoint", enginetest.TokAdmin, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "same-origin")
		expectCode(t, rec, http.StatusSeeOther)
		body := r.page(t, rec.Header().Get("Location"))
		expectContains(t, body, fmt.Sprintf(`<tr class="highlight" data-id="%d">`, next), "1 file, 1 record")
		// The new file is listed at once: folder pages list the destination.
		views, err := r.files.List(t.Context(), "views/")
		if err != nil || len(views) != 2 {
			t.Fatalf("views holds %d files: %v", len(views), err)
		}
		for _, f := range views {
			expectContains(t, r.page(t, "/ui/files/"+path.Dir(f.Path)+"/"), path.Base(f.Path))
		}
	})
	t.Run("static", func(t *testing.T) {
		for name, ctype := range map[string]string{"style.css": "text/css", "app.js": "text/javascript", "icon.svg": "image/svg+xml"} {
			rec := r.get("/ui/static/"+name, "")
			expectCode(t, rec, http.StatusOK)
			if got := rec.Header().Get("Content-Type"); !strings.HasPrefix(got, ctype) {
				t.Errorf("%s: Content-Type %q", name, got)
			}
		}
		expectCode(t, r.get("/ui/static/nope.js", ""), http.StatusNotFound)
	})
	t.Run("not found", func(t *testing.T) {
		expectCode(t, r.get("/ui/files/clicks/nope.ndjson", ""), http.StatusNotFound)
		expectCode(t, r.get("/ui/files/nope/", ""), http.StatusNotFound)
		expectCode(t, r.get("/ui/checkpoints/999", ""), http.StatusNotFound)
		expectCode(t, r.get("/ui/checkpoints/x", ""), http.StatusBadRequest)
		expectCode(t, r.get("/ui/nope", ""), http.StatusNotFound)
	})
}

func TestRedirects(t *testing.T) {
	r := newRig(t, rigOpts{})
	file := r.seed()
	for _, c := range []struct{ from, to string }{
		{"/", "/ui/"},
		{"/ui", "/ui/"},
		{"/ui/files", "/ui/files/"},
		{"/ui/files/clicks", "/ui/files/clicks/"},
		{"/ui/files/" + path.Dir(file), "/ui/files/" + path.Dir(file) + "/"},
		{"/ui/login", "/ui/"}, // no auth: no login
	} {
		rec := r.get(c.from, "")
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != c.to {
			t.Errorf("GET %s: %d to %q, want 303 to %q", c.from, rec.Code, rec.Header().Get("Location"), c.to)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	reqs := map[string]*http.Request{
		"page":          withCookie(req("GET", "/ui/", ""), enginetest.TokRead),
		"login":         req("GET", "/ui/login", ""),
		"redirect":      req("GET", "/", ""),
		"to login":      req("GET", "/ui/producers", ""),
		"static":        req("GET", "/ui/static/app.js", ""),
		"not found":     withCookie(req("GET", "/ui/files/nope", ""), enginetest.TokRead),
		"bad path":      req("GET", "/ui/files/%2e%2e/x", ""),
		"refused post":  req("POST", "/ui/checkpoint", "csrf=x", "Content-Type", "application/x-www-form-urlencoded"),
		"forbidden get": withCookie(req("GET", "/ui/", ""), enginetest.TokIngest),
	}
	for name, q := range reqs {
		rec := r.serve(q)
		h := rec.Header()
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "style-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", name, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q allows inline script or style", name, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", name, h.Get("X-Content-Type-Options"))
		}
		if h.Get("Referrer-Policy") != "same-origin" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: Referrer-Policy %q, X-Frame-Options %q", name, h.Get("Referrer-Policy"), h.Get("X-Frame-Options"))
		}
		if strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			body := rec.Body.String()
			// No inline script or style anywhere: the CSP would block it.
			if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, "<style") ||
				strings.Contains(body, " onclick=") || strings.Contains(body, "javascript:") {
				t.Errorf("%s: inline script or style in the page", name)
			}
		}
	}
}

func withCookie(q *http.Request, token string) *http.Request {
	q.AddCookie(&http.Cookie{Name: auth.CookieName, Value: token})
	return q
}

func TestBanners(t *testing.T) {
	for _, c := range []struct {
		name   string
		status server.Status
		want   []string
	}{
		{"recovering", server.Status{Recovering: "committing checkpoint 7"}, []string{`id="banner-recovery"`, "Recovery running", "committing checkpoint 7", `data-refresh="5"`}},
		{"stuck", server.Status{Ready: true, OpenID: 9, LastDone: 7, Stuck: "commit checkpoint 8: disk on fire"}, []string{`id="banner-stuck"`, "A commit is stuck", "disk on fire"}},
		{"failed", server.Status{Failed: "record prepared checkpoint 3: io error"}, []string{`id="banner-failed"`, "The engine stopped", "io error"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newFakeUI(t, newMemReader(nil, time.Now()), &fakeEngine{status: c.status}, nil, nil)
			for _, p := range []string{"/ui/", "/ui/files/", "/ui/checkpoints", "/ui/producers"} {
				rec := serveH(h, req("GET", p, ""))
				expectCode(t, rec, http.StatusOK)
				for _, w := range c.want {
					if p != "/ui/" && strings.HasPrefix(w, "data-refresh") {
						continue
					}
					if !strings.Contains(rec.Body.String(), w) {
						t.Errorf("%s lacks %q", p, w)
					}
				}
			}
		})
	}
	t.Run("checkpoint while recovering", func(t *testing.T) {
		h := newFakeUI(t, newMemReader(nil, time.Now()), &fakeEngine{}, nil, nil)
		body := serveH(h, req("GET", "/ui/", "")).Body.String()
		rec := serveH(h, req("POST", "/ui/checkpoint", "csrf="+csrfOf(t, body), "Content-Type", "application/x-www-form-urlencoded"))
		expectCode(t, rec, http.StatusServiceUnavailable)
		expectContains(t, rec.Body.String(), "Recovery is running")
	})
}

func serveH(h http.Handler, q *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, q)
	return rec
}

type checkpointAt struct {
	id      uint64
	at      time.Time
	records int64
}

// list makes committed checkpoints, given newest first.
func list(cs ...checkpointAt) []catalog.Checkpoint {
	var out []catalog.Checkpoint
	for _, c := range cs {
		out = append(out, catalog.Checkpoint{ID: c.id, State: catalog.Committed, StartedAt: c.at, Records: c.records, FileCount: 1})
	}
	return out
}

func TestIngestRate(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	ck := func(id uint64, ago time.Duration, records int64) checkpointAt {
		return checkpointAt{id, now.Add(-ago), records}
	}
	cs := list(ck(5, 10*time.Second, 100), ck(4, 40*time.Second, 300), ck(3, 70*time.Second, 600), ck(2, 100*time.Second, 900))
	rec, _, since, ok := ingestRate(cs, server.Status{OpenRecords: 20}, now)
	// Since barrier 3, 70 s ago: checkpoints 4 and 5 and the open one.
	if !ok || !since.Equal(now.Add(-70*time.Second)) {
		t.Fatalf("since %v ok %v", since, ok)
	}
	if want := 420.0 / 70; rec != want {
		t.Errorf("rate %v, want %v", rec, want)
	}
	// All within the window: measured from the oldest barrier.
	cs = list(ck(2, 10*time.Second, 50), ck(1, 30*time.Second, 500))
	rec, _, since, ok = ingestRate(cs, server.Status{OpenRecords: 10}, now)
	if !ok || !since.Equal(now.Add(-30*time.Second)) || rec != 60.0/30 {
		t.Errorf("rate %v since %v ok %v, want 2/s since 30s ago", rec, since, ok)
	}
	if _, _, _, ok := ingestRate(nil, server.Status{OpenRecords: 10}, now); ok {
		t.Error("a rate without any checkpoint")
	}
}

func TestFormats(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 10 << 20: "10.0 MiB", 300 << 30: "300 GiB"} {
		if got := fmtBytes(in); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{5: "5 ms", 1500: "1.50 s", 125_000: "2m5s"} {
		if got := fmtMS(in); got != want {
			t.Errorf("fmtMS(%d) = %q, want %q", in, got, want)
		}
	}
}
