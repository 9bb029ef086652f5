package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/internal/auth"
)

// session is who is asking.
type session struct {
	AuthOn bool      // tokens are required
	Role   auth.Role // 0 without a valid token
	token  string    // the valid token, "" without one (or without auth)
	// wait is set when the request carried an invalid token and its
	// address sent too many: how long until it may try again.
	wait time.Duration
}

// CanRead reports whether the session may see the pages.
func (s *session) CanRead() bool { return s.Role == auth.RoleRead || s.Role == auth.RoleAdmin }

// Admin reports whether the session may run a checkpoint.
func (s *session) Admin() bool { return s.Role == auth.RoleAdmin }

// LoggedIn reports whether a token is in use.
func (s *session) LoggedIn() bool { return s.token != "" }

// RoleName is the role as the token file names it.
func (s *session) RoleName() string {
	if s.Role == 0 {
		return ""
	}
	return s.Role.String()
}

// session returns the request's session: the token from "Authorization:
// Bearer" or from the cookie, and its role. Without auth everyone is admin.
func (u *ui) session(r *http.Request) *session {
	if u.auth == nil {
		return &session{Role: auth.RoleAdmin}
	}
	s := &session{AuthOn: true}
	token := ""
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(tok)
		}
	} else if c, err := r.Cookie(auth.CookieName); err == nil {
		token = c.Value
	}
	if token == "" {
		return s
	}
	if role, ok, wait := u.auth.Authenticate(r, token); ok {
		s.Role, s.token = role, token
	} else {
		s.wait = wait
	}
	return s
}

// tooManyFailures answers 429 to a request whose address sent too many
// invalid tokens, as the API does.
func (u *ui) tooManyFailures(w http.ResponseWriter, r *http.Request, s *session, wait time.Duration) {
	secs := retrySeconds(w, wait)
	u.render(w, r, http.StatusTooManyRequests, "error.html", &view{Title: "Too many invalid tokens", Sess: s, Data: failData{
		Code: http.StatusTooManyRequests, Heading: "Too many invalid tokens",
		Message: fmt.Sprintf("Too many invalid tokens came from your address. Try again in %d seconds, or sign in with a valid token.", secs)}})
}

// retrySeconds sets Retry-After to wait, rounded up to seconds, and
// returns them.
func retrySeconds(w http.ResponseWriter, wait time.Duration) int64 {
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return secs
}

// csrfToken is the form token of a session: an HMAC of its auth token
// under a key made at start, so it needs no server-side state, differs per
// token, and changes on restart. Forms of a visitor without a token (the
// login form; every form with auth off) share one per process.
func (u *ui) csrfToken(token string) string {
	m := hmac.New(sha256.New, u.csrfKey)
	m.Write([]byte("eosink ui csrf\x00"))
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// page wraps a GET handler: it needs a token of role read or admin. A
// visitor without one is sent to the login form.
func (u *ui) page(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := u.session(r)
		switch {
		case s.CanRead():
			h(w, r, s)
		case s.wait > 0:
			u.tooManyFailures(w, r, s, s.wait)
		case s.Role != 0:
			u.render(w, r, http.StatusForbidden, "error.html", &view{Title: "Forbidden", Sess: s, Data: failData{
				Code: http.StatusForbidden, Heading: "This token may not read",
				Message: "The token you signed in with has the role " + s.Role.String() + ". The web UI needs a read or admin token."}})
		default:
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		}
	}
}

// maxForm bounds the body of a form POST.
const maxForm = 16 << 10

// post wraps a POST handler: the request must come from our own origin
// (Sec-Fetch-Site, or Origin against Host) and carry the session's CSRF
// token in the form field "csrf".
func (u *ui) post(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := u.session(r)
		if err := u.origin.Check(r); err != nil {
			u.fail(w, r, http.StatusForbidden, "Cross-origin request refused", "This form must be sent from eosink's own pages.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			u.fail(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
			return
		}
		got := r.PostForm.Get("csrf")
		if got == "" || !hmac.Equal([]byte(got), []byte(u.csrfToken(s.token))) {
			u.fail(w, r, http.StatusForbidden, "Form expired",
				"The form's security token is missing or stale (the server may have restarted). Reload the page and try again.")
			return
		}
		h(w, r, s)
	}
}

type loginData struct {
	Next  string
	Error string
}

func (u *ui) loginPage(w http.ResponseWriter, r *http.Request) {
	if u.auth == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "login.html", &view{Title: "Sign in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

func (u *ui) login(w http.ResponseWriter, r *http.Request, s *session) {
	if u.auth == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	token := strings.TrimSpace(r.PostForm.Get("token"))
	again := func(status int, msg string) {
		u.render(w, r, status, "login.html", &view{Title: "Sign in", Sess: s, Data: loginData{Next: next, Error: msg}})
	}
	// The form goes through the API's limiter: without it, the form
	// would be a way around it for a guesser.
	role, ok, wait := u.auth.Authenticate(r, token)
	switch {
	case wait > 0:
		again(http.StatusTooManyRequests, fmt.Sprintf("Too many invalid tokens came from your address. Try again in %d seconds.", retrySeconds(w, wait)))
		return
	case !ok:
		again(http.StatusUnauthorized, "That token is not valid.")
		return
	case role != auth.RoleRead && role != auth.RoleAdmin:
		again(http.StatusForbidden, "That token has the role "+role.String()+"; the web UI needs a read or admin token.")
		return
	case !cookieSafe(token):
		again(http.StatusBadRequest, "That token holds characters a cookie cannot carry (\" , ; \\ or space).")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *ui) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	target := "/ui/login"
	if u.auth == nil {
		target = Prefix
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// safeNext returns next if it is a path of the UI, else the overview: the
// login form must not redirect anywhere else.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\\r\n\t") || strings.Contains(next, "//") {
		return Prefix
	}
	if _, ok := splitEscaped(strings.SplitN(next, "?", 2)[0]); !ok {
		return Prefix
	}
	return next
}

// cookieSafe reports whether token can be a cookie value as it is, so the
// API reads back the same token from the cookie.
func cookieSafe(token string) bool {
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return token != ""
}
