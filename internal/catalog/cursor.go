package catalog

// This file owns the commit feed's cursor (GET /v1/commits?after=): its
// formatter and its parser side by side.
//
// A cursor is, for each node whose manifests the feed has passed, the id
// of the last manifest passed. Each node publishes its manifests in
// increasing id order (checkpoints are serialized, and the replay of a
// prepared checkpoint runs before any later one starts), so "every
// manifest of node n with an id up to h is passed" is the whole position:
// gaps in the ids (empty checkpoints, the jump after a lost state store)
// need nothing. It names manifests, not memory: any node, before or after
// any restart, reads it the same.
//
// Encoding: base64url without padding of
//
//	version byte 1
//	for each node, by name (strictly ascending):
//	  length byte, the node id (layout.Node), uvarint id (1..layout.MaxCheckpoint)
//
// at most MaxFeedNodes nodes. The parser accepts only what the formatter
// writes (canonical varints, no trailing bytes): one string per position.

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/eosink/eosink/internal/layout"
)

// MaxFeedNodes bounds the nodes one cursor holds, so that a cursor stays
// small (at most about 6.5 KB): the feed refuses a destination with more
// nodes than that (ErrTooManyNodes) rather than skip one.
const MaxFeedNodes = 64

// cursorVersion is the first byte of every cursor.
const cursorVersion = 1

// ErrBadCursor: a cursor is not one the feed gave (not decodable, not
// canonical), or names a manifest the destination does not hold (a cursor
// of another destination, or a stale one whose manifest was removed).
var ErrBadCursor = errors.New("invalid cursor")

// ErrTooManyNodes: the destination holds manifests of more than
// MaxFeedNodes nodes.
var ErrTooManyNodes = errors.New("too many nodes for the commit feed")

// CursorNode is one node's position: every manifest up to ID is passed.
type CursorNode struct {
	Node string
	ID   uint64
}

// Cursor is a position in the commit feed. The zero Cursor is the start.
type Cursor struct {
	nodes []CursorNode // by node, ascending
}

// Nodes returns the cursor's positions, by node.
func (c Cursor) Nodes() []CursorNode { return slices.Clone(c.nodes) }

// At returns the id of node's last manifest passed, 0 if none.
func (c Cursor) At(node string) uint64 {
	i, ok := slices.BinarySearchFunc(c.nodes, node, func(n CursorNode, s string) int { return strings.Compare(n.Node, s) })
	if !ok {
		return 0
	}
	return c.nodes[i].ID
}

// With returns a copy of c with node's position at id.
func (c Cursor) With(node string, id uint64) Cursor {
	out := Cursor{nodes: slices.Clone(c.nodes)}
	i, ok := slices.BinarySearchFunc(out.nodes, node, func(n CursorNode, s string) int { return strings.Compare(n.Node, s) })
	if ok {
		out.nodes[i].ID = id
	} else {
		out.nodes = slices.Insert(out.nodes, i, CursorNode{Node: node, ID: id})
	}
	return out
}

// String encodes c; ParseCursor reads it back.
func (c Cursor) String() string {
	b := []byte{cursorVersion}
	for _, n := range c.nodes {
		b = append(b, byte(len(n.Node)))
		b = append(b, n.Node...)
		b = binary.AppendUvarint(b, n.ID)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor reads a cursor made by Cursor.String; "" is the start.
// Errors wrap ErrBadCursor.
func ParseCursor(s string) (Cursor, error) {
	bad := func(why string) (Cursor, error) { return Cursor{}, fmt.Errorf("%w: %s", ErrBadCursor, why) }
	if s == "" {
		return Cursor{}, nil
	}
	// Base64 of MaxFeedNodes of the longest ids and varints.
	if len(s) > (1+MaxFeedNodes*(1+layout.MaxNode+binary.MaxVarintLen64))*4/3+4 {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return bad("not base64url")
	}
	if b[0] != cursorVersion {
		return bad(fmt.Sprintf("version %d", b[0]))
	}
	var c Cursor
	for rest := b[1:]; len(rest) > 0; {
		n := int(rest[0])
		if len(rest) < 1+n {
			return bad("truncated node id")
		}
		node := string(rest[1 : 1+n])
		rest = rest[1+n:]
		id, k := binary.Uvarint(rest)
		if k <= 0 {
			return bad("truncated checkpoint id")
		}
		rest = rest[k:]
		switch {
		case !layout.Node(node):
			return bad(fmt.Sprintf("node %q is not a node id", node))
		case id == 0 || id > layout.MaxCheckpoint:
			return bad(fmt.Sprintf("checkpoint id %d of node %s is out of range", id, node))
		case len(c.nodes) > 0 && c.nodes[len(c.nodes)-1].Node >= node:
			return bad("nodes not in ascending order")
		case len(c.nodes) == MaxFeedNodes:
			return bad(fmt.Sprintf("more than %d nodes", MaxFeedNodes))
		}
		c.nodes = append(c.nodes, CursorNode{Node: node, ID: id})
	}
	if c.String() != s {
		return bad("not in canonical form")
	}
	return c, nil
}
