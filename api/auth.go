package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Role is what a token may do.
type Role uint8

// Roles. Admin may do everything.
const (
	RoleIngest Role = iota + 1 // write records, init producers, read producers
	RoleRead                   // every GET
	RoleAdmin                  // everything
)

// String returns the role's name as written in a token file.
func (r Role) String() string {
	switch r {
	case RoleIngest:
		return "ingest"
	case RoleRead:
		return "read"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole parses "ingest", "read" or "admin".
func ParseRole(s string) (Role, error) {
	for _, r := range []Role{RoleIngest, RoleRead, RoleAdmin} {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown role %q (want ingest, read or admin)", s)
}

// MinTokenLen is the shortest token accepted, in bytes.
const MinTokenLen = 16

// CookieName is the cookie the web UI stores a token in; it is accepted
// for GET requests only.
const CookieName = "eosink_token"

type tokenEntry struct {
	sum  [sha256.Size]byte
	role Role
}

// Tokens maps bearer tokens to roles. It is immutable and safe for
// concurrent use.
type Tokens struct {
	entries []tokenEntry
}

// NewTokens returns Tokens holding the given token -> role pairs.
func NewTokens(m map[string]Role) (*Tokens, error) {
	t := &Tokens{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := t.add(k, m[k]); err != nil {
			return nil, err
		}
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

func (t *Tokens) add(token string, role Role) error {
	if role < RoleIngest || role > RoleAdmin {
		return fmt.Errorf("invalid role %d", role)
	}
	if token == "" {
		return errors.New("empty token")
	}
	if len(token) < MinTokenLen {
		return fmt.Errorf("token shorter than %d bytes: it could be guessed", MinTokenLen)
	}
	for _, c := range []byte(token) {
		if c <= ' ' || c == 0x7f {
			return errors.New("token holds a space or control character")
		}
	}
	sum := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if e.sum == sum {
			return errors.New("token listed twice")
		}
	}
	t.entries = append(t.entries, tokenEntry{sum: sum, role: role})
	return nil
}

// LoadTokens reads a token file: one "<role> <token>" per line, roles
// ingest, read or admin; blank lines and '#' comments (whole lines, or
// from a field starting with '#') are skipped. A token may appear once.
// A file with no token is an error: it would lock everyone out.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("load tokens %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the token file format of LoadTokens.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if i := slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#") }); i >= 0 {
			fields = fields[:i]
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<role> <token>\", got %d fields", n, len(fields))
		}
		role, err := ParseRole(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := t.add(fields[1], role); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

// lookup returns token's role. It compares the token's digest with every
// known one, without stopping at a match, so the time taken does not tell
// which token matched or how much of one did.
// Lookup returns token's role, false if unknown. It compares against every
// known token in constant time, like the API's own checks.
func (t *Tokens) Lookup(token string) (Role, bool) { return t.lookup(token) }

func (t *Tokens) lookup(token string) (Role, bool) {
	sum := sha256.Sum256([]byte(token))
	role, found := 0, 0
	for _, e := range t.entries {
		eq := subtle.ConstantTimeCompare(sum[:], e.sum[:])
		role = subtle.ConstantTimeSelect(eq, int(e.role), role)
		found |= eq
	}
	return Role(role), found == 1
}

type roleKey struct{}

// RoleFrom returns the role of the request's token, as the authorization
// middleware found it. With authorization off it is RoleAdmin.
func RoleFrom(ctx context.Context) (Role, bool) {
	r, ok := ctx.Value(roleKey{}).(Role)
	return r, ok
}

// credentials returns the request's token: from "Authorization: Bearer",
// or for GET from the cookie. present is true if the request carried an
// Authorization header at all, valid or not.
func credentials(r *http.Request) (token string, present bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", true
		}
		return strings.TrimSpace(tok), true
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
			return c.Value, true
		}
	}
	return "", false
}

// allow admits tokens of the given roles and admin.
func (s *Server) allow(roles ...Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.auth == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, RoleAdmin)))
				return
			}
			token, present := credentials(r)
			role, ok := Role(0), false
			if present { // no credentials at all are no guess
				var wait time.Duration
				if role, ok, wait = s.gate.Authenticate(r, token); wait > 0 {
					w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
					writeError(w, http.StatusTooManyRequests, &ErrorResponse{Error: "too_many_auth_failures",
						Message: "too many invalid tokens from this address; retry later"})
					return
				}
			}
			if !ok {
				challenge := "Bearer"
				msg := "a bearer token is required"
				if present {
					challenge, msg = `Bearer error="invalid_token"`, "the token is not valid"
				}
				w.Header().Set("WWW-Authenticate", challenge)
				writeError(w, http.StatusUnauthorized, &ErrorResponse{Error: "unauthorized", Message: msg})
				return
			}
			if role != RoleAdmin && !slices.Contains(roles, role) {
				writeError(w, http.StatusForbidden, &ErrorResponse{Error: "forbidden", Message: "role " + role.String() + " may not " + r.Method + " " + r.URL.Path})
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
		})
	}
}

// keyScope is the identity a request's idempotency keys are scoped by
// (server.Write.Scope), so one client can't take another's key: with
// tokens on, a digest of the request's token (never the token itself);
// "" without tokens. Only for requests allow admitted.
func (s *Server) keyScope(r *http.Request) string {
	if s.auth == nil {
		return ""
	}
	token, _ := credentials(r)
	sum := sha256.Sum256([]byte("eosink idempotency key scope\x00" + token))
	return fmt.Sprintf("%x", sum[:16])
}
