package web

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
)

type checkpointsData struct {
	Open      ckptRow
	HasOpen   bool
	Rows      []ckptRow
	Duration  chart
	Bytes     chart
	Ran       *ckptRow
	Limit     int
	Committed int
	Aborted   int
	Newest    string // the first page's URL, on a later page
	Older     string // the next page's URL, "" on the last
	Node      string // another node's checkpoints, from its manifests, oldest first
	Later     string // that list's next page
	Live      live   // new commits as they happen, on this node's first page
}

// checkpointsQuery is the parsed query of the checkpoints page.
type checkpointsQuery struct {
	limit  int
	before uint64 // this node's: ids below it
	node   string // another node's: from its manifests
	after  uint64 // another node's: ids above it
}

func (u *ui) parseCheckpointsQuery(r *http.Request) (checkpointsQuery, bool) {
	q := r.URL.Query()
	c := checkpointsQuery{limit: chartCheckpoints, node: q.Get("node")}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		c.limit = min(n, maxCheckpoints)
	}
	if c.node == u.node {
		c.node = ""
	}
	var err error
	if v := q.Get("before"); v != "" {
		if c.before, err = strconv.ParseUint(v, 10, 64); err != nil || c.before == 0 {
			return c, false
		}
	}
	if v := q.Get("after"); v != "" {
		if c.after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return c, false
		}
	}
	return c, len(c.node) <= maxCursor && cleanChars(c.node) && !strings.Contains(c.node, "/")
}

// url returns the address of the page of c with the cursor of another.
func (c checkpointsQuery) url(before, after uint64) string {
	v := url.Values{}
	if before > 0 {
		v.Set("before", strconv.FormatUint(before, 10))
	}
	if after > 0 {
		v.Set("after", strconv.FormatUint(after, 10))
	}
	if c.node != "" {
		v.Set("node", c.node)
	}
	if c.limit != chartCheckpoints {
		v.Set("limit", strconv.Itoa(c.limit))
	}
	if len(v) == 0 {
		return "/ui/checkpoints"
	}
	return "/ui/checkpoints?" + v.Encode()
}

// checkpoints pages this node's checkpoints from the state store, newest
// first, or with ?node= another node's from its manifests, oldest first.
func (u *ui) checkpoints(w http.ResponseWriter, r *http.Request, s *session) {
	q, ok := u.parseCheckpointsQuery(r)
	if !ok {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "before and after are checkpoint ids, node a node id.")
		return
	}
	st := u.eng.Status()
	d := checkpointsData{Limit: q.limit, Node: q.node}
	var cs []catalog.Checkpoint
	var err error
	if q.node != "" {
		cs, d.Later, err = u.nodeCheckpoints(r, q)
	} else if cs, err = u.cat.Checkpoints(q.before, q.limit+1); err == nil {
		d.Open, d.HasOpen = openRow(st), st.Ready && q.before == 0
		if len(cs) > q.limit {
			cs = cs[:q.limit]
			d.Older = q.url(cs[len(cs)-1].ID, 0)
		}
		if q.before > 0 {
			d.Newest = q.url(0, 0)
		} else {
			d.Live = u.live(r)
		}
	}
	if err != nil {
		u.internal(w, r, err)
		return
	}
	ran, _ := strconv.ParseUint(r.URL.Query().Get("ran"), 10, 64)
	for i := range cs {
		row := rowFrom(&cs[i])
		row.Node = q.node
		switch cs[i].State {
		case catalog.Committed:
			d.Committed++
		case catalog.Aborted:
			d.Aborted++
		}
		if ran != 0 && row.ID == ran && q.node == "" {
			row.Highlight = true
			flash := row
			d.Ran = &flash
		}
		d.Rows = append(d.Rows, row)
	}
	if ran != 0 && d.Ran == nil && q.node == "" {
		d.Ran = u.ranRow(ran, r.URL.Query().Get("empty") == "1")
	}
	n := min(len(cs), chartCheckpoints)
	d.Duration = barChart("Duration", "ms", false, cs[:n], func(c *catalog.Checkpoint) float64 { return float64(c.DurationMS) },
		func(v float64) string { return fmtMS(int64(v)) })
	d.Bytes = barChart("Bytes committed", "bytes", true, cs[:n], func(c *catalog.Checkpoint) float64 { return float64(c.Bytes) },
		func(v float64) string { return fmtBytes(int64(v)) })
	u.render(w, r, http.StatusOK, "checkpoints.html", &view{Title: "Checkpoints", Nav: "checkpoints", Sess: s, Data: d})
}

// ranRow is the notice of the checkpoint "Checkpoint now" ran, when the
// page does not list it.
func (u *ui) ranRow(id uint64, empty bool) *ckptRow {
	c, err := u.cat.Checkpoint(id)
	switch {
	case err == nil:
		row := rowFrom(&c)
		return &row
	case errors.Is(err, catalog.ErrNoCheckpoint) && empty:
		// A checkpoint with nothing to commit records nothing.
		row := rowFrom(&catalog.Checkpoint{ID: id, State: catalog.Committed})
		return &row
	}
	return nil
}

