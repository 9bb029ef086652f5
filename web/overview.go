package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
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
func ingestRate(cs []recovery.Checkpoint, st server.Status, now time.Time) (records, bytes float64, since time.Time, ok bool) {
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
		if c.State == recovery.Committed {
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
	Open       ckptRow
	Held       int64
	LastDone   uint64
	HasRate    bool
	RecordRate float64
	ByteRate   float64
	RateSince  time.Time
	Streams    []streamStat
	ByName     bool // Streams are the first by name, not the most recent
	MoreActive int  // active streams beyond those shown
	Window     int  // checkpoints the committed totals cover
	Files      int
	Records    int64
	Bytes      int64
	Recent     []ckptRow
	ListErr    string
	Producers  int
}

// overviewState is what the overview reads from the state store: the
// newest checkpoints and the streams of their files. It changes only when
// the store does, so it is kept until then (u.overviews): a dashboard
// polling the overview costs the ingest path about what a probe does.
type overviewState struct {
	cs     []recovery.Checkpoint
	active []catalog.StreamStat
}

// overviewCacheBytes bounds the kept overview state (one entry).
const overviewCacheBytes = 8 << 20

// errActive marks an overview state whose streams could not be read: the
// page shows the rest and says so.
var errActive = errors.New("read the streams of the recent checkpoints")

func (u *ui) overviewState() (overviewState, error) {
	return u.overviews.Get(u.eng.StateVersion(), "overview", func() (overviewState, int, error) {
		var o overviewState
		var err error
		if o.cs, err = u.cat.Checkpoints(0, chartCheckpoints); err != nil {
			return o, 0, err
		}
		if o.active, err = u.cat.Active(o.cs, catalog.ActiveQuery{Checkpoints: activityCheckpoints, Files: activityFiles}); err != nil {
			return o, 0, fmt.Errorf("%w: %w", errActive, err)
		}
		size := 256 * len(o.cs)
		for i := range o.active {
			size += 128 + len(o.active[i].Name)
		}
		return o, size, nil
	})
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
	cs := o.cs
	for i := range cs[:min(len(cs), recentCheckpoints)] {
		d.Recent = append(d.Recent, rowFrom(&cs[i]))
	}
	d.Window = len(cs)
	for i := range cs {
		if cs[i].State == recovery.Committed {
			d.Files += max(cs[i].FileCount, len(cs[i].Files))
			d.Records += cs[i].Records
			d.Bytes += cs[i].Bytes
		}
	}
	if st.Ready {
		d.RecordRate, d.ByteRate, d.RateSince, d.HasRate = ingestRate(cs, st, now)
	}
	active := wrapStreams(o.active)
	if err != nil {
		u.log.Error("read checkpoints", "op", "overview", "err", err)
		d.ListErr = "The recent checkpoints could not be read; the server log says why."
	}
	d.Streams = active[:min(len(active), topStreams)]
	d.MoreActive = len(active) - len(d.Streams)
	if len(active) == 0 && err == nil {
		// Nothing recent from this node: the first streams by name, from
		// one bounded page of the destination.
		d.ByName = true
		byName, _, err := u.cat.Streams(r.Context(), "", topStreams, streamCountCap)
		d.Streams = wrapStreams(byName)
		if err != nil {
			u.log.Error("list destination", "op", "overview", "err", err)
			d.ListErr = "The destination could not be listed; the server log says why."
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
