package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageNames are the templates that render a whole page with layout.html.
var pageNames = []string{"overview.html", "streams.html", "folder.html", "file.html", "checkpoints.html", "checkpoint.html",
	"producers.html", "nodes.html", "login.html", "error.html", "streamconfig.html"}

// parsePages parses each page with the layout and the shared partials.
func parsePages() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+name)
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// asset is one embedded static file.
type asset struct {
	body    []byte
	ctype   string
	version string // a digest of body, for cache busting
}

// loadStatic reads the embedded static files.
func loadStatic() (map[string]asset, error) {
	out := map[string]asset{}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // the system's mime table may lack these
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		out[path.Base(p)] = asset{body: b, ctype: ctype, version: hex.EncodeToString(sum[:6])}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load static files: %w", err)
	}
	return out, nil
}

// assetURL is a static file's address with its version, so browsers may
// cache it for long.
func (u *ui) assetURL(name string) string {
	return "/ui/static/" + name + "?v=" + u.static[name].version
}

func (u *ui) serveStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := u.static[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	if r.URL.Query().Get("v") == a.version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	h.Set("ETag", `"`+a.version+`"`)
	if r.Header.Get("If-None-Match") == `"`+a.version+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(a.body)
}

// funcs are the template helpers; every one returns plain text, which the
// template escapes.
var funcs = template.FuncMap{
	"bytes":   fmtBytes,
	"num":     fmtNum,
	"ms":      fmtMS,
	"time":    fmtTime,
	"iso":     isoTime,
	"rate":    fmtRate,
	"plural":  plural,
	"add":     func(a, b int) int { return a + b },
	"nonzero": func(t time.Time) bool { return !t.IsZero() },
}

// toInt64 takes the integer kinds the templates pass.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case uint64:
		return int64(min(n, math.MaxInt64))
	case int32:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

// fmtBytes formats a size in binary units: "0 B", "512 B", "1.5 KiB".
func fmtBytes(v any) string {
	n := toInt64(v)
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f := float64(n)
	i := -1
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f >= 100 {
		return strconv.FormatFloat(f, 'f', 0, 64) + " " + units[i]
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

// fmtNum formats an integer with thin thousands separators: "12,345".
func fmtNum(v any) string {
	n := toInt64(v)
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtMS formats a duration given in milliseconds.
func fmtMS(v any) string {
	ms := toInt64(v)
	switch {
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + " ms"
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 2, 64) + " s"
	default:
		d := time.Duration(ms) * time.Millisecond
		return d.Round(time.Second).String()
	}
}

// fmtTime formats an instant in UTC; the zero time is "—".
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// isoTime is an instant for a <time datetime>.
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// fmtRate formats a per-second rate with a unit: "1.2k records/s".
func fmtRate(v float64, unit string) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M " + unit + "/s"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k " + unit + "/s"
	case v >= 100:
		return fmtNum(int64(math.Round(v))) + " " + unit + "/s"
	default:
		return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit + "/s"
	}
}

// plural is "1 file", "2 files".
func plural(n any, one, many string) string {
	c := toInt64(n)
	if c == 1 {
		return fmtNum(c) + " " + one
	}
	return fmtNum(c) + " " + many
}
