package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/format"
	"github.com/eosink/eosink/internal/layout"
	"github.com/go-chi/chi/v5"
)

// filePath returns the destination-relative name a download asks for, or
// false if it is not a clean relative path (layout.CleanPath). chi matched
// on the raw path when the request had one: each segment is unescaped
// then, so an escaped '/' is refused, not split.
func filePath(r *http.Request) (string, bool) {
	raw := chi.URLParam(r, "*")
	if raw == "" {
		return "", false
	}
	if r.URL.RawPath == "" {
		return raw, layout.CleanPath(raw)
	}
	segs, ok := layout.SplitEscaped(raw)
	if !ok {
		return "", false
	}
	name := strings.Join(segs, "/")
	return name, layout.CleanPath(name)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	name, ok := filePath(r)
	if !ok {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidPath, Message: "the path must be a clean relative path inside the destination"})
		return
	}
	rc, ent, err := s.files.Open(r.Context(), name)
	if errors.Is(err, committer.ErrNotFound) {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: fmt.Sprintf("no committed file %q", name)})
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	defer rc.Close()
	if h := r.Header.Get("Range"); strings.Contains(h, ",") {
		ranges, ok := coalesceRanges(h, ent.Bytes)
		if !ok {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", ent.Bytes))
			writeError(w, http.StatusRequestedRangeNotSatisfiable, &ErrorResponse{Error: CodeRangeNotSatisfiable,
				Message: fmt.Sprintf("more than %d separate ranges; ask for fewer, or for the whole file", maxRanges)})
			return
		}
		if ranges != "" {
			r.Header.Set("Range", ranges)
		}
	}
	w.Header().Set("Content-Type", format.MediaType(name))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A committed file never changes (I7) and its name is never reused
	// (I8); private: with tokens on, shared caches must not keep it.
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeContent(newStallWriter(&rangeErrorWriter{ResponseWriter: w}, s.stall), r, path.Base(name), ent.Modified, rc)
}

// Multi-range answers: at most maxRanges parts, and ranges closer than
// rangeGap bytes are served as one (a part's own headers cost about that).
const (
	maxRanges = 16
	rangeGap  = 80
)

// byteRange is [start, end] of a file, end included.
type byteRange struct{ start, end int64 }

// coalesceRanges rewrites a Range header of several ranges for a file of
// size bytes: sorted, with overlapping and nearly adjacent ranges merged,
// so that an answer holds each byte once and a client cannot make one
// request read and send a file many times over (RFC 9110 14.2 lets a
// server coalesce). ok is false when more than maxRanges remain. A header
// it cannot parse, or with no range inside the file, is returned as ""
// for http.ServeContent to refuse as it does.
func coalesceRanges(h string, size int64) (string, bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found {
		return "", true
	}
	var rs []byteRange
	for f := range strings.SplitSeq(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		first, last, found := strings.Cut(f, "-")
		if !found {
			return "", true
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		var br byteRange
		if first == "" { // a suffix: the last n bytes
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return "", true
			}
			if n == 0 || size == 0 {
				continue
			}
			br = byteRange{max(0, size-n), size - 1}
		} else {
			a, err := strconv.ParseInt(first, 10, 64)
			if err != nil || a < 0 {
				return "", true
			}
			b := size - 1
			if last != "" {
				if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
					return "", true
				}
			}
			if a >= size {
				continue // outside the file: net/http skips it too
			}
			br = byteRange{a, min(b, size-1)}
		}
		rs = append(rs, br)
	}
	if len(rs) == 0 {
		return "", true
	}
	slices.SortFunc(rs, func(x, y byteRange) int { return cmp.Compare(x.start, y.start) })
	out := rs[:1]
	for _, br := range rs[1:] {
		if cur := &out[len(out)-1]; br.start <= cur.end+rangeGap {
			cur.end = max(cur.end, br.end)
			continue
		}
		out = append(out, br)
	}
	if len(out) > maxRanges {
		return "", false
	}
	parts := make([]string, len(out))
	for i, br := range out {
		parts[i] = strconv.FormatInt(br.start, 10) + "-" + strconv.FormatInt(br.end, 10)
	}
	return "bytes=" + strings.Join(parts, ","), true
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
	writeError(w.ResponseWriter, code, &ErrorResponse{Error: CodeRangeNotSatisfiable, Message: "the range is outside the file; Content-Range holds its size"})
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
	if !layout.CleanPrefix(prefix) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidPrefix, Message: fmt.Sprintf("prefix %q: want a relative path without \".\" or \"..\" segments", prefix)})
		return
	}
	after := q.Get("after")
	if len(after) > 4096 || !layout.CleanChars(after) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidPath, Message: "after: want the next cursor of the previous page"})
		return
	}
	node := q.Get("node")
	// Any id is looked for (one of no node matches nothing); the node-name
	// rule is internal/layout's, applied where nodes start.
	if len(node) > 255 || !layout.CleanChars(node) || strings.Contains(node, "/") {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidNode, Message: fmt.Sprintf("node %q: want a node id", node)})
		return
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	files, next, err := s.cat.Files(r.Context(), catalog.FileQuery{Prefix: prefix, After: after, Limit: limit, Node: node})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := FileList{Files: make([]File, 0, len(files)), Next: next}
	for _, f := range files {
		wf := File{Path: f.Path, Bytes: f.Bytes, Modified: f.Modified, Node: f.Name.Node}
		if f.Name.Kind != layout.OtherPath {
			id := f.Name.Checkpoint
			wf.Checkpoint = &id
		}
		if f.HasRecords {
			n := f.Records
			wf.Records = &n
		}
		out.Files = append(out.Files, wf)
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
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidStream, Message: fmt.Sprintf("after %q: want the next cursor of the previous page, a stream name", after)})
		return
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	stats, more, err := s.cat.Streams(r.Context(), after, limit, 0)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := StreamList{Streams: make([]Stream, 0, len(stats))}
	for _, st := range stats {
		out.Streams = append(out.Streams, Stream{Name: st.Name, Files: st.Files, Bytes: st.Bytes, Records: st.Records})
	}
	if more {
		out.Next = out.Streams[len(out.Streams)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}
