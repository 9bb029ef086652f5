// Package recoverer holds the one panic guard of eosink's HTTP handlers,
// used by api/ and web/: a panicking handler gets an answer of its
// server's own form instead of a dropped connection, and the panic is
// logged; http.ErrAbortHandler, net/http's way to abort a response on
// purpose, is panicked again.
package recoverer

import (
	"fmt"
	"log/slog"
	"net/http"
)

// Wrap returns next guarded: a panic in it is logged as msg (with the
// request's method and path as "op", and the value as "panic") and then
// answered by answer, which writes the 500 in its server's form.
func Wrap(next http.Handler, log *slog.Logger, msg string, answer func(http.ResponseWriter)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error(msg, "op", r.Method+" "+r.URL.Path, "panic", fmt.Sprint(v))
				answer(w)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
