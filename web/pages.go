package web

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/names"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
)

const (
	// recentCheckpoints is how many checkpoints the overview lists.
	recentCheckpoints = 10
	// overviewStreams is how many streams the overview lists, the most
	// recently committed first, so that its size does not grow with the
	// streams that ever existed (I11); the file browser has them all.
	overviewStreams = 50
	// chartCheckpoints is how many checkpoints the checkpoints page charts
	// and lists by default.
	chartCheckpoints = 100
	maxCheckpoints   = 1000
	// rateWindow is the least time an ingest rate is measured over.
	rateWindow = time.Minute
	// relistAfter is how old a listing must be before a page asking for a
	// path it lacks lists the destination again.
	relistAfter = 2 * time.Second
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
}

// URL is the checkpoint's page.
func (c ckptRow) URL() string { return "/ui/checkpoints/" + strconv.FormatUint(c.ID, 10) }

func rowFrom(c *recovery.Checkpoint) ckptRow {
	files := max(c.FileCount, len(c.Files))
	return ckptRow{ID: c.ID, State: string(c.State), Files: files, Records: c.Records, Bytes: c.Bytes,
		DurationMS: c.DurationMS, StartedAt: c.StartedAt, PreparedAt: c.PreparedAt, CommittedAt: c.CommittedAt,
		Error: c.Error, Empty: files == 0 && c.Records == 0}
}

// openRow is the open checkpoint, taking writes.
func openRow(st server.Status) ckptRow {
	return ckptRow{ID: st.OpenID, State: "open", Files: st.OpenFiles, Records: st.OpenRecords, Bytes: st.OpenBytes}
}

