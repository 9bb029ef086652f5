package layout

// This file owns the forgotten-producers document
// (_forgotten/<node>/<checkpoint:020d>-<n:04d>.json): written by the engine
// before it forgets producers (DELETE, expiry), read by the rebuild after
// a state store is lost. Without it a producer id forgotten and created
// again that committed nothing since would be rebuilt as the forgotten
// incarnation, and init would answer that incarnation's committed_seq to
// a client whose own batches are not committed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ForgottenDir is the top-level folder of forgotten-producer documents.
const ForgottenDir = "_forgotten"

// MaxForgotten bounds the producers one document names, and MaxForgottenDoc
// the bytes a reader accepts of one.
const (
	MaxForgotten    = 4096
	MaxForgottenDoc = MaxForgotten * 200
)

// ErrBadForgotten means a document under _forgotten/ is not one a node
// wrote: out of bounds or unreadable. The rebuild reports and skips it.
var ErrBadForgotten = errors.New("not a valid forgotten-producers document")

// Forgotten says that node forgot producers after checkpoint After: every
// batch they had was committed in a checkpoint at most After, and each
// had the epoch given. A producer whose batches a later checkpoint holds
// was created again (or the forget failed) and the document says nothing
// of it.
type Forgotten struct {
	Node      string           `json:"node"`
	After     uint64           `json:"after_checkpoint"`
	Producers map[string]int64 `json:"producers"` // producer -> its epoch when forgotten
}

// ForgottenName returns the name of node's document for producers
// forgotten after checkpoint after; n tells apart documents written
// before the same checkpoint. ParseForgottenName reads it.
func ForgottenName(node string, after uint64, n int) string {
	return fmt.Sprintf("%s/%s/%020d-%04d.json", ForgottenDir, node, after, n)
}

// ParseForgottenName parses a name made by ForgottenName.
func ParseForgottenName(name string) (node string, after uint64, n int, ok bool) {
	rest, found := strings.CutPrefix(name, ForgottenDir+"/")
	if !found {
		return "", 0, 0, false
	}
	node, base, found := strings.Cut(rest, "/")
	base, isJSON := strings.CutSuffix(base, ".json")
	if !found || !isJSON || !Node(node) || len(base) != 25 || base[20] != '-' {
		return "", 0, 0, false
	}
	id, err1 := strconv.ParseUint(base[:20], 10, 64)
	num, err2 := strconv.Atoi(base[21:])
	if err1 != nil || err2 != nil || id > MaxCheckpoint || num < 0 {
		return "", 0, 0, false
	}
	return node, id, num, true
}

// CheckForgotten checks a document read at name: its node and checkpoint
// are the name's, it names 1..MaxForgotten valid producers with epochs
// in [0, MaxSeq), as a manifest's (a larger one, raised to the epoch
// floor, would make new producers' epochs wrap).
func CheckForgotten(name string, f *Forgotten) error {
	node, after, _, ok := ParseForgottenName(name)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s: not a forgotten-producers name", ErrBadForgotten, name)
	case f.Node != node || f.After != after:
		return fmt.Errorf("%w: %s: names node %q checkpoint %d", ErrBadForgotten, name, f.Node, f.After)
	case len(f.Producers) == 0 || len(f.Producers) > MaxForgotten:
		return fmt.Errorf("%w: %s: %d producers", ErrBadForgotten, name, len(f.Producers))
	}
	for p, ep := range f.Producers {
		if !Producer(p) || ep < 0 || ep >= MaxSeq {
			return fmt.Errorf("%w: %s: producer %q epoch %d", ErrBadForgotten, name, p, ep)
		}
	}
	return nil
}

// DecodeForgotten reads the document at name from r (at most
// MaxForgottenDoc bytes) and checks it.
func DecodeForgotten(name string, r io.Reader) (*Forgotten, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxForgottenDoc+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > MaxForgottenDoc {
		return nil, fmt.Errorf("%w: %s: over %d bytes", ErrBadForgotten, name, MaxForgottenDoc)
	}
	var f Forgotten
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadForgotten, name, err)
	}
	if err := CheckForgotten(name, &f); err != nil {
		return nil, err
	}
	return &f, nil
}
