package web

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/server"
)

// streamStat is one stream of the overview or the streams page.
type streamStat struct{ catalog.StreamStat }

// URL is the stream's folder.
func (s streamStat) URL() string { return browseURL(s.Name, true) }

func wrapStreams(in []catalog.StreamStat) []streamStat {
	out := make([]streamStat, len(in))
	for i := range in {
		out[i] = streamStat{in[i]}
	}
	return out
}

// streamCountCap is how many files of one stream the streams page counts;
// a stream with more shows "at least".
const streamCountCap = 1000

// ingestRate measures records and bytes accepted per second since the
// newest barrier at least catalog.RateWindow ago (or the oldest known): committed
// checkpoints after it plus the open one. Records of checkpoint k were
// accepted between barrier k-1 and barrier k, its StartedAt.
func ingestRate(cs []catalog.Checkpoint, st server.Status, now time.Time) (records, bytes float64, since time.Time, ok bool) {
	r, b := st.OpenRecords, st.OpenBytes
	for i := range cs {
		c := &cs[i]
		if c.StartedAt.IsZero() {
			continue
		}
		since = c.StartedAt
		if now.Sub(c.StartedAt) >= catalog.RateWindow {
			break
		}
		if i == len(cs)-1 {
			break // the oldest known barrier: its own records came before it
		}
		if c.State == catalog.Committed {
			r, b = r+c.Records, b+c.Bytes
		}
	}
	span := now.Sub(since).Seconds()
	if since.IsZero() || span <= 0 {
		return 0, 0, time.Time{}, false
	}
	return float64(r) / span, float64(b) / span, since, true
}

// Bounds of the overview's streams: the streams of the newest committed
// checkpoints' files, from the state store, most recent first.
const (
	topStreams          = 20    // streams the overview shows
	activityCheckpoints = 50    // newest committed checkpoints read for them
	activityFiles       = 20000 // most files of those read
	streamsPageSize     = 100   // streams per page of /ui/streams
)

type overviewData struct {
	Open        ckptRow
	Held        int64
	LastDone    uint64
	HasRate     bool
	RecordRate  float64
	ByteRate    float64
	RateSince   time.Time
	StreamRows  template.HTML // the rows of the streams table
	ByName      bool          // the streams are the first by name, not the most recent
	MoreActive  int           // active streams beyond those shown
	Window      int           // checkpoints the committed totals cover
	Files       int
	Records     int64
	Bytes       int64
	RecentTable template.HTML // the table of the recent checkpoints
	ListErr     string
	Producers   int
	Live        live // new commits as they happen
}

// overviewState is what the overview reads from the state store (the
// newest checkpoints, the streams of their files) and the parts of the
// page made of it alone. It changes only when the store does, so it is
// kept until then (u.overviews): a dashboard polling the overview costs
// the ingest path little more than a probe does.
type overviewState struct {
	cs                     []catalog.Checkpoint
	window, files          int
	records, bytes         int64
	active                 int // streams of the newest checkpoints; the first topStreams are in streamRows
	streamRows, recentHTML template.HTML
}

// errActive marks an overview state whose streams could not be read: the
// page shows the rest and says so.
var errActive = errors.New("read the streams of the recent checkpoints")

