package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/ctxsleep"
)

// maxFeedAnswer bounds the bytes read of one feed page: the service keeps
// a page's files within about 4 MiB.
const maxFeedAnswer = 16 << 20

// DefaultFeedWait is how long one feed request waits for a commit when
// FeedQuery.Wait is zero.
const DefaultFeedWait = 30 * time.Second

// Commit is one committed checkpoint of one node, as GET /v1/commits gives
// it.
type Commit struct {
	Node        string    `json:"node"`
	Checkpoint  uint64    `json:"checkpoint"`
	CommittedAt time.Time `json:"committed_at"` // zero when its manifest is too large to read
	Manifest    string    `json:"manifest"`     // its manifest's path: Download it for every file
	Files       []CommitFile
	// FileCount is how many files it has (of FeedQuery.Stream, when set);
	// -1 when its manifest is too large for the service to read.
	FileCount int
	// FilesTruncated: Files holds only its first files by path; its
	// manifest names them all.
	FilesTruncated bool
}

// CommitFile is one committed file.
type CommitFile struct {
	Path    string `json:"path"` // Download reads it
	Stream  string `json:"stream"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
}

// CommitPage is one answer of the feed. Next is the position after its
// commits: store it with what you made of them, atomically, and start
// from it again.
type CommitPage struct {
	Commits []Commit
	Next    string
	More    bool // more commits were there already
}

// FeedQuery selects the commit feed.
type FeedQuery struct {
	// After is the Next of an earlier page; "" starts at the first commit.
	After string
	// Stream keeps only the commits with files of this stream; "" all.
	Stream string
	// Limit bounds a page's commits; 0 is the service's default (1000).
	Limit int
	// Wait is how long one request waits for a commit when there is none
	// (at most 60s); 0 means DefaultFeedWait for Commits, no wait for
	// CommitsPage.
	Wait time.Duration
}

type commitAnswer struct {
	Node           string       `json:"node"`
	Checkpoint     uint64       `json:"checkpoint"`
	CommittedAt    time.Time    `json:"committed_at"`
	Manifest       string       `json:"manifest"`
	Files          []CommitFile `json:"files"`
	FileCount      *int         `json:"file_count"`
	FilesTruncated bool         `json:"files_truncated"`
}

type commitsAnswer struct {
	Commits []commitAnswer `json:"commits"`
	Next    string         `json:"next"`
	More    bool           `json:"more"`
}

// CommitsPage reads one page of the commit feed (GET /v1/commits, role
// read), retrying transient failures. A cursor the service refuses is an
// error wrapping ErrInvalidCursor.
func (c *Client) CommitsPage(ctx context.Context, q FeedQuery) (CommitPage, error) {
	v := url.Values{}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Stream != "" {
		v.Set("stream", q.Stream)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	var a commitsAnswer
	if err := c.call(ctx, "read commits", request{method: http.MethodGet, path: "/v1/commits", query: v, maxAnswer: maxFeedAnswer}, &a); err != nil {
		return CommitPage{}, err
	}
	if a.Next == "" {
		return CommitPage{}, errors.New("read commits: the answer has no next cursor")
	}
	p := CommitPage{Commits: make([]Commit, 0, len(a.Commits)), Next: a.Next, More: a.More}
	for _, ca := range a.Commits {
		n := -1
		if ca.FileCount != nil {
			n = *ca.FileCount
		}
		p.Commits = append(p.Commits, Commit{Node: ca.Node, Checkpoint: ca.Checkpoint, CommittedAt: ca.CommittedAt, Manifest: ca.Manifest,
			Files: ca.Files, FileCount: n, FilesTruncated: ca.FilesTruncated})
	}
	return p, nil
}

// Commits follows the commit feed from q.After: every committed
// checkpoint of every node, each once, a page at a time, waiting (q.Wait
// per request) when there is none. It ends only when ctx does or the loop
// breaks; an error (after the retries of transient ones) is yielded once,
// with the page zero, and ends it. Each page's Next is the cursor to
// store with what its commits made (see docs/feed.md); pages without
// commits are yielded only when they move the cursor (with Stream, past
// other streams' commits).
//
//	for page, err := range c.Commits(ctx, client.FeedQuery{After: saved}) {
//		if err != nil { return err }
//		// write page.Commits' records and page.Next in one transaction
//	}
func (c *Client) Commits(ctx context.Context, q FeedQuery) iter.Seq2[CommitPage, error] {
	if q.Wait <= 0 {
		q.Wait = DefaultFeedWait
	}
	return func(yield func(CommitPage, error) bool) {
		for {
			p, err := c.CommitsPage(ctx, q)
			if err != nil {
				yield(CommitPage{}, err)
				return
			}
			if len(p.Commits) == 0 && p.Next == q.After {
				// Nothing came within the wait; never a tight loop, even
				// against a service that answers at once.
				if err := ctxsleep.Sleep(ctx, pollMin); err != nil {
					yield(CommitPage{}, fmt.Errorf("read commits: %w", err))
					return
				}
				continue
			}
			q.After = p.Next
			if !yield(p, nil) {
				return
			}
		}
	}
}

// Download reads the committed file at path (a CommitFile's Path or a
// Commit's Manifest) whole, retrying transient failures; at most max
// bytes (an error beyond).
func (c *Client) Download(ctx context.Context, path string, max int64) ([]byte, error) {
	var raw rawAnswer
	err := c.call(ctx, "download "+path, request{method: http.MethodGet, path: "/v1/files/" + path, maxAnswer: max + 1}, &raw)
	if err != nil {
		return nil, err
	}
	if int64(len(raw.data)) > max {
		return nil, errors.New("download " + path + ": larger than " + strconv.FormatInt(max, 10) + " bytes")
	}
	return raw.data, nil
}

// rawAnswer takes an answer's body as it is.
type rawAnswer struct{ data []byte }
