package layout

// This file checks the names the vocabulary defines (streams, producers,
// nodes, idempotency keys) and owns the destination's file names that
// carry a node id, each formatter beside its parser: part files,
// manifests, S3 staging objects and leases; and the suffix of temp files.

import (
	"fmt"
	"path"
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

// MaxNode is the longest node id, in bytes.
const MaxNode = 64

// Node reports whether s is a node id: ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$.
// A node id is one path segment of the destination (_manifests/<node>/,
// _staging/<node>/, _nodes/<node>.json) and part of every part name; it
// starts with a letter or digit, so it is never "." or "..", and may hold
// '-' (host names such as eosink-0): ParsePartName still reads it back,
// since the checkpoint and index after it have fixed forms.
func Node(s string) bool {
	if len(s) == 0 || len(s) > MaxNode {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// SanitizeNode maps a host name to a node id: every byte outside
// [A-Za-z0-9_.-] becomes '_', leading '_', '.' and '-' are dropped, and
// the result is cut to MaxNode bytes; "node" if nothing is left.
func SanitizeNode(host string) string {
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	out := strings.TrimLeft(string(b), "_.-")
	if len(out) > MaxNode {
		out = out[:MaxNode]
	}
	if out == "" {
		return "node"
	}
	return out
}

// Top-level folders of the destination that are eosink's own (streams
// can't start with '_').
const (
	ManifestDir   = "_manifests"  // ManifestName
	StagingDir    = "_staging"    // StagingName: S3 copy mode's staged objects
	LeaseDir      = "_nodes"      // LeaseName
	StreamDir     = "_streams"    // StreamConfName: streams' configurations
	QuarantineDir = "_quarantine" // QuarantineName: part files of checkpoints whose record was lost
)

// TempSuffix ends the name of every temp file eosink writes (staging
// files in the data dir, a local destination's publish and lease temps).
// A name in the destination ending in it is never committed data.
const TempSuffix = ".inprogress"

// TempName returns the staging temp file name of the part file finalBase,
// in dir: <dir>/<finalBase>.inprogress. IsTempName reads it.
func TempName(dir, finalBase string) string { return path.Join(dir, finalBase+TempSuffix) }

// IsTempName reports whether name is a temp file name (ends in TempSuffix).
func IsTempName(name string) bool { return strings.HasSuffix(name, TempSuffix) }

// StagingName returns the destination-relative name under which S3 copy
// mode stages the file final (destination-relative) of node:
// _staging/<node>/<final>. ParseStagingName reads it.
func StagingName(node, final string) string { return StagingDir + "/" + node + "/" + final }

// ParseStagingName parses a name made by StagingName. It checks only the
// form: a non-empty node and a non-empty final name.
func ParseStagingName(name string) (node, final string, ok bool) {
	rest, found := strings.CutPrefix(name, StagingDir+"/")
	if !found {
		return "", "", false
	}
	node, final, found = strings.Cut(rest, "/")
	if !found || node == "" || final == "" {
		return "", "", false
	}
	return node, final, true
}

// PartName returns the base name of a committed part file:
// part-<node>-<checkpoint:020d>-<index:04d>.<ext>. ParsePartName reads it.
func PartName(node string, checkpoint uint64, index int, ext string) string {
	return fmt.Sprintf("part-%s-%020d-%04d.%s", node, checkpoint, index, ext)
}

// MaxPartNameLen is the longest base name PartName gives for node and
// ext: with an index of up to 9 digits, the most ParsePartName reads.
func MaxPartNameLen(node, ext string) int { return len(PartName(node, 0, 0, ext)) + 5 }

// ReservedElem reports whether a path element under a stream's folder
// could be mistaken for one of eosink's own names: a part file's (in any
// letter case, for case-insensitive file systems), a temp file's, or the
// folder of displaced files (DisplacedDir). A partition segment equal to a
// part file's name would need a directory where that file may be (after a
// template gains a level), which no commit could ever make.
func ReservedElem(elem string) bool {
	if strings.EqualFold(elem, DisplacedDir) {
		return true
	}
	if len(elem) >= len(TempSuffix) && strings.EqualFold(elem[len(elem)-len(TempSuffix):], TempSuffix) {
		return true
	}
	if len(elem) < len("part-") || !strings.EqualFold(elem[:len("part-")], "part-") {
		return false
	}
	_, _, _, _, ok := ParsePartName(strings.ToLower(elem))
	return ok
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

// StreamConfName returns the destination-relative name of a stream's
// configuration document: _streams/<stream>.json.
func StreamConfName(stream string) string { return StreamDir + "/" + stream + ".json" }

// ParseStreamConfName parses a name made by StreamConfName; the stream
// must be a valid stream name.
func ParseStreamConfName(name string) (stream string, ok bool) {
	rest, found := strings.CutPrefix(name, StreamDir+"/")
	stream, isJSON := strings.CutSuffix(rest, ".json")
	if !found || !isJSON || !Stream(stream) {
		return "", false
	}
	return stream, true
}

// LeaseName returns the destination-relative name of a node's lease:
// _nodes/<node>.json.
func LeaseName(node string) string { return LeaseDir + "/" + node + ".json" }

// ParseLeaseName parses a name made by LeaseName.
func ParseLeaseName(name string) (node string, ok bool) {
	rest, found := strings.CutPrefix(name, LeaseDir+"/")
	node, isJSON := strings.CutSuffix(rest, ".json")
	if !found || !isJSON || node == "" || strings.Contains(node, "/") {
		return "", false
	}
	return node, true
}

// MaxCheckpoint bounds the checkpoint ids a name read from the
// destination may carry: ParseManifestName refuses larger ones, so that an
// id planted near 2^64 cannot make the ids after it wrap (I8). A node
// counting from 1 never reaches it.
const MaxCheckpoint = 1 << 62

// ManifestName returns the destination-relative name of a node's manifest
// of a checkpoint: _manifests/<node>/<checkpoint:020d>.json.
// ParseManifestName reads it.
func ManifestName(node string, checkpoint uint64) string {
	return fmt.Sprintf("%s/%s/%020d.json", ManifestDir, node, checkpoint)
}

// ParseManifestName parses a name made by ManifestName: a node id, then
// exactly 20 digits of an id at most MaxCheckpoint.
func ParseManifestName(name string) (node string, checkpoint uint64, ok bool) {
	rest, found := strings.CutPrefix(name, ManifestDir+"/")
	if !found {
		return "", 0, false
	}
	node, file, found := strings.Cut(rest, "/")
	digits, isJSON := strings.CutSuffix(file, ".json")
	if !found || !Node(node) || !isJSON || len(digits) != 20 {
		return "", 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", 0, false
		}
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || id > MaxCheckpoint {
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

// DisplacedDir is the folder, inside a stream's folder, holding the part
// files whose final name the destination refused after their checkpoint
// was prepared (a file where the partition path needs a folder, a path
// over the filesystem's limit, other content at the name): committed
// there instead, so one unplaceable file never holds back every later
// checkpoint. Readers that skip names starting with "_" skip it; the
// manifest names the file where it is.
const DisplacedDir = "_displaced"

// DisplacedName returns where the part file final (destination-relative,
// <stream>/<partition>/<part name>) is committed when its own name is
// refused: <stream>/_displaced/<part name>. Part names are unique per
// node, checkpoint and index, so displaced names never collide.
// ParseDisplacedName reads it.
func DisplacedName(final string) string {
	stream, _, _ := strings.Cut(final, "/")
	return stream + "/" + DisplacedDir + "/" + path.Base(final)
}

// ParseDisplacedName parses a name made by DisplacedName.
func ParseDisplacedName(name string) (stream, part string, ok bool) {
	stream, rest, found := strings.Cut(name, "/")
	part, found2 := strings.CutPrefix(rest, DisplacedDir+"/")
	if !found || !found2 || stream == "" || strings.Contains(part, "/") {
		return "", "", false
	}
	if _, _, _, _, ok := ParsePartName(part); !ok {
		return "", "", false
	}
	return stream, part, true
}

// QuarantineName returns where recovery moves the part file final
// (destination-relative, <stream>/<partition>/<part name>) of node when no
// manifest names its checkpoint and the state store that prepared it was
// lost: _quarantine/<node>/<stream>/<part name>. Clients were never told
// its batches committed and resend them; moved aside, the destination
// holds each batch once for readers that list it, and the bytes are kept
// for an operator (I7). The partition path is left out, as DisplacedName
// does: part names are unique per node, checkpoint and index, and a name
// that kept it would be longer than the file's own, which the write-time
// check lets reach the destination's limit (PATH_MAX, an S3 key's 1,024
// bytes), so the move could never be made. ParseQuarantineName reads it.
func QuarantineName(node, final string) string {
	stream, _, _ := strings.Cut(final, "/")
	return QuarantineDir + "/" + node + "/" + stream + "/" + path.Base(final)
}

// ParseQuarantineName parses a name made by QuarantineName: the node, the
// stream and the part file's base name, which must parse as a part name
// of that node.
func ParseQuarantineName(name string) (node, stream, part string, ok bool) {
	rest, found := strings.CutPrefix(name, QuarantineDir+"/")
	if !found {
		return "", "", "", false
	}
	node, rest, found = strings.Cut(rest, "/")
	if !found || !Node(node) {
		return "", "", "", false
	}
	stream, part, found = strings.Cut(rest, "/")
	if !found || !Stream(stream) || strings.Contains(part, "/") {
		return "", "", "", false
	}
	if n, _, _, _, ok := ParsePartName(part); !ok || n != node {
		return "", "", "", false
	}
	return node, stream, part, true
}
