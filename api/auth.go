package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/internal/auth"
)

type roleKey struct{}

// RoleFrom returns the role of the request's token, as the authorization
// middleware found it. With authorization off it is auth.RoleAdmin.
func RoleFrom(ctx context.Context) (auth.Role, bool) {
	r, ok := ctx.Value(roleKey{}).(auth.Role)
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
		if c, err := r.Cookie(auth.CookieName); err == nil && c.Value != "" {
			return c.Value, true
		}
	}
	return "", false
}

// allow admits tokens of the given roles and admin.
func (s *Server) allow(roles ...auth.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.auth == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, auth.RoleAdmin)))
				return
			}
			token, present := credentials(r)
			role, ok := auth.Role(0), false
			if present { // no credentials at all are no guess
				var wait time.Duration
				if role, ok, wait = s.gate.Authenticate(r, token); wait > 0 {
					w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
					writeError(w, http.StatusTooManyRequests, &ErrorResponse{Error: CodeTooManyAuthFailures,
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
				writeError(w, http.StatusUnauthorized, &ErrorResponse{Error: CodeUnauthorized, Message: msg})
				return
			}
			if role != auth.RoleAdmin && !slices.Contains(roles, role) {
				writeError(w, http.StatusForbidden, &ErrorResponse{Error: CodeForbidden, Message: "role " + role.String() + " may not " + r.Method + " " + r.URL.Path})
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
		})
	}
}

// Gate returns the server's token check, to share with the web UI; nil
// when authorization is off.
func (s *Server) Gate() *auth.Gate { return s.gate }

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
