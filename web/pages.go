package web

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/server"
)

const (
	// recentCheckpoints is how many checkpoints the overview lists.
	recentCheckpoints = 10
	// chartCheckpoints is how many checkpoints the checkpoints page charts
	// and lists by default.
	chartCheckpoints = 100
	maxCheckpoints   = 1000
	// rateWindow is the least time an ingest rate is measured over.
	rateWindow = time.Minute
)

// ckptRow is one checkpoint in a table.
type ckptRow struct {
	ID          uint64
	State       string
	Files       int
	Records     int64
	Bytes       int64
	DurationMS  int64
	StartedAt   time.Time
	PreparedAt  time.Time
	CommittedAt time.Time
	Error       string
	Empty       bool
	Highlight   bool
	Node        string // another node's, from its manifest; "" this node's
}

// URL is the checkpoint's page.
func (c ckptRow) URL() string { return ckptURL(c.Node, c.ID) }

// ckptURL returns the page of node's checkpoint id ("" for this node).
func ckptURL(node string, id uint64) string {
	u := "/ui/checkpoints/" + strconv.FormatUint(id, 10)
	if node != "" {
		u += "?node=" + url.QueryEscape(node)
	}
	return u
}

// ckptURL returns the page of node's checkpoint id: this node's from the
// state store, another's from its manifest.
func (u *ui) ckptURL(node string, id uint64) string {
	if node == u.node || u.node == "" {
		node = ""
	}
	return ckptURL(node, id)
}

func rowFrom(c *catalog.Checkpoint) ckptRow {
	return ckptRow{ID: c.ID, State: c.State, Files: c.FileCount, Records: c.Records, Bytes: c.Bytes,
		DurationMS: c.DurationMS, StartedAt: c.StartedAt, PreparedAt: c.PreparedAt, CommittedAt: c.CommittedAt,
		Error: c.Error, Empty: c.Empty()}
}

// openRow is the open checkpoint, taking writes.
func openRow(st server.Status) ckptRow {
	return ckptRow{ID: st.OpenID, State: catalog.Open, Files: st.OpenFiles, Records: st.OpenRecords, Bytes: st.OpenBytes}
}

// liveOf is what the catalog needs of the engine's status to tell open and
// running checkpoints.
func liveOf(st server.Status) catalog.Live {
	return catalog.Live{Ready: st.Ready, OpenID: st.OpenID, OpenFiles: st.OpenFiles, OpenRecords: st.OpenRecords,
		OpenBytes: st.OpenBytes, LastDone: st.LastDone, FirstID: st.FirstID}
}

// crumb is one step of a breadcrumb trail.
type crumb struct {
	Name string
	URL  string
}

// crumbs returns the trail to p: the destination root, then each folder;
// the last step is p itself (a folder when dir).
func crumbs(p string, dir bool) []crumb {
	out := []crumb{{Name: "destination", URL: browseURL("", true)}}
	if p == "" {
		return out
	}
	segs := strings.Split(p, "/")
	for i := range segs {
		isDir := dir || i < len(segs)-1
		out = append(out, crumb{Name: segs[i], URL: browseURL(strings.Join(segs[:i+1], "/"), isDir)})
	}
	return out
}

func (u *ui) checkpointNow(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Admin() {
		msg := "Only an admin token may run a checkpoint."
		if !s.LoggedIn() && s.AuthOn {
			msg = "Sign in with an admin token to run a checkpoint."
		}
		u.fail(w, r, http.StatusForbidden, "Not allowed", msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), u.ckptWait)
	defer cancel()
	res, err := u.eng.Checkpoint(ctx)
	switch {
	case err == nil:
		to := "/ui/checkpoints?ran=" + strconv.FormatUint(res.ID, 10)
		if string(res.State) == catalog.Committed && len(res.Files) == 0 && res.Records == 0 {
			to += "&empty=1"
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
	case errors.Is(err, server.ErrNotReady):
		u.fail(w, r, http.StatusServiceUnavailable, "Recovery is running", "Checkpoints start once recovery is done; try again in a moment.")
	case errors.Is(err, context.DeadlineExceeded):
		u.fail(w, r, http.StatusGatewayTimeout, "Checkpoint still running",
			"The checkpoint did not end within "+u.ckptWait.String()+"; it goes on in the background. See the checkpoints page.")
	case r.Context().Err() != nil:
		return // the client is gone
	default:
		u.log.Error("checkpoint now", "op", "POST /ui/checkpoint", "err", err)
		u.fail(w, r, http.StatusServiceUnavailable, "Checkpoint failed", err.Error())
	}
}

// producerRanges lists a file's producer ranges, one row per range, by
// producer and then sequence.
func producerRanges(m map[string]committer.SeqRanges) []producerRange {
	var out []producerRange
	for id, rs := range m {
		for _, rg := range rs {
			out = append(out, producerRange{ID: id, First: rg[0], Last: rg[1]})
		}
	}
	slices.SortFunc(out, func(a, b producerRange) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return cmp.Compare(a.First, b.First)
	})
	return out
}
