package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/eosink/eosink/internal/layout"
)

// producerRow is one producer of the producers page.
type producerRow struct {
	ID      string
	Epoch   int64
	Fenced  int64
	Streams []producerStream
	Filter  string // lower case text the filter box matches
}

// producerStream is a producer's sequence state on one stream.
type producerStream struct {
	Stream    string
	Next      int64
	Committed int64 // -1 when none
	Pending   int64 // accepted, not committed
}

type producersData struct {
	Rows    []producerRow
	Fenced  int64
	Streams int
	Total   int    // producers known
	First   bool   // this is the first page
	Next    string // the next page's URL, "" on the last
}

// producersPage is how many producers one page of the UI shows.
const producersPage = 200

func (u *ui) producers(w http.ResponseWriter, r *http.Request, s *session) {
	after := r.URL.Query().Get("after")
	if after != "" && !layout.Producer(after) {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "after is not a producer id.")
		return
	}
	ps, next, err := u.eng.ProducersPage(after, producersPage)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	d := producersData{Total: u.eng.ProducerCount(), First: after == ""}
	if next != "" {
		d.Next = "/ui/producers?after=" + url.QueryEscape(next)
	}
	streams := map[string]bool{}
	for _, p := range ps {
		row := producerRow{ID: p.ID, Epoch: p.Epoch, Fenced: p.Fenced, Filter: strings.ToLower(p.ID)}
		for name, ss := range p.Streams {
			row.Streams = append(row.Streams, producerStream{Stream: name, Next: ss.NextSeq, Committed: ss.CommittedSeq,
				Pending: max(0, ss.NextSeq-ss.CommittedSeq-1)})
			streams[name] = true
			row.Filter += " " + name
		}
		slices.SortFunc(row.Streams, func(a, b producerStream) int { return strings.Compare(a.Stream, b.Stream) })
		d.Fenced += p.Fenced
		d.Rows = append(d.Rows, row)
	}
	slices.SortFunc(d.Rows, func(a, b producerRow) int { return strings.Compare(a.ID, b.ID) })
	d.Streams = len(streams)
	u.render(w, r, http.StatusOK, "producers.html", &view{Title: "Producers", Nav: "producers", Sess: s, Data: d})
}
