package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/auth"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// hostileEngine adds a producer with a hostile id to a real engine's.
type hostileEngine struct {
	Engine
	id string
}

func (h hostileEngine) ProducersPage(after string, limit int) ([]server.ProducerState, string, error) {
	ps, next, err := h.Engine.ProducersPage(after, limit)
	return append(ps, server.ProducerState{ID: h.id, Epoch: 3, Fenced: 1,
		Streams: map[string]recovery.StreamSeq{"<i>stream</i>": {NextSeq: 4, CommittedSeq: 2}}}), next, err
}

func TestHostileNamesAreEscaped(t *testing.T) {
	const prodID = `p.1:<script>alert(7)</script>`
	r := newRig(t, rigOpts{engine: func(e Engine) Engine { return hostileEngine{e, prodID} }})
	r.seed()

	evilFile := `clicks/dt=evil/<script>alert(1)</script>.ndjson`
	evilName := `clicks/dt=evil/'><img src=x onerror=alert(10)>.ndjson`
	evilDir := `"><svg onload=alert(4)>`
	evilPart := evilDir + `/part-n1-00000000000000000077-0000.ndjson`
	jsDir := `javascript:alert(8)`
	r.Broken("plants files and a manifest with hostile names")
	put := func(p, content string) {
		t.Helper()
		if err := afero.WriteFile(r.base, path.Join(enginetest.Dest, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(evilFile, "{\"x\":\"<img src=x onerror=alert(2)>\"}\n<script>alert(3)</script>\n")
	put(evilName, "{}\n")
	put(evilPart, "</pre><script>alert(9)</script>\n")
	put(jsDir+"/f.txt", "x\n")
	put("_manifests/n1/00000000000000000077.json", `{"checkpoint":77,"node":"n1","committed_at":"2026-11-29T09:00:00Z","files":[`+
		`{"path":"\"><svg onload=alert(4)>/part-n1-00000000000000000077-0000.ndjson","stream":"<b>s</b>","bytes":33,"records":1,`+
		`"crc32c":"<script>alert(5)</script>","producers":{"<script>alert(6)</script>":[0,1]}}]}`)
	r.checkpoint() // a new LastDone: the UI lists the destination again

	pages := []string{
		"/ui/", "/ui/files/", "/ui/files/clicks/", "/ui/files/clicks/dt=evil/", "/ui/files/" + escapePath(evilFile), "/ui/files/" + escapePath(evilName),
		"/ui/files/" + escapePath(evilDir) + "/", "/ui/files/" + escapePath(evilPart), "/ui/files/" + escapePath(jsDir) + "/",
		"/ui/files/_manifests/n1/00000000000000000077.json", "/ui/producers", "/ui/checkpoints",
	}
	raw := []string{"<script>alert", "<svg onload", "<img src=x", "'><img", "<b>s</b>", "<i>stream</i>", "</pre><script>"}
	for _, p := range pages {
		body := r.page(t, p)
		for _, s := range raw {
			if strings.Contains(body, s) {
				i := strings.Index(body, s)
				t.Errorf("%s holds %q unescaped: ...%s...", p, s, body[max(0, i-80):min(len(body), i+80)])
			}
		}
		if strings.Contains(body, `href="javascript:`) {
			t.Errorf("%s links to javascript:", p)
		}
	}
	// And each hostile name does show, as text.
	expectContains(t, r.page(t, "/ui/files/clicks/dt=evil/"), "&lt;script&gt;alert(1)&lt;/", "&#39;&gt;&lt;img src=x onerror=alert(10)&gt;.ndjson")
	expectContains(t, r.page(t, "/ui/files/"+escapePath(evilFile)), "&lt;img src=x onerror=alert(2)&gt;", "&lt;script&gt;alert(3)&lt;/script&gt;")
	// The planted manifest names a stream and a producer that are not
	// names: it is refused whole (layout.CheckManifest), so its crc32c
	// and producer never reach a page; the file's own content does.
	expectContains(t, r.page(t, "/ui/files/"+escapePath(evilPart)), "&lt;/pre&gt;&lt;script&gt;alert(9)")
	expectContains(t, r.page(t, "/ui/producers"), "p.1:&lt;script&gt;alert(7)&lt;/script&gt;", "&lt;i&gt;stream&lt;/i&gt;")
	expectContains(t, r.page(t, "/ui/files/"), `href="/ui/files/javascript:alert%288%29/"`, `href="/ui/files/%22%3E%3Csvg%20onload=alert%284%29%3E/"`)
}

func TestTraversalRefused(t *testing.T) {
	r := newRig(t, rigOpts{})
	file := r.seed()
	for _, p := range []string{
		"/ui/files/../secret.txt",
		"/ui/files/../../secret.txt",
		"/ui/files/../files-secret.txt",
		"/ui/files/%2e%2e/secret.txt",
		"/ui/files/%2E%2E/%2E%2E/secret.txt",
		"/ui/files/.%2e/secret.txt",
		"/ui/files/clicks/%2e%2e/%2e%2e/secret.txt",
		"/ui/files/..%2fsecret.txt",
		"/ui/files/..%2F..%2Fsecret.txt",
		"/ui/files/clicks%2F..%2F..%2Fsecret.txt",
		"/ui/files/%2fsecret.txt",
		"/ui/files/%2Fetc%2Fpasswd",
		"/ui/files//secret.txt",
		"/ui/files//etc/passwd",
		"/ui/files///etc/passwd",
		"/ui/files/..%5csecret.txt",
		"/ui/files/..%5c..%5csecret.txt",
		"/ui/files/C:%5Csecret.txt",
		"/ui/files/./clicks/",
		"/ui/files/clicks/./",
		"/ui/files/clicks/..",
		"/ui/files/clicks/../../secret.txt",
		"/ui/files/secret.txt%00.ndjson",
		"/ui/files/%00",
		"/ui/files/%252e%252e/secret.txt",
		"/ui/files/../",
		"/ui/files/%2e%2e/",
		"/ui/static/../web.go",
		"/ui/static/..%2fweb.go",
		"/ui/static/%2e%2e%2f%2e%2e%2fsecret.txt",
		"/ui/checkpoints/..%2f..%2fsecret.txt",
		"/ui/../secret.txt",
		"/ui/%2e%2e/secret.txt",
		"/ui/files/" + file + "/../../../../secret.txt",
		"/ui/files/" + file + "%2f..%2f..%2f..%2f..%2fsecret.txt",
	} {
		rec := r.serve(req("GET", p, ""))
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 400 or 404", p, rec.Code)
		}
		if strings.Contains(rec.Body.String(), enginetest.Secret) {
			t.Errorf("GET %s served a file outside the destination", p)
		}
	}
	// The same file, cleanly named, is served.
	expectCode(t, r.serve(req("GET", "/ui/files/"+file, "")), http.StatusOK)
}

// TestSymlinkNotFollowed puts symlinks into a local destination on the
// real filesystem: to a file outside it, to a folder outside it, to "/".
// None is listed, and none of their paths has a page.
func TestSymlinkNotFollowed(t *testing.T) {
	root := t.TempDir()
	dest, outside := filepath.Join(root, "dest"), filepath.Join(root, "outside")
	partDir := filepath.Join(dest, "clicks", "dt=2026-11-29", "hour=09")
	for _, d := range []string{partDir, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	good := "part-n1-00000000000000000001-0000.ndjson"
	if err := os.WriteFile(filepath.Join(partDir, good), []byte("{\"ok\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.ndjson"), []byte(enginetest.Secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(partDir, "leak.ndjson"):                              filepath.Join(outside, "secret.ndjson"),
		filepath.Join(partDir, "part-n1-00000000000000000001-0001.ndjson"): filepath.Join(outside, "secret.ndjson"),
		filepath.Join(dest, "clicks", "linkdir"):                           outside,
		filepath.Join(dest, "escape"):                                      "/",
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Skipf("symlinks unsupported here: %v", err)
		}
	}
	h := newFakeUI(t, local.New(afero.NewOsFs(), dest, filepath.Join(root, "staging")), nil, nil, nil)

	body := serveH(h, req("GET", "/ui/files/clicks/dt=2026-11-29/hour=09/", "")).Body.String()
	if !strings.Contains(body, good) {
		t.Fatalf("the regular file is not listed")
	}
	for _, name := range []string{"leak.ndjson", "0001.ndjson"} {
		if strings.Contains(body, name) {
			t.Errorf("symlink %s listed", name)
		}
	}
	if body := serveH(h, req("GET", "/ui/files/clicks/", "")).Body.String(); strings.Contains(body, "linkdir") {
		t.Error("symlinked folder listed")
	}
	if body := serveH(h, req("GET", "/ui/files/", "")).Body.String(); strings.Contains(body, "escape") {
		t.Error("symlink to / listed")
	}
	for _, p := range []string{
		"/ui/files/clicks/dt=2026-11-29/hour=09/leak.ndjson",
		"/ui/files/clicks/dt=2026-11-29/hour=09/part-n1-00000000000000000001-0001.ndjson",
		"/ui/files/clicks/linkdir/secret.ndjson",
		"/ui/files/clicks/linkdir/",
		"/ui/files/escape/etc/passwd",
		"/ui/files/escape/" + strings.TrimPrefix(filepath.ToSlash(outside), "/") + "/secret.ndjson",
	} {
		rec := serveH(h, req("GET", p, ""))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
		if strings.Contains(rec.Body.String(), enginetest.Secret) {
			t.Errorf("GET %s served a file outside the destination", p)
		}
	}
	expectCode(t, serveH(h, req("GET", "/ui/files/clicks/dt=2026-11-29/hour=09/"+good, "")), http.StatusOK)
}

func TestCSRF(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	r.seed()
	adminCSRF := csrfOf(t, r.get("/ui/", enginetest.TokAdmin).Body.String())
	readCSRF := csrfOf(t, r.get("/ui/", enginetest.TokRead).Body.String())
	anonCSRF := csrfOf(t, r.get("/ui/login", "").Body.String())
	if adminCSRF == readCSRF || adminCSRF == anonCSRF {
		t.Fatal("sessions share a CSRF token")
	}
	open := r.eng.Status().OpenID
	for _, c := range []struct {
		name  string
		token string
		csrf  string
		hdr   []string
	}{
		{"no token", enginetest.TokAdmin, "", nil},
		{"wrong token", enginetest.TokAdmin, "AAAA" + adminCSRF[4:], nil},
		{"another session's token", enginetest.TokAdmin, readCSRF, nil},
		{"the login form's token", enginetest.TokAdmin, anonCSRF, nil},
		{"foreign origin", enginetest.TokAdmin, adminCSRF, []string{"Origin", "http://evil.example"}},
		{"cross-site fetch", enginetest.TokAdmin, adminCSRF, []string{"Sec-Fetch-Site", "cross-site"}},
		{"same-site fetch", enginetest.TokAdmin, adminCSRF, []string{"Sec-Fetch-Site", "same-site"}},
		{"no session", "", anonCSRF, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := url.Values{}
			if c.csrf != "" {
				v.Set("csrf", c.csrf)
			}
			rec := r.form("/ui/checkpoint", c.token, v, c.hdr...)
			expectCode(t, rec, http.StatusForbidden)
		})
	}
	if got := r.eng.Status().OpenID; got != open {
		t.Fatalf("a refused POST ran a checkpoint: open %d, was %d", got, open)
	}
	// The real form, from the page itself.
	rec := r.form("/ui/checkpoint", enginetest.TokAdmin, url.Values{"csrf": {adminCSRF}}, "Origin", "http://example.com", "Sec-Fetch-Site", "same-origin")
	expectCode(t, rec, http.StatusSeeOther)
	want := "/ui/checkpoints?ran=" + itoa(open) + "&empty=1" // nothing was written: it has no record to show
	if loc := rec.Header().Get("Location"); loc != want {
		t.Fatalf("Location %q, want %q", loc, want)
	}
	expectContains(t, r.page(t, want), `id="ran"`, "Checkpoint <a class=\"mono strong\" href=\"/ui/checkpoints/"+itoa(open)+"\">#"+itoa(open)+"</a> committed")

	// Login is protected the same way.
	rec = r.form("/ui/login", "", url.Values{"token": {enginetest.TokAdmin}})
	expectCode(t, rec, http.StatusForbidden)
	rec = r.form("/ui/login", "", url.Values{"token": {enginetest.TokAdmin}, "csrf": {anonCSRF}}, "Origin", "http://evil.example")
	expectCode(t, rec, http.StatusForbidden)
	if rec.Header().Get("Set-Cookie") != "" {
		t.Error("a refused login set a cookie")
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestReadOnlyToken(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	file := r.seed()
	for _, p := range []string{"/ui/", "/ui/files/", "/ui/files/" + file, "/ui/checkpoints", "/ui/checkpoints/1", "/ui/producers"} {
		rec := r.get(p, enginetest.TokRead)
		expectCode(t, rec, http.StatusOK)
		body := rec.Body.String()
		if strings.Contains(body, "checkpoint-now") || strings.Contains(body, `action="/ui/checkpoint"`) {
			t.Errorf("%s shows the checkpoint button to a read token", p)
		}
		expectContains(t, body, `class="role role-read"`, "Sign out")
	}
	if !strings.Contains(r.get("/ui/", enginetest.TokAdmin).Body.String(), `id="checkpoint-now"`) {
		t.Error("no checkpoint button for admin")
	}
	open := r.eng.Status().OpenID
	csrf := csrfOf(t, r.get("/ui/", enginetest.TokRead).Body.String())
	rec := r.form("/ui/checkpoint", enginetest.TokRead, url.Values{"csrf": {csrf}}, "Sec-Fetch-Site", "same-origin")
	expectCode(t, rec, http.StatusForbidden)
	expectContains(t, rec.Body.String(), "Only an admin token")
	if r.eng.Status().OpenID != open {
		t.Error("a read token ran a checkpoint")
	}
	// The download link works with the cookie (the API reads it for GET).
	rec = r.get("/v1/files/"+file, enginetest.TokRead)
	expectCode(t, rec, http.StatusOK)
	expectContains(t, rec.Body.String(), `"user":"ada"`)

	// An ingest token may not read; no token or a wrong one must sign in.
	expectCode(t, r.get("/ui/", enginetest.TokIngest), http.StatusForbidden)
	for _, tok := range []string{"", "nope-0123456789"} {
		rec := r.get("/ui/producers?x=1", tok)
		expectCode(t, rec, http.StatusSeeOther)
		if loc := rec.Header().Get("Location"); loc != "/ui/login?next=%2Fui%2Fproducers%3Fx%3D1" {
			t.Errorf("token %q: Location %q", tok, loc)
		}
	}
	for _, p := range []string{"/ui/static/style.css", "/ui/login", "/"} {
		if rec := r.get(p, ""); rec.Code != http.StatusOK && rec.Code != http.StatusSeeOther {
			t.Errorf("GET %s without a token: %d", p, rec.Code)
		}
	}
}

func TestLogin(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	page := r.get("/ui/login?next=/ui/producers", "")
	expectCode(t, page, http.StatusOK)
	expectContains(t, page.Body.String(), `type="password"`, `name="next" value="/ui/producers"`)
	csrf := csrfOf(t, page.Body.String())
	login := func(token, next string) *http.Response {
		t.Helper()
		rec := r.form("/ui/login", "", url.Values{"csrf": {csrf}, "token": {token}, "next": {next}}, "Sec-Fetch-Site", "same-origin")
		return rec.Result()
	}

	res := login(enginetest.TokRead, "/ui/producers")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/producers" {
		t.Fatalf("login: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	cs := res.Cookies()
	if len(cs) != 1 {
		t.Fatalf("cookies %v", cs)
	}
	c := cs[0]
	if c.Name != auth.CookieName || c.Value != enginetest.TokRead || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v: want %s, HttpOnly, SameSite=Strict, Path=/", c, auth.CookieName)
	}
	for _, c := range []struct {
		token string
		code  int
		msg   string
	}{
		{"wrong-0123456789", http.StatusUnauthorized, "not valid"},
		{"", http.StatusUnauthorized, "not valid"},
		{enginetest.TokIngest, http.StatusForbidden, "role ingest"},
	} {
		res := login(c.token, "/ui/")
		if res.StatusCode != c.code || len(res.Cookies()) != 0 {
			t.Errorf("login %q: %d with %d cookies, want %d and none", c.token, res.StatusCode, len(res.Cookies()), c.code)
		}
	}
	// Never a redirect off the UI.
	for _, next := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example", "/ui/../../x", "/ui/%2e%2e/", "javascript:alert(1)", "/v1/files/x"} {
		if res := login(enginetest.TokRead, next); res.Header.Get("Location") != "/ui/" {
			t.Errorf("next %q: Location %q", next, res.Header.Get("Location"))
		}
	}
	// Logging out clears the cookie.
	csrf = csrfOf(t, r.get("/ui/", enginetest.TokRead).Body.String())
	rec := r.form("/ui/logout", enginetest.TokRead, url.Values{"csrf": {csrf}})
	expectCode(t, rec, http.StatusSeeOther)
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Errorf("logout cookies %v", cs)
	}
}

// TestLoginLimited: the login form and the UI's cookie go through the
// API's limit of invalid tokens, one count per address for both (the form
// was a way around the limit: it answered every guess 401). Over the
// limit an invalid token gets 429 with Retry-After, but a valid one still
// signs in.
func TestLoginLimited(t *testing.T) {
	r := newRig(t, rigOpts{auth: true})
	csrf := csrfOf(t, r.get("/ui/login", "").Body.String())
	login := func(token string) *httptest.ResponseRecorder {
		t.Helper()
		return r.form("/ui/login", "", url.Values{"csrf": {csrf}, "token": {token}, "next": {"/ui/"}}, "Sec-Fetch-Site", "same-origin")
	}
	// Half the limit through the API, half through the form: one count.
	for i := range api.DefaultAuthFailures / 2 {
		expectCode(t, r.serve(req("GET", "/v1/streams", "", "Authorization", fmt.Sprintf("Bearer api-guess-%016d", i))), http.StatusUnauthorized)
	}
	for i := range api.DefaultAuthFailures - api.DefaultAuthFailures/2 {
		expectCode(t, login(fmt.Sprintf("form-guess-%016d", i)), http.StatusUnauthorized)
	}
	rec := login("form-guess-one-too-many")
	expectCode(t, rec, http.StatusTooManyRequests)
	if ra := rec.Header().Get("Retry-After"); ra == "" || ra == "0" || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("over the limit: Retry-After %q, cookies %v", ra, rec.Result().Cookies())
	}
	expectContains(t, rec.Body.String(), "Too many invalid tokens")
	// The API and a page with an invalid cookie are over the limit too.
	expectCode(t, r.serve(req("GET", "/v1/streams", "", "Authorization", "Bearer api-guess-one-too-many")), http.StatusTooManyRequests)
	expectCode(t, r.get("/ui/", "cookie-guess-0123456789"), http.StatusTooManyRequests)
	// A valid token is always served: the form signs in, pages and the
	// API answer.
	rec = login(enginetest.TokRead)
	if rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("valid login over the limit: %d, cookies %v: %.300s", rec.Code, rec.Result().Cookies(), rec.Body.String())
	}
	expectCode(t, r.get("/ui/", enginetest.TokRead), http.StatusOK)
	expectCode(t, r.serve(req("GET", "/v1/streams", "", "Authorization", "Bearer "+enginetest.TokAdmin)), http.StatusOK)
}
