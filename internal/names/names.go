// Package names checks the names DESIGN.md's vocabulary defines: streams,
// producers and nodes. The API, the client and the command share these.
package names

import "strings"

// Stream reports whether s is a stream name: ^[a-z0-9][a-z0-9_.-]{0,127}$
// and never "..".
func Stream(s string) bool {
	if len(s) == 0 || len(s) > 128 || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Producer reports whether s is a producer id:
// ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$.
func Producer(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}
