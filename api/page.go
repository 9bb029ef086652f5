package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/eosink/eosink/committer"
)

// List limits: every list takes ?limit= (default, at most max) and ?after=
// (the "next" cursor of the previous page), so no answer grows without
// bound.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

// listChunk is how many entries one destination listing call reads when
// a page's size is not known ahead (streams).
const listChunk = 1000

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
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: "invalid_limit",
			Message: fmt.Sprintf("limit %q: want an integer from 1 to %d", v, MaxListLimit)})
		return 0, false
	}
	return n, true
}

// afterPast returns the smallest cursor that sorts after every path under
// the folder dir ("x/"): '0' is the byte after '/'.
func afterPast(dir string) string { return strings.TrimSuffix(dir, "/") + "0" }

// walkFiles calls fn for each file under prefix sorting after after, in
// path order, reading the destination chunk entries at a time, until fn
// says stop. fn may return skip, a cursor to go on from (to pass over a
// folder without reading it). With a committer.Pager the cost is that of
// the entries read; without, the whole prefix is listed once.
func (s *Server) walkFiles(ctx context.Context, prefix, after string, chunk int,
	fn func(e committer.Entry) (skip string, stop bool)) error {
	pager, ok := s.files.(committer.Pager)
	if !ok {
		all, err := s.files.List(ctx, prefix)
		if err != nil {
			return err
		}
		for _, e := range all {
			if e.Path <= after {
				continue
			}
			skip, stop := fn(e)
			if stop {
				return nil
			}
			after = max(after, skip)
		}
		return nil
	}
	for {
		page, err := pager.ListPage(ctx, prefix, after, chunk)
		if err != nil {
			return err
		}
		jumped := false
		for _, e := range page {
			after = e.Path
			skip, stop := fn(e)
			if stop {
				return nil
			}
			if skip > after {
				after, jumped = skip, true
				break
			}
		}
		if !jumped && len(page) < chunk {
			return nil
		}
	}
}
