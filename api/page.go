package api

import (
	"fmt"
	"net/http"
	"strconv"
)

// List limits: every list takes ?limit= (default, at most max) and ?after=
// (the "next" cursor of the previous page), so no answer grows without
// bound.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

// listLimit parses ?limit=; on a bad value it answers 400 invalid_limit and
// returns false.
func listLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	q := r.URL.Query()
	if !q.Has("limit") {
		return DefaultListLimit, true
	}
	v := q.Get("limit")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidLimit,
			Message: fmt.Sprintf("limit %q: want an integer from 1 to %d", v, MaxListLimit)})
		return 0, false
	}
	return n, true
}