// nodeCheckpoints returns a page of another node's checkpoints from its
// manifests, as rows of the state store's shape, and the next page's URL.
func (u *ui) nodeCheckpoints(r *http.Request, q checkpointsQuery) ([]catalog.Checkpoint, string, error) {
	ncs, more, err := u.cat.NodeCheckpoints(r.Context(), q.node, q.after, q.limit)
	if err != nil {
		return nil, "", err
	}
	cs := make([]catalog.Checkpoint, 0, len(ncs))
	for _, nc := range ncs {
		cs = append(cs, manifestCheckpoint(nc))
	}
	next := ""
	if more {
		next = q.url(0, ncs[len(ncs)-1].ID)
	}
	return cs, next, nil
}

// manifestCheckpoint is a checkpoint as its manifest tells it: committed,
// or aborted with the reason its manifest could not be read.
func manifestCheckpoint(nc catalog.NodeCheckpoint) catalog.Checkpoint {
	c := catalog.Checkpoint{ID: nc.ID, State: catalog.Committed, FileCount: nc.Files, Records: nc.Records,
		Bytes: nc.DataBytes, CommittedAt: nc.CommittedAt, Error: nc.Err}
	if nc.Err != "" {
		c.State = catalog.Aborted
	}
	return c
}

// ckptFile is one file of a checkpoint page.
type ckptFile struct {
	Path      string
	URL       string // "" while the file is not committed
	Stream    string
	Bytes     int64
	Records   int64 // -1 unknown
	CRC32C    string
	Producers []producerRange
}

// seqRow is a producer's next sequence number on a stream as of a barrier.
type seqRow struct {
	Producer string
	Stream   string
	Next     int64
}

// Page sizes of a checkpoint's page.
const (
	ckptFilesPage = 200 // files per page
	maxSeqRows    = 200 // producer sequence rows shown
)

type checkpointData struct {
	Row       ckptRow
	Node      string // another node's checkpoint, from its manifest
	Files     []ckptFile
	FilesN    int  // files in all
	From      int  // 1-based number of the first file shown
	To        int  // of the last
	Pruned    bool // the store dropped the file list; it comes from the manifest
	Seqs      []seqRow
	SeqsN     int // sequence rows in all
	Manifest  string
	Prev      string
	Next      string
	FilesPrev string // the previous page of files
	FilesNext string // the next page of files
}

// checkpointPage shows one checkpoint: this node's from the state store
// (its manifest once the store dropped its files), another node's
// (?node=) from its manifest.
func (u *ui) checkpointPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		u.fail(w, r, http.StatusBadRequest, "Invalid checkpoint id", "A checkpoint id is an unsigned integer.")
		return
	}
	from := 0
	if v := r.URL.Query().Get("from"); v != "" {
		if from, err = strconv.Atoi(v); err != nil || from < 0 {
			u.fail(w, r, http.StatusBadRequest, "Bad cursor", "from is a file number.")
			return
		}
	}
	title := "Checkpoint " + strconv.FormatUint(id, 10)
	if node := r.URL.Query().Get("node"); node != "" && node != u.node {
		u.nodeCheckpointPage(w, r, s, node, id, from)
		return
	}
	st := u.eng.Status()
	d := checkpointData{}
	if id > 1 {
		d.Prev = u.ckptURL("", id-1)
	}
	if id < st.OpenID {
		d.Next = u.ckptURL("", id+1)
	}
	c, err := u.cat.CheckpointAt(id, func() catalog.Live { return liveOf(st) })
	switch {
	case errors.Is(err, catalog.ErrNoCheckpoint):
		u.fail(w, r, http.StatusNotFound, "No such checkpoint", "The state store holds no checkpoint "+strconv.FormatUint(id, 10)+".")
		return
	case err != nil:
		u.internal(w, r, err)
		return
	case c.State == catalog.Open || c.State == catalog.Running:
		d.Row = rowFrom(&c)
		u.render(w, r, http.StatusOK, "checkpoint.html", &view{Title: title, Nav: "checkpoints", Sess: s, Data: d})
		return
	}
	d.Row = rowFrom(&c)
	u.ownFiles(r, &d, &c, from)
	d.Seqs, d.SeqsN = seqRows(c.Seqs)
	u.render(w, r, http.StatusOK, "checkpoint.html", &view{Title: title, Nav: "checkpoints", Sess: s, Data: d})
}