// ingestRate measures records and bytes accepted per second since the
// newest barrier at least rateWindow ago (or the oldest known): committed
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
		if now.Sub(c.StartedAt) >= rateWindow {
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

type overviewData struct {
	Open       ckptRow
	Held       int64
	LastDone   uint64
	HasRate    bool
	RecordRate float64
	ByteRate   float64
	RateSince  time.Time
	Streams    []streamStat // the overviewStreams most recently committed
	StreamN    int          // all streams with committed files
	Files      int
	Records    int64
	Bytes      int64
	Recent     []ckptRow
	ListErr    string
	Producers  int
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request, s *session) {
	st := u.eng.Status()
	now := u.now()
	d := overviewData{Open: openRow(st), Held: st.Held, LastDone: st.LastDone, Producers: u.eng.ProducerCount()}
	cs, err := u.store.List(chartCheckpoints, false)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	for i := range cs[:min(len(cs), recentCheckpoints)] {
		d.Recent = append(d.Recent, rowFrom(&cs[i]))
	}
	if st.Ready {
		d.RecordRate, d.ByteRate, d.RateSince, d.HasRate = ingestRate(cs, st, now)
	}
	snap, err := u.listing.get(r.Context(), st.LastDone, 0)
	if err != nil {
		u.log.Error("list destination", "op", "overview", "err", err)
		d.ListErr = "The destination could not be listed; the server log says why."
	} else {
		all := snap.streamStats()
		for _, x := range all {
			d.Files += x.Files
			d.Records += x.Records
			d.Bytes += x.Bytes
		}
		d.StreamN = len(all)
		if len(all) > overviewStreams {
			// The most recent commits first; the shown ones by name.
			slices.SortStableFunc(all, func(a, b streamStat) int { return b.Last.Compare(a.Last) })
			all = all[:overviewStreams]
			slices.SortFunc(all, func(a, b streamStat) int { return strings.Compare(a.Name, b.Name) })
		}
		d.Streams = all
		u.streamRates(d.Streams, snap, cs)
	}
	v := &view{Title: "Overview", Nav: "overview", Sess: s, Data: d}
	if !st.Ready || st.Stuck != "" {
		v.Refresh = 5
	}
	u.render(w, r, http.StatusOK, "overview.html", v)
}

// streamRates sets each stream's committed records per second over the
// checkpoints of the last rateWindow or more: the files of those
// checkpoints, over the time between their barriers.
func (u *ui) streamRates(streams []streamStat, snap *snapshot, cs []recovery.Checkpoint) {
	var ids []uint64
	var first, last time.Time
	for i := range cs {
		c := &cs[i]
		if c.StartedAt.IsZero() {
			continue
		}
		if last.IsZero() {
			last = c.StartedAt
		}
		first = c.StartedAt
		if last.Sub(c.StartedAt) >= rateWindow {
			break
		}
		if c.State == recovery.Committed && c.FileCount > 0 {
			ids = append(ids, c.ID)
		}
	}
	span := last.Sub(first).Seconds()
	if span <= 0 || len(streams) == 0 {
		return
	}
	// The oldest barrier bounds the window: its own files came before it.
	if n := len(ids); n > 0 && cs[len(cs)-1].StartedAt.Equal(first) && ids[n-1] == cs[len(cs)-1].ID {
		ids = ids[:n-1]
	}
	slices.Sort(ids)
	idx := map[string]int{}
	for i := range streams {
		idx[streams[i].Name] = i
		streams[i].HasRate = true
	}
	for i := range snap.files {
		f := &snap.files[i]
		if !f.HasCkpt || f.Records < 0 || (u.node != "" && f.Node != u.node) || strings.HasPrefix(f.Path, manifestDir) {
			continue
		}
		if _, ok := slices.BinarySearch(ids, f.Ckpt); !ok {
			continue
		}
		name, _, _ := strings.Cut(f.Path, "/")
		if j, ok := idx[name]; ok {
			streams[j].RatePerS += float64(f.Records)
		}
	}
	for i := range streams {
		streams[i].RatePerS /= span
	}
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

func (u *ui) browse(w http.ResponseWriter, r *http.Request, s *session) {
	name, dir, ok := destPath(r.URL.EscapedPath())
	if !ok {
		u.fail(w, r, http.StatusBadRequest, "Invalid path", "The address must be a clean path inside the destination.")
		return
	}
	if r.URL.EscapedPath() == "/ui/files" {
		http.Redirect(w, r, "/ui/files/", http.StatusSeeOther)
		return
	}
	st := u.eng.Status()
	snap, err := u.listing.get(r.Context(), st.LastDone, 0)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	if dir {
		u.folder(w, r, s, snap, name)
		return
	}
	f, found := snap.find(name)
	if !found && !snap.hasDir(name) {
		// Perhaps committed since the listing was taken.
		if snap, err = u.listing.get(r.Context(), st.LastDone, relistAfter); err != nil {
			u.internal(w, r, err)
			return
		}
		f, found = snap.find(name)
	}
	switch {
	case found:
		u.file(w, r, s, snap, f)
	case snap.hasDir(name):
		http.Redirect(w, r, browseURL(name, true), http.StatusSeeOther)
	default:
		u.fail(w, r, http.StatusNotFound, "No such file", "The destination holds no committed file at this path.")
	}
}

// folderRow is one row of a folder page.
type folderRow struct {
	Name     string
	URL      string
	Dir      bool
	Files    int
	Bytes    int64
	Records  int64 // -1 unknown
	Modified time.Time
	HasCkpt  bool
	Ckpt     uint64
	CkptURL  string
	Download string
}

// sortLink is a column header that sorts the folder.
type sortLink struct {
	URL    string
	Active bool
	Desc   bool
}

type folderData struct {
	Path    string
	Crumbs  []crumb
	Rows    []folderRow
	Folders int
	FilesN  int   // files in this folder
	Bytes   int64 // bytes of the files in this folder
	Beneath int   // files in this folder and below
	BytesIn int64 // bytes of those
	Total   int   // rows matching the filter
	All     int   // rows in all
	First   int   // 1-based number of the first row shown
	Last    int
	Page    int
	Pages   int
	Sort    string
	Desc    bool
	Filter  string
	Prev    string
	Next    string
	Sorts   map[string]sortLink
	Pager   []pageLink
}

// pageLink is one page number of the pager; Gap marks an ellipsis.
type pageLink struct {
	N       int
	URL     string
	Current bool
	Gap     bool
}

// folderQuery is a folder page's query: sort key, order, filter, page.
type folderQuery struct {
	sort   string
	desc   bool
	filter string
	page   int
}

func parseFolderQuery(q url.Values) folderQuery {
	fq := folderQuery{sort: sortName, page: 1}
	switch q.Get("sort") {
	case sortSize, sortTime:
		fq.sort = q.Get("sort")
	}
	fq.desc = q.Get("order") == "desc"
	fq.filter = strings.TrimSpace(q.Get("q"))
	if len(fq.filter) > 256 {
		fq.filter = fq.filter[:256]
	}
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 1 {
		fq.page = n
	}
	return fq
}

// url returns the folder's address with this query, default values left out.
func (fq folderQuery) url(base string) string {
	v := url.Values{}
	if fq.sort != sortName {
		v.Set("sort", fq.sort)
	}
	if fq.desc {
		v.Set("order", "desc")
	}
	if fq.filter != "" {
		v.Set("q", fq.filter)
	}
	if fq.page > 1 {
		v.Set("page", strconv.Itoa(fq.page))
	}
	if len(v) == 0 {
		return base
	}
	return base + "?" + v.Encode()
}

func (u *ui) folder(w http.ResponseWriter, r *http.Request, s *session, snap *snapshot, name string) {
	dv := snap.dir(name)
	if dv == nil && name != "" {
		u.fail(w, r, http.StatusNotFound, "No such folder", "The destination holds no committed file under this path.")
		return
	}
	fq := parseFolderQuery(r.URL.Query())
	base := browseURL(name, true)
	d := folderData{Path: name, Crumbs: crumbs(name, true), Sort: fq.sort, Desc: fq.desc, Filter: fq.filter, Sorts: map[string]sortLink{}}
	for _, k := range []string{sortName, sortSize, sortTime} {
		q := fq
		q.page, q.sort = 1, k
		// A click on the active column flips its order; a new column
		// starts ascending for names, newest or largest first otherwise.
		q.desc = k != sortName
		if k == fq.sort {
			q.desc = !fq.desc
		}
		d.Sorts[k] = sortLink{URL: q.url(base), Active: k == fq.sort, Desc: fq.desc}
	}
	if dv != nil {
		d.Folders, d.FilesN, d.All = dv.folders, len(dv.entries)-dv.folders, len(dv.entries)
		for i := range dv.entries {
			e := &dv.entries[i]
			d.Beneath += e.Files
			d.BytesIn += e.Bytes
			if !e.Dir {
				d.Bytes += e.Bytes
			}
		}
		order := dv.order(fq.sort, fq.desc)
		filter := strings.ToLower(fq.filter)
		_, total := dv.window(order, filter, 0, 0)
		d.Pages = max(1, (total+u.pageSize-1)/u.pageSize)
		fq.page = min(fq.page, d.Pages)
		rows, _ := dv.window(order, filter, (fq.page-1)*u.pageSize, u.pageSize)
		d.Total, d.Page = total, fq.page
		if len(rows) > 0 {
			d.First = (fq.page-1)*u.pageSize + 1
			d.Last = d.First + len(rows) - 1
		}
		for _, e := range rows {
			full := e.Name
			if name != "" {
				full = name + "/" + e.Name
			}
			row := folderRow{Name: e.Name, URL: browseURL(full, e.Dir), Dir: e.Dir, Files: e.Files, Bytes: e.Bytes, Records: e.Records, Modified: e.Modified}
			if !e.Dir {
				f := &snap.files[e.file]
				row.HasCkpt, row.Ckpt = f.HasCkpt, f.Ckpt
				if f.HasCkpt && (u.node == "" || f.Node == u.node) {
					row.CkptURL = "/ui/checkpoints/" + strconv.FormatUint(f.Ckpt, 10)
				}
				row.Download = u.download + escapePath(f.Path)
			}
			d.Rows = append(d.Rows, row)
		}
		d.Pager = pager(fq, base, d.Pages)
		if fq.page > 1 {
			q := fq
			q.page--
			d.Prev = q.url(base)
		}
		if fq.page < d.Pages {
			q := fq
			q.page++
			d.Next = q.url(base)
		}
	}
	title := "Files"
	if name != "" {
		title = name + "/"
	}
	u.render(w, r, http.StatusOK, "folder.html", &view{Title: title, Nav: "files", Sess: s, Data: d})
}

// pager returns page links: the first, the last, and two around the
// current one, with gaps between.
func pager(fq folderQuery, base string, pages int) []pageLink {
	if pages <= 1 {
		return nil
	}
	var out []pageLink
	last := 0
	for n := 1; n <= pages; n++ {
		if n != 1 && n != pages && (n < fq.page-2 || n > fq.page+2) {
			continue
		}
		if last != 0 && n > last+1 {
			out = append(out, pageLink{Gap: true})
		}
		q := fq
		q.page = n
		out = append(out, pageLink{N: n, URL: q.url(base), Current: n == fq.page})
		last = n
	}
	return out
}

// producerRange is one producer's sequence numbers in a file.
type producerRange struct {
	ID          string
	First, Last int64
}

type fileData struct {
	Path         string
	Name         string
	Crumbs       []crumb
	Stream       string
	StreamURL    string
	Partition    string
	Bytes        int64
	Modified     time.Time
	Records      int64
	HasCkpt      bool
	Ckpt         uint64
	CkptURL      string
	Node         string
	InManifest   bool
	IsManifest   bool // the file is a manifest itself
	ManifestPath string
	ManifestURL  string
	CommittedAt  time.Time
	CRC32C       string
	Producers    []producerRange
	Download     string
	Preview      preview
	PreviewErr   string
}

func (u *ui) file(w http.ResponseWriter, r *http.Request, s *session, snap *snapshot, f *fileEntry) {
	d := fileData{Path: f.Path, Name: path.Base(f.Path), Crumbs: crumbs(f.Path, false), Bytes: f.Bytes,
		Modified: f.Modified, Records: f.Records, HasCkpt: f.HasCkpt, Ckpt: f.Ckpt, Node: f.Node,
		Download: u.download + escapePath(f.Path), IsManifest: strings.HasPrefix(f.Path, manifestDir) && f.HasCkpt}
	if dir := path.Dir(f.Path); dir != "." && !d.IsManifest {
		d.Stream, d.Partition, _ = strings.Cut(dir, "/")
		d.StreamURL = browseURL(d.Stream, true)
	}
	if f.HasCkpt && (u.node == "" || f.Node == u.node) {
		d.CkptURL = "/ui/checkpoints/" + strconv.FormatUint(f.Ckpt, 10)
	}
	if f.HasCkpt && !strings.HasPrefix(f.Path, manifestDir) {
		d.ManifestPath = recovery.ManifestPath(f.Node, f.Ckpt)
		if _, ok := snap.find(d.ManifestPath); ok {
			d.ManifestURL = browseURL(d.ManifestPath, false)
		}
		m, err := u.manifests.get(r.Context(), d.ManifestPath)
		if err != nil {
			u.log.Warn("read manifest", "path", d.ManifestPath, "op", "file page", "err", err)
		}
		if m != nil {
			d.CommittedAt = m.CommittedAt
			if mf := m.Files[f.Path]; mf != nil {
				d.InManifest, d.CRC32C, d.Records = true, mf.CRC32C, mf.Records
				d.Producers = producerRanges(mf.Producers)
			}
		}
	}
	rc, _, err := u.files.Open(r.Context(), f.Path)
	switch {
	case err == nil:
		d.Preview, err = readPreview(r.Context(), rc, f.Path)
		_ = rc.Close()
		if r.Context().Err() != nil {
			return // the client is gone; nobody reads the page
		}
		if err != nil {
			u.log.Warn("read preview", "path", f.Path, "op", "file page", "err", err)
			d.PreviewErr = "The file could not be read; the server log says why."
		}
	case errors.Is(err, context.Canceled):
		return
	default:
		u.log.Warn("open file", "path", f.Path, "op", "file page", "err", err)
		d.PreviewErr = "The file could not be opened; it may have been removed."
	}
	u.render(w, r, http.StatusOK, "file.html", &view{Title: d.Name, Nav: "files", Sess: s, Data: d})
}

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
	More      bool
	MoreURL   string
}

func (u *ui) checkpoints(w http.ResponseWriter, r *http.Request, s *session) {
	st := u.eng.Status()
	limit := chartCheckpoints
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		limit = min(n, maxCheckpoints)
	}
	cs, err := u.store.List(limit+1, false)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	d := checkpointsData{Limit: limit, Open: openRow(st), HasOpen: st.Ready}
	if len(cs) > limit {
		cs = cs[:limit]
		d.More = limit < maxCheckpoints
		d.MoreURL = "/ui/checkpoints?limit=" + strconv.Itoa(min(limit*5, maxCheckpoints))
	}
	ran, _ := strconv.ParseUint(r.URL.Query().Get("ran"), 10, 64)
	for i := range cs {
		row := rowFrom(&cs[i])
		switch cs[i].State {
		case recovery.Committed:
			d.Committed++
		case recovery.Aborted:
			d.Aborted++
		}
		if ran != 0 && row.ID == ran {
			row.Highlight = true
			flash := row
			d.Ran = &flash
		}
		d.Rows = append(d.Rows, row)
	}
	if ran != 0 && d.Ran == nil {
		if c, err := u.store.Get(ran); err == nil {
			flash := rowFrom(c)
			d.Ran = &flash
		} else if errors.Is(err, recovery.ErrNotFound) && r.URL.Query().Get("empty") == "1" {
			// A checkpoint with nothing to commit records nothing.
			flash := rowFrom(&recovery.Checkpoint{ID: ran, State: recovery.Committed})
			d.Ran = &flash
		}
	}
	n := min(len(cs), chartCheckpoints)
	d.Duration = barChart("Duration", "ms", false, cs[:n], func(c *recovery.Checkpoint) float64 { return float64(c.DurationMS) },
		func(v float64) string { return fmtMS(int64(v)) })
	d.Bytes = barChart("Bytes committed", "bytes", true, cs[:n], func(c *recovery.Checkpoint) float64 { return float64(c.Bytes) },
		func(v float64) string { return fmtBytes(int64(v)) })
	u.render(w, r, http.StatusOK, "checkpoints.html", &view{Title: "Checkpoints", Nav: "checkpoints", Sess: s, Data: d})
}

