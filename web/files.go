package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
)

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
	if name+"/" == layout.LeaseDir+"/" || strings.HasPrefix(name, layout.LeaseDir+"/") {
		u.fail(w, r, http.StatusNotFound, "No such file", "The destination holds no committed file at this path.")
		return
	}
	if dir {
		u.folder(w, r, s, name)
		return
	}
	rc, ent, err := u.cat.Open(r.Context(), name)
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
	isDir, err := u.cat.HasDir(r.Context(), name)
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
	Node     string
	CkptURL  string
	Download string
}

type folderData struct {
	Path     string
	Crumbs   []crumb
	Rows     []folderRow
	Filter   string // names start with it
	Node     string // files of this node only ("" all)
	AllNodes string // this page without the node filter
	Later    bool   // a page after the first
	Start    string // the first page, with the filter
	Next     string // the next page, "" on the last
	// Table is the stream's Iceberg table (a table stream's folder,
	// first page), nil otherwise.
	Table *catalog.TableView
}

// tableSnapshots is how many snapshots a table stream's folder shows.
const tableSnapshots = 20

// maxCursor bounds ?after= and ?q= of a folder page.
const maxCursor = 4096

// folderURL returns folder base's address with a filter, a node and a
// cursor.
func folderURL(base, filter, node, after string) string {
	v := url.Values{}
	if after != "" {
		v.Set("after", after)
	}
	if node != "" {
		v.Set("node", node)
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
// those whose names start with ?q=, and of the files only node ?node='s.
func (u *ui) folder(w http.ResponseWriter, r *http.Request, s *session, name string) {
	q := r.URL.Query()
	after, filter, node := q.Get("after"), strings.TrimSpace(q.Get("q")), q.Get("node")
	// A cursor is a row's name, a folder's with '/' appended.
	if len(after) > maxCursor || len(filter) > maxCursor || !cleanChars(strings.TrimSuffix(after, "/")) || !cleanChars(filter) ||
		len(node) > maxCursor || !cleanChars(node) || strings.Contains(node, "/") {
		u.fail(w, r, http.StatusBadRequest, "Bad cursor", "after and q are names in this folder, node a node id.")
		return
	}
	prefix := ""
	if name != "" {
		prefix = name + "/"
	}
	rows, more, err := u.cat.Dir(r.Context(), catalog.DirQuery{Prefix: prefix, NamePrefix: filter, After: after, Limit: u.pageSize, Node: node})
	if err != nil {
		u.internal(w, r, err)
		return
	}
	if len(rows) == 0 && name != "" && after == "" && filter == "" && node == "" {
		u.fail(w, r, http.StatusNotFound, "No such folder", "The destination holds no committed file under this path.")
		return
	}
	base := browseURL(name, true)
	d := folderData{Path: name, Crumbs: crumbs(name, true), Filter: filter, Node: node, Later: after != "",
		Start: folderURL(base, filter, node, "")}
	if node != "" {
		d.AllNodes = folderURL(base, filter, "", "")
	}
	if more {
		d.Next = folderURL(base, filter, node, rows[len(rows)-1].Cursor())
	}
	for _, e := range rows {
		d.Rows = append(d.Rows, u.folderRow(r.Context(), prefix, node, e))
	}
	if layout.Stream(name) && after == "" {
		tv, err := u.cat.Table(r.Context(), name, tableSnapshots)
		if err != nil {
			u.log.Warn("read table metadata", "stream", name, "err", err) // the files are still worth showing
		}
		d.Table = tv
	}
	title := "Files"
	if name != "" {
		title = name + "/"
	}
	u.render(w, r, http.StatusOK, "folder.html", &view{Title: title, Nav: "files", Sess: s, Data: d})
}

// folderRow builds the row of e, in folder prefix; a sub-folder's link
// keeps the node filter.
func (u *ui) folderRow(ctx context.Context, prefix, node string, e catalog.DirEntry) folderRow {
	full := prefix + e.Name
	row := folderRow{Name: e.Name, URL: browseURL(full, e.Dir), Dir: e.Dir, Bytes: e.Bytes, Records: -1, Modified: e.Modified}
	if e.Dir {
		if node != "" {
			row.URL = folderURL(row.URL, "", node, "")
		}
		return row
	}
	if n := layout.ParsePath(full); n.Kind != layout.OtherPath {
		row.HasCkpt, row.Ckpt, row.Node = true, n.Checkpoint, n.Node
		row.CkptURL = u.ckptURL(n.Node, n.Checkpoint)
		if n.Kind == layout.PartPath {
			if rec, ok := u.cat.Records(ctx, full); ok {
				row.Records = rec
			}
		}
	}
	row.Download = u.download + escapePath(full)
	return row
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
	if n := layout.ParsePath(ent.Path); n.Kind != layout.OtherPath {
		d.IsManifest, d.HasCkpt, d.Node, d.Ckpt = n.Kind == layout.ManifestPath, true, n.Node, n.Checkpoint
	}
	if dir := path.Dir(ent.Path); dir != "." && !d.IsManifest {
		d.Stream, d.Partition, _ = strings.Cut(dir, "/")
		d.StreamURL = browseURL(d.Stream, true)
	}
	if d.HasCkpt {
		d.CkptURL = u.ckptURL(d.Node, d.Ckpt)
	}
	if d.HasCkpt && !d.IsManifest {
		d.ManifestPath = layout.ManifestName(d.Node, d.Ckpt)
		m, err := u.cat.Manifest(r.Context(), d.Node, d.Ckpt)
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