func (u *ui) overviewState() (overviewState, error) {
	v, err := u.cat.Answer("ui\x00overview", func() (any, int, error) {
		var o overviewState
		cs, err := u.cat.Checkpoints(0, chartCheckpoints)
		if err != nil {
			return o, 0, err
		}
		o.cs, o.window = cs, len(cs)
		for i := range cs {
			if cs[i].State == catalog.Committed {
				o.files += max(cs[i].FileCount, len(cs[i].Files))
				o.records += cs[i].Records
				o.bytes += cs[i].Bytes
			}
		}
		var recent []ckptRow
		for i := range cs[:min(len(cs), recentCheckpoints)] {
			recent = append(recent, rowFrom(&cs[i]))
		}
		if o.recentHTML, err = u.fragment("overview.html", "ckpt-table", recent); err != nil {
			return o, 0, err
		}
		active, activeErr := u.cat.Active(cs, catalog.ActiveQuery{Checkpoints: activityCheckpoints, Files: activityFiles})
		o.active = len(active)
		if o.streamRows, err = u.fragment("overview.html", "stream-rows", wrapStreams(active[:min(len(active), topStreams)])); err != nil {
			return o, 0, err
		}
		if activeErr != nil {
			return o, 0, fmt.Errorf("%w: %w", errActive, activeErr)
		}
		return o, 256*len(cs) + len(o.streamRows) + len(o.recentHTML), nil
	})
	o, _ := v.(overviewState) // with an error too: the page shows what was read
	return o, err
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request, s *session) {
	st := u.eng.Status()
	now := u.now()
	d := overviewData{Open: openRow(st), Held: st.Held, LastDone: st.LastDone, Producers: u.eng.ProducerCount()}
	o, err := u.overviewState()
	if err != nil && !errors.Is(err, errActive) {
		u.internal(w, r, err)
		return
	}
	d.Window, d.Files, d.Records, d.Bytes = o.window, o.files, o.records, o.bytes
	d.RecentTable, d.StreamRows = o.recentHTML, o.streamRows
	d.MoreActive = max(o.active-topStreams, 0)
	d.Live = u.live(r)
	if st.Ready {
		d.RecordRate, d.ByteRate, d.RateSince, d.HasRate = ingestRate(o.cs, st, now)
	}
	if err != nil {
		u.log.Error("read checkpoints", "op", "overview", "err", err)
		d.ListErr = "The recent checkpoints could not be read; the server log says why."
	}
	if o.active == 0 && err == nil {
		// Nothing recent from this node: the first streams by name, from
		// one bounded page of the destination.
		d.ByName = true
		byName, _, err := u.cat.Streams(r.Context(), "", topStreams, streamCountCap)
		if err != nil {
			u.log.Error("list destination", "op", "overview", "err", err)
			d.ListErr = "The destination could not be listed; the server log says why."
		}
		if d.StreamRows, err = u.fragment("overview.html", "stream-rows", wrapStreams(byName)); err != nil {
			u.internal(w, r, err)
			return
		}
	}
	v := &view{Title: "Overview", Nav: "overview", Sess: s, Data: d}
	if !st.Ready || st.Stuck != "" {
		v.Refresh = 5
	}
	u.render(w, r, http.StatusOK, "overview.html", v)
}

type streamsData struct {
	Rows  []streamStat
	Cap   int
	First bool   // this is the first page
	Next  string // the next page's URL, "" on the last
}

// streams pages every stream of the destination by name.
func (u *ui) streams(w http.ResponseWriter, r *http.Request, s *session) {
	after := r.URL.Query().Get("after")
	if after != "" && !layout.Stream(after) {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "after is not a stream name.")
		return
	}
	found, more, err := u.cat.Streams(r.Context(), after, streamsPageSize, streamCountCap)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	rows := wrapStreams(found)
	d := streamsData{Rows: rows, Cap: streamCountCap, First: after == ""}
	if more {
		d.Next = "/ui/streams?after=" + url.QueryEscape(rows[len(rows)-1].Name)
	}
	u.render(w, r, http.StatusOK, "streams.html", &view{Title: "Streams", Nav: "overview", Sess: s, Data: d})
}

// live is what the live commits panel needs: where the feed is, and the
// cursor to follow it from (its end now). Empty Feed: no panel.
type live struct {
	Feed   string
	Cursor string
	Node   string // this node: its commits link to their checkpoint pages
}

// live returns the panel's data; none when the UI has no feed or its end
// cannot be read now (logged: the page still works).
func (u *ui) live(r *http.Request) live {
	if u.feed == "" {
		return live{}
	}
	cur, err := u.cat.FeedTip(r.Context())
	if err != nil {
		u.log.Warn("live commits off for this page", "op", "feed tip", "err", err)
		return live{}
	}
	return live{Feed: u.feed, Cursor: cur.String(), Node: u.node}
}
