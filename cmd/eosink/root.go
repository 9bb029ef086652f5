package main

import (
	"net/http"

	"github.com/eosink/eosink/api"
	"github.com/go-chi/chi/v5"
)

// newRootMux is the process's one route table. The API (/healthz,
// /readyz, /metrics, /v1/...) and the web UI (/, /ui, /ui/...) are
// siblings on it, behind the API's middleware: request metrics by route,
// panic recovery, and the Host and Origin guard. Unknown routes get the
// API's JSON 404, a known path with another method its 405 with Allow.
func newRootMux(a *api.Server, ui http.Handler) *chi.Mux {
	r := chi.NewRouter()
	a.Mount(r)
	// The UI does its own auth (login form, cookie, CSRF on POST): its
	// login page must be reachable without a token.
	r.Get("/", ui.ServeHTTP)
	r.Get("/ui", ui.ServeHTTP)
	r.Get("/ui/*", ui.ServeHTTP)
	r.Post("/ui/*", ui.ServeHTTP)
	return r
}
