package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
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
	active, err := u.activeStreams(cs)
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
		if d.Streams, _, err = listStreams(r.Context(), u.files, u.manifests, "", topStreams); err != nil {
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

// activeStreams returns the streams of the files of the newest committed
// checkpoints in cs (newest first, without files): at most
// activityCheckpoints checkpoints and about activityFiles files, read from
// the state store. They come most recently committed first, with their
// committed records per second over the checkpoints of the last rateWindow
// or more: the files of those checkpoints, over the time between their
// barriers.
func (u *ui) activeStreams(cs []recovery.Checkpoint) ([]streamStat, error) {
	rateIDs, span := rateCheckpoints(cs)
	by := map[string]*streamStat{}
	var out []*streamStat
	read, files := 0, 0
	for i := range cs {
		c := &cs[i]
		if c.State != recovery.Committed || max(c.FileCount, len(c.Files)) == 0 {
			continue
		}
		if read == activityCheckpoints || files >= activityFiles {
			break
		}
		full, err := u.store.Get(c.ID)
		if errors.Is(err, recovery.ErrNotFound) {
			continue // pruned since the list was taken
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", c.ID, err)
		}
		read++
		at := full.CommittedAt
		if at.IsZero() {
			at = full.PreparedAt
		}
		_, inRate := slices.BinarySearch(rateIDs, c.ID)
		for _, f := range full.Files {
			files++
			st := by[f.Stream]
			if st == nil {
				st = &streamStat{Name: f.Stream, HasRate: span > 0}
				by[f.Stream] = st
				out = append(out, st)
			}
			st.Files++
			st.Bytes += f.Bytes
			st.Records += f.Records
			if at.After(st.Last) {
				st.Last = at
			}
			if inRate && span > 0 {
				st.RatePerS += float64(f.Records) / span
			}
		}
	}
	res := make([]streamStat, 0, len(out))
	for _, st := range out {
		res = append(res, *st)
	}
	// Newest checkpoint first, so the order is the last commit's, then the
	// busier stream, then the name.
	slices.SortStableFunc(res, func(a, b streamStat) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Records, a.Records); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return res, nil
}

// rateCheckpoints returns the committed checkpoints (ids, sorted) whose
// files make the per-stream rates, and the seconds they span: those of the
// last rateWindow or more of barriers, the oldest barrier bounding the
// window (its own files came before it).
func rateCheckpoints(cs []recovery.Checkpoint) ([]uint64, float64) {
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
	if span <= 0 {
		return nil, 0
	}
	if n := len(ids); n > 0 && cs[len(cs)-1].StartedAt.Equal(first) && ids[n-1] == cs[len(cs)-1].ID {
		ids = ids[:n-1]
	}
	slices.Sort(ids)
	return ids, span
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
	if after != "" && !validStream(after) {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "after is not a stream name.")
		return
	}
	rows, more, err := listStreams(r.Context(), u.files, u.manifests, after, streamsPageSize)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	d := streamsData{Rows: rows, Cap: streamCountCap, First: after == ""}
	if more {
		d.Next = "/ui/streams?after=" + url.QueryEscape(rows[len(rows)-1].Name)
	}
	u.render(w, r, http.StatusOK, "streams.html", &view{Title: "Streams", Nav: "overview", Sess: s, Data: d})
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
	if name+"/" == nodesDir || strings.HasPrefix(name, nodesDir) {
		u.fail(w, r, http.StatusNotFound, "No such file", "The destination holds no committed file at this path.")
		return
	}
	if dir {
		u.folder(w, r, s, name)
		return
	}
	rc, ent, err := u.files.Open(r.Context(), name)
	switch {
	case err == nil:
		defer rc.Close()
		u.file(w, r, s, ent, rc)
		return
	case errors.Is(err, context.Canceled):
		return
	case !errors.Is(err, committer.ErrNotFound):
		u.internal(w, r, err)
		return
	}
	isDir, err := hasDir(r.Context(), u.files, name)
	switch {
	case err != nil:
		u.internal(w, r, err)
	case isDir:
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
	Bytes    int64
	Records  int64 // -1 unknown
	Modified time.Time
	HasCkpt  bool
	Ckpt     uint64
	CkptURL  string
	Download string
}

type folderData struct {
	Path   string
	Crumbs []crumb
	Rows   []folderRow
	Filter string // names start with it
	Later  bool   // a page after the first
	Start  string // the first page, with the filter
	Next   string // the next page, "" on the last
}

// maxCursor bounds ?after= and ?q= of a folder page.
const maxCursor = 4096

// folderURL returns folder base's address with a filter and a cursor.
func folderURL(base, filter, after string) string {
	v := url.Values{}
	if after != "" {
		v.Set("after", after)
	}
	if filter != "" {
		v.Set("q", filter)
	}
	if len(v) == 0 {
		return base
	}
	return base + "?" + v.Encode()
}

// folder serves one page of folder name: up to PageSize rows in name
// order after the cursor ?after= (the last row of the previous page),
// those whose names start with ?q=.
func (u *ui) folder(w http.ResponseWriter, r *http.Request, s *session, name string) {
	q := r.URL.Query()
	after, filter := q.Get("after"), strings.TrimSpace(q.Get("q"))
	// A cursor is a row's name, a folder's with '/' appended.
	if len(after) > maxCursor || len(filter) > maxCursor || !cleanChars(strings.TrimSuffix(after, "/")) || !cleanChars(filter) {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "after and q are names in this folder.")
		return
	}
	prefix := ""
	if name != "" {
		prefix = name + "/"
	}
	rows, more, err := listDir(r.Context(), u.files, prefix, filter, after, u.pageSize)
	if err != nil {
		u.internal(w, r, err)
		return
	}
	if len(rows) == 0 && name != "" && after == "" && filter == "" {
		u.fail(w, r, http.StatusNotFound, "No such folder", "The destination holds no committed file under this path.")
		return
	}
	base := browseURL(name, true)
	d := folderData{Path: name, Crumbs: crumbs(name, true), Filter: filter, Later: after != "", Start: folderURL(base, filter, "")}
	if more {
		d.Next = folderURL(base, filter, rows[len(rows)-1].cursor())
	}
	for _, e := range rows {
		full := prefix + e.Name
		row := folderRow{Name: e.Name, URL: browseURL(full, e.Dir), Dir: e.Dir, Bytes: e.Bytes, Records: -1, Modified: e.Modified}
		if !e.Dir {
			if node, id, ok := parsePart(full); ok && !strings.HasPrefix(full, manifestDir) {
				row.HasCkpt, row.Ckpt = true, id
				if u.node == "" || node == u.node {
					row.CkptURL = "/ui/checkpoints/" + strconv.FormatUint(id, 10)
				}
				if n, ok := u.manifests.records(r.Context(), full); ok {
					row.Records = n
				}
			} else if m := manifestName.FindStringSubmatch(full); m != nil {
				id, _ := strconv.ParseUint(m[2], 10, 64)
				row.HasCkpt, row.Ckpt = true, id
				if u.node == "" || m[1] == u.node {
					row.CkptURL = "/ui/checkpoints/" + strconv.FormatUint(id, 10)
				}
			}
			row.Download = u.download + escapePath(full)
		}
		d.Rows = append(d.Rows, row)
	}
	title := "Files"
	if name != "" {
		title = name + "/"
	}
	u.render(w, r, http.StatusOK, "folder.html", &view{Title: title, Nav: "files", Sess: s, Data: d})
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

func (u *ui) file(w http.ResponseWriter, r *http.Request, s *session, ent committer.Entry, rc io.Reader) {
	d := fileData{Path: ent.Path, Name: path.Base(ent.Path), Crumbs: crumbs(ent.Path, false), Bytes: ent.Bytes,
		Modified: ent.Modified, Records: -1, Download: u.download + escapePath(ent.Path)}
	if m := manifestName.FindStringSubmatch(ent.Path); m != nil {
		d.IsManifest, d.HasCkpt, d.Node = true, true, m[1]
		d.Ckpt, _ = strconv.ParseUint(m[2], 10, 64)
	} else if node, id, ok := parsePart(ent.Path); ok && !strings.HasPrefix(ent.Path, manifestDir) {
		d.HasCkpt, d.Node, d.Ckpt = true, node, id
	}
	if dir := path.Dir(ent.Path); dir != "." && !d.IsManifest {
		d.Stream, d.Partition, _ = strings.Cut(dir, "/")
		d.StreamURL = browseURL(d.Stream, true)
	}
	if d.HasCkpt && (u.node == "" || d.Node == u.node) {
		d.CkptURL = "/ui/checkpoints/" + strconv.FormatUint(d.Ckpt, 10)
	}
	if d.HasCkpt && !d.IsManifest {
		d.ManifestPath = recovery.ManifestPath(d.Node, d.Ckpt)
		m, err := u.manifests.get(r.Context(), d.ManifestPath)
		if err != nil {
			u.log.Warn("read manifest", "path", d.ManifestPath, "op", "file page", "err", err)
		}
		if m != nil {
			d.ManifestURL = browseURL(d.ManifestPath, false)
			d.CommittedAt = m.CommittedAt
			if mf := m.Files[ent.Path]; mf != nil {
				d.InManifest, d.CRC32C, d.Records = true, mf.CRC32C, mf.Records
				d.Producers = producerRanges(mf.Producers)
			}
		}
	}
	var err error
	d.Preview, err = readPreview(r.Context(), rc, ent.Path)
	if r.Context().Err() != nil {
		return // the client is gone; nobody reads the page
	}
	if err != nil {
		u.log.Warn("read preview", "path", ent.Path, "op", "file page", "err", err)
		d.PreviewErr = "The file could not be read; the server log says why."
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
	Newest    string // the first page's URL, on a later page
	Older     string // the next page's URL, "" on the last
}

func (u *ui) checkpoints(w http.ResponseWriter, r *http.Request, s *session) {
	st := u.eng.Status()
	q := r.URL.Query()
	limit := chartCheckpoints
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		limit = min(n, maxCheckpoints)
	}
	var before uint64
	if v := q.Get("before"); v != "" {
		var err error
		if before, err = strconv.ParseUint(v, 10, 64); err != nil || before == 0 {
			u.fail(w, r, http.StatusBadRequest, "Bad cursor", "before is a checkpoint id.")
			return
		}
	}
	var cs []recovery.Checkpoint
	var err error
	if before > 0 {
		cs, err = u.store.ListBefore(before, limit+1, false)
	} else {
		cs, err = u.store.List(limit+1, false)
	}
	if err != nil {
		u.internal(w, r, err)
		return
	}
	d := checkpointsData{Limit: limit, Open: openRow(st), HasOpen: st.Ready && before == 0}
	page := func(before uint64) string {
		v := url.Values{}
		if before > 0 {
			v.Set("before", strconv.FormatUint(before, 10))
		}
		if limit != chartCheckpoints {
			v.Set("limit", strconv.Itoa(limit))
		}
		if len(v) == 0 {
			return "/ui/checkpoints"
		}
		return "/ui/checkpoints?" + v.Encode()
	}
	if len(cs) > limit {
		cs = cs[:limit]
		d.Older = page(cs[len(cs)-1].ID)
	}
	if before > 0 {
		d.Newest = page(0)
	}
	ran, _ := strconv.ParseUint(q.Get("ran"), 10, 64)
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
		} else if errors.Is(err, recovery.ErrNotFound) && q.Get("empty") == "1" {
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
	committed := c.State == recovery.Committed
	var files []ckptFile
	manifestNode := ""
	switch {
	case len(c.Files) > 0:
		d.FilesN = len(c.Files)
		for _, f := range c.Files[min(from, len(c.Files)):min(from+ckptFilesPage, len(c.Files))] {
			cf := ckptFile{Path: f.Final, Stream: f.Stream, Bytes: f.Bytes, Records: f.Records, CRC32C: f.CRC32C}
			if committed {
				cf.URL = browseURL(f.Final, false)
			}
			cf.Producers = producerRanges(f.Producers)
			files = append(files, cf)
		}
		if node, _, ok := parsePart(c.Files[0].Final); ok {
			manifestNode = node
		}
	case d.Row.Files > 0 && committed && u.node != "":
		// Details pruned: the files are in the checkpoint's manifest.
		d.Pruned, manifestNode = true, u.node
		m, err := u.manifests.get(r.Context(), recovery.ManifestPath(u.node, id))
		if err != nil {
			u.log.Warn("read manifest", "op", "checkpoint page", "checkpoint", id, "err", err)
		}
		if m != nil {
			d.FilesN = len(m.Paths)
			for _, p := range m.Paths[min(from, len(m.Paths)):min(from+ckptFilesPage, len(m.Paths))] {
				f := m.Files[p]
				files = append(files, ckptFile{Path: p, URL: browseURL(p, false), Stream: f.Stream, Bytes: f.Bytes,
					Records: f.Records, CRC32C: f.CRC32C, Producers: producerRanges(f.Producers)})
			}
		}
	}
	d.Files = files
	if len(files) > 0 {
		d.From, d.To = from+1, from+len(files)
	}
	pageURL := func(from int) string {
		u := "/ui/checkpoints/" + strconv.FormatUint(id, 10)
		if from > 0 {
			u += "?from=" + strconv.Itoa(from)
		}
		return u
	}
	if from > 0 {
		d.FilesPrev = pageURL(max(0, min(from, d.FilesN)-ckptFilesPage))
	}
	if from+ckptFilesPage < d.FilesN {
		d.FilesNext = pageURL(from + ckptFilesPage)
	}
	if manifestNode != "" && committed {
		mp := recovery.ManifestPath(manifestNode, id)
		if m, err := u.manifests.get(r.Context(), mp); err == nil && m != nil {
			d.Manifest = browseURL(mp, false)
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
	d.SeqsN = len(d.Seqs)
	d.Seqs = d.Seqs[:min(len(d.Seqs), maxSeqRows)]
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
