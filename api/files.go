package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/recovery"
	"github.com/go-chi/chi/v5"
)

// manifestDir is the destination folder of manifests.
const manifestDir = "_manifests/"

var (
	// partName matches part-<node>-<checkpoint:020d>-<index:04d>.<ext>; the
	// node may hold '-', so it is matched greedily up to the last two
	// numbers.
	partName = regexp.MustCompile(`^part-(.+)-([0-9]{20})-([0-9]{4,})\.[A-Za-z0-9.]+$`)
	// manifestName matches _manifests/<node>/<checkpoint:020d>.json.
	manifestName = regexp.MustCompile(`^_manifests/[^/]+/([0-9]{20})\.json$`)
)

// parsePart returns the node and checkpoint in a data file's name.
func parsePart(p string) (node string, ckpt uint64, ok bool) {
	m := partName.FindStringSubmatch(path.Base(p))
	if m == nil {
		return "", 0, false
	}
	id, err := strconv.ParseUint(m[2], 10, 64)
	return m[1], id, err == nil
}

// manifestCheckpoint returns the checkpoint of a manifest's name.
func manifestCheckpoint(p string) (uint64, bool) {
	m := manifestName.FindStringSubmatch(p)
	if m == nil {
		return 0, false
	}
	id, err := strconv.ParseUint(m[1], 10, 64)
	return id, err == nil
}

// manifestCache holds, per manifest, the record count of each file it
// names. Manifests are immutable, so entries never go stale; absent
// manifests are not cached. When full, an arbitrary entry is evicted.
type manifestCache struct {
	files committer.Reader
	max   int

	mu sync.Mutex
	m  map[string]map[string]int64 // manifest path -> file path -> records
}

func newManifestCache(files committer.Reader, max int) *manifestCache {
	return &manifestCache{files: files, max: max, m: map[string]map[string]int64{}}
}

// records returns the record counts of manifest name, nil if it does not
// exist (yet).
func (c *manifestCache) records(ctx context.Context, name string) (map[string]int64, error) {
	c.mu.Lock()
	m, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	doc, err := recovery.ReadManifest(ctx, c.files, name)
	if errors.Is(err, committer.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m = make(map[string]int64, len(doc.Files))
	for _, f := range doc.Files {
		m[f.Path] = f.Records
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[name] = m
	c.mu.Unlock()
	return m, nil
}

// fileRecords returns a data file's record count from its manifest.
func (s *Server) fileRecords(ctx context.Context, p string) (int64, bool) {
	node, ckpt, ok := parsePart(p)
	if !ok {
		return 0, false
	}
	name := recovery.ManifestPath(node, ckpt)
	m, err := s.manifests.records(ctx, name)
	if err != nil {
		// A listing still answers; the count is absent.
		s.log.Warn("records unknown", "path", p, "op", "read manifest", "err", err)
		return 0, false
	}
	n, ok := m[p]
	return n, ok
}

// validPrefix reports whether a listing prefix is a relative path that
// cannot leave the destination. Its last segment may be partial or empty.
func validPrefix(p string) bool {
	if len(p) > 4096 || strings.HasPrefix(p, "/") || !cleanChars(p) {
		return false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if seg == "." || seg == ".." || (seg == "" && i < len(segs)-1) {
			return false
		}
	}
	return true
}

// cleanChars reports whether s holds no backslash and no control byte.
func cleanChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// filePath returns the destination-relative name a download asks for, or
// false if it is not a clean relative path: no empty, "." or ".." segment,
// no escaped '/', no backslash or control byte.
func filePath(r *http.Request) (string, bool) {
	raw := chi.URLParam(r, "*")
	escaped := r.URL.RawPath != "" // chi matched on the raw path: unescape each segment
	if raw == "" {
		return "", false
	}
	segs := strings.Split(raw, "/")
	for i, seg := range segs {
		if escaped {
			u, err := url.PathUnescape(seg)
			if err != nil {
				return "", false
			}
			seg = u
		}
		if seg == "" || seg == "." || seg == ".." || strings.Contains(seg, "/") || !cleanChars(seg) {
			return "", false
		}
		segs[i] = seg
	}
	name := strings.Join(segs, "/")
	if !fs.ValidPath(name) {
		return "", false
	}
	return name, true
}

// contentType returns the media type a file is served with.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".ndjson":
		return "application/x-ndjson"
	case ".txt":
		return "text/plain; charset=utf-8"
	case ".json":
		return "application/json"
	case ".gz":
		return "application/gzip"
	case ".zst":
		return "application/zstd"
	case ".parquet":
		return "application/vnd.apache.parquet"
	}
	return "application/octet-stream"
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	name, ok := filePath(r)
	if !ok {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: "invalid_path", Message: "the path must be a clean relative path inside the destination"})
		return
	}
	rc, ent, err := s.files.Open(r.Context(), name)
	if errors.Is(err, committer.ErrNotFound) {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: "not_found", Message: fmt.Sprintf("no committed file %q", name)})
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", contentType(name))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A committed file never changes (I7) and its name is never reused
	// (I8); private: with tokens on, shared caches must not keep it.
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeContent(newStallWriter(&rangeErrorWriter{ResponseWriter: w}, s.stall), r, path.Base(name), ent.Modified, rc)
}

