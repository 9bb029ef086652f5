package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/ctxsleep"
)

// MaxFeedWait bounds ?wait= of GET /v1/commits.
const MaxFeedWait = 60 * time.Second

// feedPace is the least time between two looks at the destination of one
// waiting request: a wake-up that finds nothing new cannot make it spin.
const feedPace = 100 * time.Millisecond

// waits ends the feed's long polls when the server stops.
type waits struct {
	once sync.Once
	done chan struct{}
}

// EndWaits answers every waiting GET /v1/commits now, and those that come
// later at once: the HTTP server is shutting down (http.Server's
// RegisterOnShutdown), and must not wait out their ?wait=.
func (s *Server) EndWaits() { s.feedWaits.once.Do(func() { close(s.feedWaits.done) }) }

// parseFeedWait reads ?wait= of the feed: seconds ("30") or a duration
// ("30s", "500ms"), 0 to MaxFeedWait.
func parseFeedWait(v string) (time.Duration, bool) {
	if v == "" {
		return 0, true
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseUint(v, 10, 8)
		if nerr != nil {
			return 0, false
		}
		d = time.Duration(n) * time.Second
	}
	return d, d >= 0 && d <= MaxFeedWait
}

// listCommits answers GET /v1/commits?after=&limit=&wait=&stream= (role
// read): a page of the commit feed (internal/catalog, feed.go). With wait,
// an empty page waits until a commit passes the cursor or the wait ends.
func (s *Server) listCommits(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cur, err := catalog.ParseCursor(q.Get("after"))
	if err != nil {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidCursor, Message: fmt.Sprintf("after: want the next of an earlier answer of this destination's feed: %v", err)})
		return
	}
	wait, ok := parseFeedWait(q.Get("wait"))
	if !ok {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidWait, Message: fmt.Sprintf("wait=%q: want seconds from 0 to %d, or a duration such as 30s", q.Get("wait"), int(MaxFeedWait/time.Second))})
		return
	}
	stream := q.Get("stream")
	if q.Has("stream") && !validStream(stream) {
		writeError(w, http.StatusBadRequest, invalidStream(stream))
		return
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	fq := catalog.FeedQuery{After: cur, Limit: limit, Stream: stream}
	for {
		looked := time.Now()
		page, err := s.cat.Commits(r.Context(), fq)
		switch {
		case errors.Is(err, catalog.ErrBadCursor):
			writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidCursor, Message: err.Error()})
			return
		case errors.Is(err, catalog.ErrTooManyNodes):
			s.log.Error("commit feed refused", "err", err)
			writeError(w, http.StatusInternalServerError, &ErrorResponse{Error: CodeInternal, Message: err.Error()})
			return
		case err != nil:
			s.internal(w, r, err)
			return
		}
		fq.After = page.Next // past what the stream filter passed over
		if len(page.Commits) > 0 || page.More || !s.feedWait(ctx, page.Next, looked) {
			writeJSON(w, http.StatusOK, commitList(page))
			return
		}
	}
}

// feedWait waits for a commit past cur, and at least until feedPace after
// looked; false when the wait is over (or the server stops).
func (s *Server) feedWait(ctx context.Context, cur catalog.Cursor, looked time.Time) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.feedWaits.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := s.cat.WaitCommits(ctx, cur); err != nil {
		return false
	}
	return ctxsleep.Sleep(ctx, time.Until(looked.Add(feedPace))) == nil
}

func commitList(page catalog.FeedPage) CommitList {
	out := CommitList{Commits: make([]Commit, 0, len(page.Commits)), Next: page.Next.String(), More: page.More}
	for _, c := range page.Commits {
		wc := Commit{Node: c.Node, Checkpoint: c.Checkpoint, Manifest: c.Manifest, Files: make([]CommitFile, 0, len(c.Files)),
			FilesTruncated: c.Truncated}
		if !c.CommittedAt.IsZero() {
			at := c.CommittedAt
			wc.CommittedAt = &at
		}
		if c.FileCount >= 0 {
			n := c.FileCount
			wc.FileCount = &n
		}
		for _, f := range c.Files {
			wc.Files = append(wc.Files, CommitFile{Path: f.Path, Stream: f.Stream, Records: f.Records, Bytes: f.Bytes})
		}
		out.Commits = append(out.Commits, wc)
	}
	return out
}