// ownFiles fills d with a page of this node's checkpoint c's files: from
// the state store, or from its manifest once the store dropped them.
func (u *ui) ownFiles(r *http.Request, d *checkpointData, c *catalog.Checkpoint, from int) {
	committed := c.State == catalog.Committed
	switch {
	case len(c.Files) > 0:
		d.FilesN = len(c.Files)
		for _, f := range c.Files[min(from, len(c.Files)):min(from+ckptFilesPage, len(c.Files))] {
			cf := ckptFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C}
			if committed {
				cf.URL = browseURL(f.Final, false)
			}
			cf.Producers = producerRanges(f.Producers)
			d.Files = append(d.Files, cf)
		}
		if n := layout.ParsePath(c.Files[0].Final); committed && n.Kind == layout.PartPath {
			if m, err := u.cat.Manifest(r.Context(), n.Node, c.ID); err == nil && m != nil {
				d.Manifest = browseURL(layout.ManifestName(n.Node, c.ID), false)
			}
		}
	case d.Row.Files > 0 && committed && u.node != "":
		// Details pruned: the files are in the checkpoint's manifest.
		d.Pruned = true
		u.manifestFiles(r, d, u.node, c.ID, from)
	}
	d.pages("", c.ID, from)
}

// manifestFiles fills d with a page of the files of node's manifest of
// checkpoint id; false if there is no such manifest.
func (u *ui) manifestFiles(r *http.Request, d *checkpointData, node string, id uint64, from int) bool {
	m, err := u.cat.Manifest(r.Context(), node, id)
	if err != nil {
		u.log.Warn("read manifest", "op", "checkpoint page", "checkpoint", id, "err", err)
	}
	if m == nil {
		return false
	}
	d.Manifest = browseURL(layout.ManifestName(node, id), false)
	d.FilesN = len(m.Paths)
	for _, p := range m.Paths[min(from, len(m.Paths)):min(from+ckptFilesPage, len(m.Paths))] {
		f := m.Files[p]
		d.Files = append(d.Files, ckptFile{Path: p, URL: browseURL(p, false), Stream: f.Stream, Bytes: f.Bytes,
			Records: f.Records, CRC32C: f.CRC32C, Producers: producerRanges(f.Producers)})
	}
	return true
}

// pages sets the numbers of the files shown and the links to the other
// pages of files.
func (d *checkpointData) pages(node string, id uint64, from int) {
	if len(d.Files) > 0 {
		d.From, d.To = from+1, from+len(d.Files)
	}
	pageURL := func(from int) string {
		v := url.Values{}
		if from > 0 {
			v.Set("from", strconv.Itoa(from))
		}
		if node != "" {
			v.Set("node", node)
		}
		u := "/ui/checkpoints/" + strconv.FormatUint(id, 10)
		if len(v) > 0 {
			u += "?" + v.Encode()
		}
		return u
	}
	if from > 0 {
		d.FilesPrev = pageURL(max(0, min(from, d.FilesN)-ckptFilesPage))
	}
	if from+ckptFilesPage < d.FilesN {
		d.FilesNext = pageURL(from + ckptFilesPage)
	}
}

// nodeCheckpointPage shows another node's checkpoint from its manifest.
func (u *ui) nodeCheckpointPage(w http.ResponseWriter, r *http.Request, s *session, node string, id uint64, from int) {
	d := checkpointData{Node: node, Row: ckptRow{ID: id, Node: node, State: catalog.Committed}}
	if !u.manifestFiles(r, &d, node, id, from) {
		u.fail(w, r, http.StatusNotFound, "No such checkpoint", "The destination holds no manifest of checkpoint "+
			strconv.FormatUint(id, 10)+" of node "+node+".")
		return
	}
	if m, _ := u.cat.Manifest(r.Context(), node, id); m != nil {
		d.Row.CommittedAt, d.Row.Files = m.CommittedAt, len(m.Paths)
		for _, f := range m.Files {
			d.Row.Records += f.Records
			d.Row.Bytes += f.Bytes
		}
	}
	// No older/newer links: a node's empty checkpoints have no manifest.
	d.pages(node, id, from)
	u.render(w, r, http.StatusOK, "checkpoint.html", &view{Title: "Checkpoint " + strconv.FormatUint(id, 10) + " of " + node,
		Nav: "checkpoints", Sess: s, Data: d})
}

// seqRows returns a checkpoint's producer sequence rows, by producer and
// stream, at most maxSeqRows of them, and how many there are.
func seqRows(seqs map[string]map[string]int64) ([]seqRow, int) {
	var out []seqRow
	for pid, streams := range seqs {
		for stream, next := range streams {
			out = append(out, seqRow{Producer: pid, Stream: stream, Next: next})
		}
	}
	slices.SortFunc(out, func(a, b seqRow) int {
		if c := strings.Compare(a.Producer, b.Producer); c != 0 {
			return c
		}
		return strings.Compare(a.Stream, b.Stream)
	})
	return out[:min(len(out), maxSeqRows)], len(out)
}
