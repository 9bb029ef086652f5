package catalog

import (
	"context"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
)

// File is one committed file of a listing.
type File struct {
	committer.Entry
	Name       layout.PathName // what its name tells (kind, node, checkpoint)
	Records    int64           // from its manifest, when HasRecords
	HasRecords bool
}

// FileQuery selects a page of files.
type FileQuery struct {
	Prefix string // a path prefix; eosink's own folders ("_...") only when it starts with '_'
	After  string // the previous page's last path
	Limit  int    // files at most (at least 1)
	// Node keeps only the files (parts and manifests) of this node; ""
	// keeps every file.
	Node string
}

// Files returns up to q.Limit committed files under q.Prefix sorting after
// q.After, in path order, and the next page's cursor ("" on the last).
// Data files carry their record count from their manifest (any node's).
func (c *Catalog) Files(ctx context.Context, q FileQuery) ([]File, string, error) {
	own := strings.HasPrefix(q.Prefix, "_") // eosink's folders, only when asked for
	limit := max(q.Limit, 1)
	out := []File{}
	more := false
	err := c.Walk(ctx, q.Prefix, q.After, limit+1, func(e committer.Entry) (string, bool) {
		if !own && strings.HasPrefix(e.Path, "_") {
			dir, _, _ := strings.Cut(e.Path, "/")
			return AfterPast(dir + "/"), false
		}
		name := layout.ParsePath(e.Path)
		if q.Node != "" && name.Node != q.Node {
			return "", false
		}
		if len(out) == limit {
			more = true
			return "", true
		}
		f := File{Entry: e, Name: name}
		if name.Kind == layout.PartPath {
			f.Records, f.HasRecords = c.Records(ctx, e.Path)
		}
		out = append(out, f)
		return "", false
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if more {
		next = out[len(out)-1].Path
	}
	return out, next, nil
}

// DirEntry is one row of a folder: a sub-folder or a file.
type DirEntry struct {
	Name     string // without the folder's prefix; no trailing '/'
	Dir      bool
	Bytes    int64 // files only
	Modified time.Time
	Path     string // the full path of a file
}

// Cursor is the row's position for the next page's after: a file's name,
// or a folder's name with '/' appended.
func (e DirEntry) Cursor() string {
	if e.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// skipAfter is how many files of one sub-folder a folder page or the
// streams page reads before it jumps past the rest of that sub-folder
// with a new listing call: a folder of a few files costs no extra call, a
// large one costs one call instead of its files.
const skipAfter = 64

// DirQuery selects a page of a folder.
type DirQuery struct {
	Prefix     string // the folder: "" or ending in '/'
	NamePrefix string // rows whose names start with it
	After      string // a row's Cursor; "" for the first page
	Limit      int
	// Node keeps, of the files, only the parts and manifests of this node
	// ("" keeps all); sub-folders are shown whatever they hold.
	Node string
}

// Dir returns up to q.Limit rows of a folder, in path order, and whether
// more follow. Sub-folders come as one row each, however many files they
// hold; their contents are not read beyond skipAfter files. Node leases
// are not data and never listed.
func (c *Catalog) Dir(ctx context.Context, q DirQuery) (rows []DirEntry, more bool, err error) {
	start := ""
	switch {
	case strings.HasSuffix(q.After, "/"):
		start = AfterPast(q.Prefix + q.After)
	case q.After != "":
		start = q.Prefix + q.After
	}
	n := max(q.Limit, 1)
	seen := 0 // files read of the last sub-folder
	err = c.Walk(ctx, q.Prefix+q.NamePrefix, start, n+1, func(e committer.Entry) (string, bool) {
		if strings.HasPrefix(e.Path, layout.LeaseDir+"/") {
			return AfterPast(layout.LeaseDir + "/"), false
		}
		name, _, sub := strings.Cut(e.Path[len(q.Prefix):], "/")
		if sub {
			if k := len(rows); k > 0 && rows[k-1].Dir && rows[k-1].Name == name {
				if seen++; seen >= skipAfter {
					return AfterPast(q.Prefix + name + "/"), false
				}
				return "", false
			}
		} else if q.Node != "" && layout.ParsePath(e.Path).Node != q.Node {
			return "", false
		}
		if len(rows) == n {
			more = true
			return "", true
		}
		if sub {
			rows = append(rows, DirEntry{Name: name, Dir: true})
			seen = 1
			return "", false
		}
		rows = append(rows, DirEntry{Name: name, Bytes: e.Bytes, Modified: e.Modified, Path: e.Path})
		return "", false
	})
	return rows, more, err
}

// StreamStat is one stream with its committed files.
type StreamStat struct {
	Name     string
	Files    int
	Bytes    int64
	Records  int64
	Unknown  int  // files whose records are unknown
	Capped   bool // the stream holds more files than were counted
	Last     time.Time
	RatePerS float64 // records per second recently (Active only)
	HasRate  bool
}

// Streams returns up to limit streams (top-level folders with a stream's
// name) after the stream after, by name, with their files counted (up to
// countCap files each when countCap > 0), and whether more follow. A page
// costs the files of its streams, not those of every stream.
func (c *Catalog) Streams(ctx context.Context, after string, limit, countCap int) (out []StreamStat, more bool, err error) {
	start := ""
	if after != "" {
		start = AfterPast(after + "/")
	}
	limit = max(limit, 1)
	err = c.Walk(ctx, "", start, limit+1, func(e committer.Entry) (string, bool) {
		name, _, ok := strings.Cut(e.Path, "/")
		if !ok {
			return "", false // nothing eosink wrote
		}
		if !layout.Stream(name) {
			return AfterPast(name + "/"), false // manifests, leases, strays
		}
		k := len(out)
		if k == 0 || out[k-1].Name != name {
			if k == limit {
				more = true
				return "", true
			}
			out = append(out, StreamStat{Name: name})
			k++
		}
		st := &out[k-1]
		if countCap > 0 && st.Files == countCap {
			st.Capped = true
			return AfterPast(name + "/"), false
		}
		if layout.IsTableMetadata(e.Path) {
			return "", false // a table's metadata, not a committed file
		}
		c.count(ctx, st, e)
		return "", false
	})
	return out, more, err
}

// count adds the committed file e to st.
func (c *Catalog) count(ctx context.Context, st *StreamStat, e committer.Entry) {
	st.Files++
	st.Bytes += e.Bytes
	if e.Modified.After(st.Last) {
		st.Last = e.Modified
	}
	if rec, ok := c.Records(ctx, e.Path); ok {
		st.Records += rec
	} else {
		st.Unknown++
	}
}

// Stream returns one stream's committed files counted, as Streams does for
// a page of streams; a stream with no file has Files 0.
func (c *Catalog) Stream(ctx context.Context, name string) (StreamStat, error) {
	st := StreamStat{Name: name}
	if !layout.Stream(name) {
		return st, nil
	}
	err := c.Walk(ctx, name+"/", "", ListChunk, func(e committer.Entry) (string, bool) {
		if layout.ParsePath(e.Path).Kind != layout.PartPath {
			return "", false
		}
		c.count(ctx, &st, e)
		return "", false
	})
	return st, err
}
