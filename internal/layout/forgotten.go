package layout

// This file owns the forgotten-producers document
// (_forgotten/<node>/<checkpoint:020d>-<n:04d>.json): written by the engine
// before it forgets producers (DELETE, expiry), read by the rebuild after
// a state store is lost. Without it a producer id forgotten and created
// again that committed nothing since would be rebuilt as the forgotten
// incarnation, and init would answer that incarnation's committed_seq to
// a client whose own batches are not committed.

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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
	Producers map[string]int64 `json:"producers"`     // producer -> its epoch when forgotten
	MAC       string           `json:"mac,omitempty"` // ForgottenSeal
}

// ForgottenName returns the name of node's document for producers
// forgotten after checkpoint after; n tells apart documents written
// before the same checkpoint. ParseForgottenName reads it.
func ForgottenName(node string, after uint64, n int) string {
	return fmt.Sprintf("%s/%s/%020d-%04d.json", ForgottenDir, node, after, n)
}

// ParseForgottenName parses a name made by ForgottenName.
func ParseForgottenName(name string) (node string, after uint64, n int, ok bool) {
	return parseForgottenName(name, "")
}

// parseForgottenName parses _forgotten/<node>/<prefix><checkpoint:020d>-<n:04d>.json.
func parseForgottenName(name, prefix string) (node string, id uint64, n int, ok bool) {
	rest, found := strings.CutPrefix(name, ForgottenDir+"/")
	if !found {
		return "", 0, 0, false
	}
	node, base, found := strings.Cut(rest, "/")
	base, isJSON := strings.CutSuffix(base, ".json")
	base, prefixed := strings.CutPrefix(base, prefix)
	if !found || !isJSON || !prefixed || !Node(node) || len(base) != 25 || base[20] != '-' {
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
	err := checkForgottenHead(name, "forgotten-producers", ParseForgottenName, f.Node, f.After, len(f.Producers), "producers")
	if err != nil {
		return err
	}
	for p, ep := range f.Producers {
		if !Producer(p) || !forgottenEpoch(ep) {
			return fmt.Errorf("%w: %s: producer %q epoch %d", ErrBadForgotten, name, p, ep)
		}
	}
	return nil
}

// checkForgottenHead checks what a document of either kind owes the name
// it was read at: parse (the kind's name parser; kind names the kind)
// takes the name, the document's node and checkpoint (id) are the name's,
// and it holds 1..MaxForgotten items (unit names them).
func checkForgottenHead(name, kind string, parse func(string) (string, uint64, int, bool), node string, id uint64, items int, unit string) error {
	nameNode, nameID, _, ok := parse(name)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s: not a %s name", ErrBadForgotten, name, kind)
	case node != nameNode || id != nameID:
		return fmt.Errorf("%w: %s: names node %q checkpoint %d", ErrBadForgotten, name, node, id)
	case items == 0 || items > MaxForgotten:
		return fmt.Errorf("%w: %s: %d %s", ErrBadForgotten, name, items, unit)
	}
	return nil
}

// forgottenEpoch reports whether ep is an epoch a document may name: in
// [0, MaxSeq), as a manifest's.
func forgottenEpoch(ep int64) bool { return ep >= 0 && ep < MaxSeq }

// DecodeForgotten reads the document at name from r (at most
// MaxForgottenDoc bytes) and checks it.
func DecodeForgotten(name string, r io.Reader) (*Forgotten, error) {
	return decodeForgottenDoc(name, r, CheckForgotten)
}

