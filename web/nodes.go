package web

import (
	"net/http"
	"net/url"

	"github.com/eosink/eosink/internal/catalog"
)

// nodeRow is one node of the nodes page.
type nodeRow struct {
	catalog.NodeStatus
	State          string // "live", "expired", "no lease", "unreadable"
	FilesURL       string // the destination, its files only
	CheckpointsURL string
}

type nodesData struct {
	Rows []nodeRow
	More bool // more nodes than shown
	Live int
}

// nodes shows every node of the destination: its lease (holder, address,
// expiry, live or expired) and links to its files and checkpoints.
func (u *ui) nodes(w http.ResponseWriter, r *http.Request, s *session) {
	ns, more, err := u.cat.Nodes(r.Context())
	if err != nil {
		u.internal(w, r, err)
		return
	}
	d := nodesData{More: more}
	for _, n := range ns {
		row := nodeRow{NodeStatus: n, State: "no lease",
			FilesURL:       folderURL(browseURL("", true), "", n.ID, ""),
			CheckpointsURL: "/ui/checkpoints"}
		if !n.Self {
			row.CheckpointsURL += "?node=" + url.QueryEscape(n.ID)
		}
		switch {
		case n.LeaseErr != "":
			row.State = "unreadable"
		case n.HasLease && n.Live:
			row.State = "live"
			d.Live++
		case n.HasLease:
			row.State = "expired"
		}
		d.Rows = append(d.Rows, row)
	}
	u.render(w, r, http.StatusOK, "nodes.html", &view{Title: "Nodes", Nav: "nodes", Sess: s, Data: d})
}