// ckptFile is one file of a checkpoint page.
type ckptFile struct {
	Path      string
	URL       string
	Stream    string
	Bytes     int64
	Records   int64 // -1 unknown
	CRC32C    string
	Producers []producerRange
	Present   bool // listed in the destination
}

// seqRow is a producer's next sequence number on a stream as of a barrier.
type seqRow struct {
	Producer string
	Stream   string
	Next     int64
}

type checkpointData struct {
	Row      ckptRow
	Files    []ckptFile
	Pruned   bool // the store dropped the file list; it comes from the listing
	Seqs     []seqRow
	Manifest string
	Prev     string
	Next     string
}

func (u *ui) checkpointPage(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		u.fail(w, r, http.StatusBadRequest, "Invalid checkpoint id", "A checkpoint id is an unsigned integer.")
		return
	}
	st := u.eng.Status()
	d := checkpointData{}
	if id > 1 {
		d.Prev = "/ui/checkpoints/" + strconv.FormatUint(id-1, 10)
	}
	if id < st.OpenID {
		d.Next = "/ui/checkpoints/" + strconv.FormatUint(id+1, 10)
	}
	c, err := u.store.Get(id)
	switch {
	case errors.Is(err, recovery.ErrNotFound):
		switch {
		case st.Ready && id == st.OpenID:
			d.Row = openRow(st)
		case st.Ready && id < st.OpenID && id > st.LastDone && id >= st.FirstID:
			d.Row = ckptRow{ID: id, State: "running"}
		default:
			u.fail(w, r, http.StatusNotFound, "No such checkpoint", "The state store holds no checkpoint "+strconv.FormatUint(id, 10)+".")
			return
		}
		u.render(w, r, http.StatusOK, "checkpoint.html", &view{Title: "Checkpoint " + strconv.FormatUint(id, 10), Nav: "checkpoints", Sess: s, Data: d})
		return
	case err != nil:
		u.internal(w, r, err)
		return
	}
	d.Row = rowFrom(c)
	snap, lerr := u.listing.get(r.Context(), st.LastDone, 0)
	if lerr != nil {
		u.log.Warn("list destination", "op", "checkpoint page", "err", lerr)
	}
	for _, f := range c.Files {
		cf := ckptFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C, URL: browseURL(f.Final, false)}
		cf.Producers = producerRanges(f.Producers)
		if snap != nil {
			_, cf.Present = snap.find(f.Final)
		}
		d.Files = append(d.Files, cf)
	}
	if len(c.Files) == 0 && d.Row.Files > 0 && snap != nil {
		// Details pruned: find the files by the checkpoint in their names.
		d.Pruned = true
		for i := range snap.files {
			f := &snap.files[i]
			if !f.HasCkpt || f.Ckpt != id || strings.HasPrefix(f.Path, manifestDir) || (u.node != "" && f.Node != u.node) {
				continue
			}
			stream, _, _ := strings.Cut(f.Path, "/")
			d.Files = append(d.Files, ckptFile{Path: f.Path, URL: browseURL(f.Path, false), Stream: stream, Bytes: f.Bytes, Records: f.Records, Present: true})
		}
	}
	if len(d.Files) > 0 {
		if node, _, ok := parsePart(d.Files[0].Path); ok {
			mp := recovery.ManifestPath(node, id)
			if snap != nil {
				if _, ok := snap.find(mp); ok {
					d.Manifest = browseURL(mp, false)
				}
			}
		}
	}
	for pid, streams := range c.Seqs {
		for stream, next := range streams {
			d.Seqs = append(d.Seqs, seqRow{Producer: pid, Stream: stream, Next: next})
		}
	}
	slices.SortFunc(d.Seqs, func(a, b seqRow) int {
		if c := strings.Compare(a.Producer, b.Producer); c != 0 {
			return c
		}
		return strings.Compare(a.Stream, b.Stream)
	})
	u.render(w, r, http.StatusOK, "checkpoint.html", &view{Title: "Checkpoint " + strconv.FormatUint(id, 10), Nav: "checkpoints", Sess: s, Data: d})
}

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
	if after != "" && !names.Producer(after) {
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
		if res.State == recovery.Committed && len(res.Files) == 0 && res.Records == 0 {
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