// decodeForgottenDoc reads a document of either kind at name from r (at
// most MaxForgottenDoc bytes) and checks it with check.
func decodeForgottenDoc[T any](name string, r io.Reader, check func(string, *T) error) (*T, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxForgottenDoc+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > MaxForgottenDoc {
		return nil, fmt.Errorf("%w: %s: over %d bytes", ErrBadForgotten, name, MaxForgottenDoc)
	}
	var doc T
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadForgotten, name, err)
	}
	if err := check(name, &doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// A merged document (_forgotten/<node>/merged-<through:020d>-<n:04d>.json)
// holds what documents of node said, entry by entry, so that the documents
// can be removed: the compaction (server/forgotten.go) writes it, durably,
// before it removes what it merged. Each entry keeps its own checkpoint:
// an entry means what a document of that checkpoint naming only its
// producer means. Names sort after every ForgottenName of the node ('m'
// after the digits), so a reader that pages from a checkpoint on lists
// them all.

// ForgottenMerged is a merged forgotten-producers document. Through is the
// highest After of its entries.
type ForgottenMerged struct {
	Node    string           `json:"node"`
	Through uint64           `json:"through_checkpoint"`
	Entries []ForgottenEntry `json:"entries"`
	MAC     string           `json:"mac,omitempty"` // ForgottenSeal
}

// ForgottenEntry is one producer of a Forgotten document: forgotten after
// checkpoint After at epoch Epoch.
type ForgottenEntry struct {
	Producer string `json:"p"`
	After    uint64 `json:"after"`
	Epoch    int64  `json:"epoch"`
}

// dominates reports whether e says at least what o says: the same
// producer, forgotten no earlier and at no lower epoch. The rebuild forgets
// a producer again for an entry when its store holds it born at or below
// the entry's epoch, at that epoch or below, with nothing committed after
// the entry's checkpoint (recovery.Store.ApplyForgotten): a condition
// that only widens as the checkpoint and the epoch grow, and it raises the
// epoch floor above the epoch. So whatever o makes the rebuild do, e makes
// it do too, and o can go.
func (e ForgottenEntry) dominates(o ForgottenEntry) bool {
	return e.Producer == o.Producer && e.After >= o.After && e.Epoch >= o.Epoch
}

// ForgottenMergedName returns the name of node's merged document n whose
// entries' highest checkpoint is through, published by the process that
// had checkpoint by open. Ids are never reused (I8), so no process
// publishes under a name an earlier one may still be removing: a stale
// compaction, stalled in a removal past its lease, can only remove a
// document of its own era, never one a later process published since.
// ParseForgottenMergedName reads it.
func ForgottenMergedName(node string, through, by uint64, n int) string {
	return fmt.Sprintf("%s/%s/merged-%020d-%020d-%04d.json", ForgottenDir, node, through, by, n)
}

// ParseForgottenMergedName parses a name made by ForgottenMergedName; the
// publisher's checkpoint is checked and left out.
func ParseForgottenMergedName(name string) (node string, through uint64, n int, ok bool) {
	const by = len("00000000000000000000-")
	i := strings.LastIndex(name, "/merged-") + len("/merged-")
	if i < len("/merged-") || len(name) < i+21+by {
		return "", 0, 0, false
	}
	if id, err := strconv.ParseUint(name[i+21:i+20+by], 10, 64); err != nil || id > MaxCheckpoint || name[i+20+by] != '-' {
		return "", 0, 0, false
	}
	return parseForgottenName(name[:i+21]+name[i+21+by:], "merged-")
}

// CheckForgottenMerged checks a merged document read at name: its node
// and Through are the name's, it holds 1..MaxForgotten entries, each a
// valid producer with an epoch as CheckForgotten wants it and a
// checkpoint at most Through.
func CheckForgottenMerged(name string, m *ForgottenMerged) error {
	err := checkForgottenHead(name, "merged forgotten-producers", ParseForgottenMergedName, m.Node, m.Through, len(m.Entries), "entries")
	if err != nil {
		return err
	}
	for _, e := range m.Entries {
		if !Producer(e.Producer) || !forgottenEpoch(e.Epoch) || e.After > m.Through {
			return fmt.Errorf("%w: %s: producer %q epoch %d checkpoint %d", ErrBadForgotten, name, e.Producer, e.Epoch, e.After)
		}
	}
	return nil
}

// DecodeForgottenMerged reads the merged document at name from r (at
// most MaxForgottenDoc bytes) and checks it.
func DecodeForgottenMerged(name string, r io.Reader) (*ForgottenMerged, error) {
	return decodeForgottenDoc(name, r, CheckForgottenMerged)
}

// Entries returns f's producers as entries, sorted by producer.
func (f *Forgotten) Entries() []ForgottenEntry {
	out := make([]ForgottenEntry, 0, len(f.Producers))
	for p, ep := range f.Producers {
		out = append(out, ForgottenEntry{Producer: p, After: f.After, Epoch: ep})
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// Docs returns m's entries with a checkpoint at least from as documents,
// one per checkpoint, as a node wrote them (Store.ApplyForgotten takes
// them). A producer named twice for one checkpoint keeps its higher epoch.
func (m *ForgottenMerged) Docs(from uint64) []*Forgotten {
	by := map[uint64]*Forgotten{}
	var out []*Forgotten
	for _, e := range m.Entries {
		if e.After < from {
			continue
		}
		d := by[e.After]
		if d == nil {
			d = &Forgotten{Node: m.Node, After: e.After, Producers: map[string]int64{}}
			by[e.After] = d
			out = append(out, d)
		}
		if ep, ok := d.Producers[e.Producer]; !ok || e.Epoch > ep {
			d.Producers[e.Producer] = e.Epoch
		}
	}
	return out
}

// MergeForgotten returns entries without those another entry dominates
// (and without duplicates), sorted by producer, then checkpoint, then
// epoch: what a merged document must hold for the rebuild to do what
// entries make it do.
func MergeForgotten(entries []ForgottenEntry) []ForgottenEntry {
	s := slices.Clone(entries)
	slices.SortFunc(s, compareEntries)
	out := s[:0]
	for i, e := range s {
		// Entries of one producer are adjacent, and any entry that
		// dominates e sorts after it (a checkpoint and an epoch at least
		// e's).
		keep := true
		for _, o := range s[i+1:] {
			if o.Producer != e.Producer {
				break
			}
			if o.dominates(e) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, e)
		}
	}
	return slices.Clip(out)
}

func compareEntries(a, b ForgottenEntry) int {
	return cmp.Or(strings.Compare(a.Producer, b.Producer), cmp.Compare(a.After, b.After), cmp.Compare(a.Epoch, b.Epoch))
}

// ForgottenSeal signs and checks a node's forgotten-producers documents.
//
// A document under the node's prefix makes a start forget producers, and
// the destination is not the node's alone: a document the node never
// wrote, naming a live producer at its epoch and the store's newest
// checkpoint, would make a start with a current store forget it, and the
// producer's resend of a committed batch would be written again after its
// Init (I2, I13). A start can't tell such a document by its name or
// content from one the node published before a crash cut its forget short
// (the store still holds the producer then, and must forget it). So the
// node seals what it publishes with an HMAC-SHA256 under a key that only
// its state store holds (recovery.Store.ForgottenKey), and a start
// believes a document after the key's checkpoint only when the seal
// holds. An older copy of the store holds the same key, so it believes
// the documents published since the copy; a new store (the old one lost)
// has no key until its first start has read every document, as before.
//
// Documents after Since must be sealed. The start that makes the key has
// applied every document there was (believing each, without a key), so a
// store holding the key reflects them; Since is its newest commit minus
// 2, which every later start whose store kept up (its newest commit is
// no lower) skips anyway (a store with no commit checks no seal until it
// commits a checkpoint it opens: Since is the first one minus 2).
// Unsealed documents at or below it (an older binary's, or ones sealed under a lost store's key) are believed only
// by the compaction, which merges them under this key. Since must not be
// higher: a planted document up to it, after the store's newest commit
// minus 1, would make a start forget a live producer.
type ForgottenSeal struct {
	Key   []byte // nil: no key (a new store's first start): every document is believed unsealed
	Since uint64
}

// Seal sets f's MAC.
func (s ForgottenSeal) Seal(f *Forgotten) error { return s.seal(&f.MAC, f) }

// SealMerged sets m's MAC.
func (s ForgottenSeal) SealMerged(m *ForgottenMerged) error { return s.seal(&m.MAC, m) }

// Check returns nil when f, read at name, is believed: sealed under the
// key, or at or below Since, or there is no key; else an ErrBadForgotten.
func (s ForgottenSeal) Check(name string, f *Forgotten) error {
	return s.check(name, f.After, &f.MAC, f)
}

// CheckMerged is Check for a merged document: all of its entries are at
// or below Through.
func (s ForgottenSeal) CheckMerged(name string, m *ForgottenMerged) error {
	return s.check(name, m.Through, &m.MAC, m)
}

func (s ForgottenSeal) check(name string, after uint64, mac *string, doc any) error {
	if s.Key == nil || after <= s.Since {
		return nil
	}
	got := *mac
	err := s.seal(mac, doc)
	want := *mac
	*mac = got
	if err != nil || !hmac.Equal([]byte(got), []byte(want)) {
		return fmt.Errorf("%w: %s: not sealed by this node's state store (a document after checkpoint %d must be)", ErrBadForgotten, name, s.Since)
	}
	return nil
}

// seal sets *mac, a field of doc, to the HMAC of doc's JSON without it.
// The JSON of a decoded document is the bytes it was sealed over: struct
// fields in order, map keys sorted, entries in order.
func (s ForgottenSeal) seal(mac *string, doc any) error {
	*mac = ""
	if len(s.Key) == 0 {
		return errors.New("seal forgotten-producers document: no key")
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("seal forgotten-producers document: %w", err)
	}
	h := hmac.New(sha256.New, s.Key)
	h.Write(body)
	*mac = hex.EncodeToString(h.Sum(nil))
	return nil
}