// rangeErrorWriter turns the text answer http.ServeContent gives a Range it
// cannot satisfy into the JSON error every other answer has, keeping its
// Content-Range.
type rangeErrorWriter struct {
	http.ResponseWriter
	swallow bool // the text body of the 416 is dropped
}

func (w *rangeErrorWriter) WriteHeader(code int) {
	if code != http.StatusRequestedRangeNotSatisfiable {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.swallow = true
	writeError(w.ResponseWriter, code, &ErrorResponse{Error: "range_not_satisfiable", Message: "the range is outside the file; Content-Range holds its size"})
}

func (w *rangeErrorWriter) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *rangeErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stallWriter replaces the server's WriteTimeout, which would cut any
// download longer than it, by a stall timeout: before each write the
// connection's write deadline moves to d from now, so a download is cut
// only when the client takes no bytes for d. It hides io.ReaderFrom on
// purpose: sendfile would write the whole file under one deadline.
type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func newStallWriter(w http.ResponseWriter, d time.Duration) *stallWriter {
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
	sw.extend()
	return sw
}

// extend moves the write deadline; a writer without deadlines (a test
// recorder) has nothing to move.
func (w *stallWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *stallWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if !validPrefix(prefix) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: "invalid_prefix", Message: fmt.Sprintf("prefix %q: want a relative path without \".\" or \"..\" segments", prefix)})
		return
	}
	after := q.Get("after")
	if len(after) > 4096 || !cleanChars(after) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: "invalid_path", Message: "after: want the next cursor of the previous page"})
		return
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	// Manifests are listed only when asked for: no stream starts with '_'.
	manifests := strings.HasPrefix(prefix, "_")
	out := FileList{Files: []File{}}
	more := false
	err := s.walkFiles(r.Context(), prefix, after, limit+1, func(e committer.Entry) (string, bool) {
		if !manifests && strings.HasPrefix(e.Path, manifestDir) {
			return afterPast(manifestDir), false
		}
		if !manifests && strings.HasPrefix(e.Path, "_nodes/") {
			return afterPast("_nodes/"), false // node leases, like manifests, only when asked for
		}
		if len(out.Files) == limit {
			more = true
			return "", true
		}
		f := File{Path: e.Path, Bytes: e.Bytes, Modified: e.Modified}
		if strings.HasPrefix(e.Path, manifestDir) {
			if id, ok := manifestCheckpoint(e.Path); ok {
				f.Checkpoint = &id
			}
		} else if _, id, ok := parsePart(e.Path); ok {
			f.Checkpoint = &id
			if n, ok := s.fileRecords(r.Context(), e.Path); ok {
				f.Records = &n
			}
		}
		out.Files = append(out.Files, f)
		return "", false
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if more {
		out.Next = out.Files[len(out.Files)-1].Path
	}
	writeJSON(w, http.StatusOK, out)
}

// listStreams pages the destination's top-level folders that are stream
// names, in the order of their files' paths (by name with "/" appended),
// counting each stream's files whole: a page costs the files of its
// streams, not those of every stream.
func (s *Server) listStreams(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	if after != "" && !validStream(after) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: "invalid_stream", Message: fmt.Sprintf("after %q: want the next cursor of the previous page, a stream name", after)})
		return
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	start := ""
	if after != "" {
		start = afterPast(after + "/")
	}
	out := StreamList{Streams: []Stream{}}
	more := false
	err := s.walkFiles(r.Context(), "", start, listChunk, func(e committer.Entry) (string, bool) {
		name, _, ok := strings.Cut(e.Path, "/")
		if !ok {
			return "", false // nothing eosink wrote
		}
		if !validStream(name) {
			return afterPast(name + "/"), false // manifests, leases, strays
		}
		n := len(out.Streams)
		if n == 0 || out.Streams[n-1].Name != name {
			if n == limit {
				more = true
				return "", true
			}
			out.Streams = append(out.Streams, Stream{Name: name})
			n++
		}
		st := &out.Streams[n-1]
		st.Files++
		st.Bytes += e.Bytes
		if rec, ok := s.fileRecords(r.Context(), e.Path); ok {
			st.Records += rec
		}
		return "", false
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if more {
		out.Next = out.Streams[len(out.Streams)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}
