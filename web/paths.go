package web

import (
	"net/url"
	"strings"

	"github.com/eosink/eosink/internal/layout"
)

// splitEscaped splits an escaped URL path ("/ui/files/a/b%20c/") into its
// unescaped segments, the leading "/" dropped; a trailing "/" leaves a last
// empty segment. It refuses a path that is not clean (layout.SplitEscaped):
// an empty segment elsewhere ("//"), a "." or ".." segment (%2e%2e too), or
// a segment that unescapes to hold '/' (%2F), '\\', NUL or another control
// byte.
func splitEscaped(p string) ([]string, bool) {
	if p == "" || p[0] != '/' {
		return nil, false
	}
	return layout.SplitEscaped(p[1:])
}

// cleanChars reports whether s holds no '/', '\\' or control byte: a
// cursor or filter of one folder.
func cleanChars(s string) bool { return layout.CleanChars(s) && !strings.Contains(s, "/") }

// destPath returns the destination path that the URL path below /ui/files/
// names, and whether it names a folder (a trailing '/', or the root). It
// refuses anything that is not a clean relative path: see splitEscaped.
func destPath(escaped string) (name string, dir bool, ok bool) {
	rest, found := strings.CutPrefix(escaped, "/ui/files")
	if !found {
		return "", false, false
	}
	if rest == "" || rest == "/" {
		return "", true, true
	}
	segs, ok := splitEscaped(rest)
	if !ok {
		return "", false, false
	}
	if segs[len(segs)-1] == "" {
		dir = true
		segs = segs[:len(segs)-1]
	}
	name = strings.Join(segs, "/")
	if !layout.CleanPath(name) {
		return "", false, false
	}
	return name, dir, true
}

// escapePath escapes each segment of a slash-separated path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// browseURL is the UI address of a destination file, or of a folder when
// dir (the root for "").
func browseURL(p string, dir bool) string {
	if p == "" {
		return "/ui/files/"
	}
	if dir {
		return "/ui/files/" + escapePath(p) + "/"
	}
	return "/ui/files/" + escapePath(p)
}
