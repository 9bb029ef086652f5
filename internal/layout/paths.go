package layout

// This file owns what a destination path is made of: the one traversal
// guard for paths a request names (the API's downloads and listings, the
// UI's file browser), and what a path's name tells (ParsePath).

import (
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// MaxPath bounds the length of a destination path (or a request path
// naming one) that a reader accepts.
const MaxPath = 4096

// CleanSegment reports whether s may be one segment of a destination
// path: not empty, ".", or "..", and without '/', '\\' or a control byte.
func CleanSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/") && CleanChars(s)
}

// CleanChars reports whether s holds no backslash and no control byte:
// what a path or a cursor naming one may hold.
func CleanChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// CleanPath reports whether name is a clean relative destination path:
// valid UTF-8 of at most MaxPath bytes, each '/'-separated segment a
// CleanSegment, so it cannot leave the destination (nor be read as "..",
// as an overlong UTF-8 form "%c0%ae%c0%ae" might be by another reader).
func CleanPath(name string) bool {
	if len(name) > MaxPath || !utf8.ValidString(name) {
		return false
	}
	for seg := range strings.SplitSeq(name, "/") {
		if !CleanSegment(seg) {
			return false
		}
	}
	return true
}

// CleanPrefix reports whether p is a listing prefix that cannot leave the
// destination: a CleanPath whose last segment may be partial or empty.
func CleanPrefix(p string) bool {
	if len(p) > MaxPath {
		return false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if !(seg == "" && i == len(segs)-1) && !CleanSegment(seg) {
			return false
		}
	}
	return true
}

// SplitEscaped splits an escaped '/'-separated path ("a/b%20c/") into its
// unescaped segments; a trailing '/' leaves a last empty segment ("" is
// one empty segment). It refuses a path longer than MaxPath and one whose
// segments (but an empty last one) are not CleanSegment once unescaped:
// so an escaped '/' (%2F) or ".." (%2e%2e) is refused too.
func SplitEscaped(p string) ([]string, bool) {
	if len(p) > MaxPath {
		return nil, false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		s, err := url.PathUnescape(seg)
		if err != nil {
			return nil, false
		}
		if !(s == "" && i == len(segs)-1) && !CleanSegment(s) {
			return nil, false
		}
		segs[i] = s
	}
	return segs, true
}

// Kind tells what a destination path is.
type Kind int

// Kinds of destination paths.
const (
	OtherPath    Kind = iota // a stray, a lease, a staging object
	PartPath                 // a committed data file, part-<node>-<checkpoint>-<index>.<ext>
	ManifestPath             // _manifests/<node>/<checkpoint>.json
)

// PathName is what a destination path's name tells.
type PathName struct {
	Kind       Kind
	Node       string
	Checkpoint uint64
}

// ParsePath tells what p is, through this package's parsers: a manifest
// (under eosink's own folders) or a part file (under a stream's).
func ParsePath(p string) PathName {
	if strings.HasPrefix(p, "_") {
		if node, id, ok := ParseManifestName(p); ok {
			return PathName{Kind: ManifestPath, Node: node, Checkpoint: id}
		}
		return PathName{}
	}
	if node, id, _, _, ok := ParsePartName(path.Base(p)); ok {
		return PathName{Kind: PartPath, Node: node, Checkpoint: id}
	}
	return PathName{}
}
