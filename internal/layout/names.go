package layout

// This file checks the names the vocabulary defines (streams, producers,
// nodes, idempotency keys) and owns the destination's file names that
// carry a node id, each formatter beside its parser: part files,
// manifests and leases.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

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

// PartName returns the base name of a committed part file:
// part-<node>-<checkpoint:020d>-<index:04d>.<ext>. ParsePartName reads it.
func PartName(node string, checkpoint uint64, index int, ext string) string {
	return fmt.Sprintf("part-%s-%020d-%04d.%s", node, checkpoint, index, ext)
}

var partRE = regexp.MustCompile(`^part-(.+)-([0-9]{20})-([0-9]{4,9})\.([A-Za-z0-9][A-Za-z0-9.]*)$`)

// ParsePartName parses a base name made by PartName.
func ParsePartName(base string) (node string, checkpoint uint64, index int, ext string, ok bool) {
	m := partRE.FindStringSubmatch(base)
	if m == nil {
		return "", 0, 0, "", false
	}
	id, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return "", 0, 0, "", false
	}
	idx, err := strconv.Atoi(m[3])
	if err != nil {
		return "", 0, 0, "", false
	}
	return m[1], id, idx, m[4], true
}

// LeaseName returns the destination-relative name of a node's lease:
// _nodes/<node>.json.
func LeaseName(node string) string { return "_nodes/" + node + ".json" }

// ManifestName returns the destination-relative name of a node's manifest
// of a checkpoint: _manifests/<node>/<checkpoint:020d>.json.
// ParseManifestName reads it.
func ManifestName(node string, checkpoint uint64) string {
	return fmt.Sprintf("_manifests/%s/%020d.json", node, checkpoint)
}

// ParseManifestName parses a name made by ManifestName.
func ParseManifestName(name string) (node string, checkpoint uint64, ok bool) {
	rest, found := strings.CutPrefix(name, "_manifests/")
	if !found {
		return "", 0, false
	}
	node, file, found := strings.Cut(rest, "/")
	digits, isJSON := strings.CutSuffix(file, ".json")
	if !found || node == "" || !isJSON || len(digits) != 20 {
		return "", 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", 0, false
		}
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return node, id, true
}

// IdempotencyKey reports whether k is a valid Idempotency-Key: 1 to 255
// printable ASCII characters (0x20 to 0x7e), without leading or trailing
// spaces (HTTP trims them, so they could not round-trip).
func IdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > 255 || k[0] == ' ' || k[len(k)-1] == ' ' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
