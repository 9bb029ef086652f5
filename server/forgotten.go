package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
)

// Forgotten producers in the destination.
//
// A producer forgotten (DELETE, expiry) and created again starts a new
// incarnation at a higher epoch. Until that incarnation commits, nothing in
// the destination shows it: a state store lost (or replaced by an older
// copy) then would be rebuilt with the forgotten incarnation's sequence
// numbers, and init would answer its committed_seq to a client whose own
// batches are not committed — a client that trusts it drops them. So
// before the store forgets producers, the engine publishes which, with
// their epochs and the checkpoint their last batch is at most in
// (layout.Forgotten); every start applies the documents its store may not
// reflect (recovery.Store.ApplyForgotten).

// recordForgotten publishes the forgotten-producers document for ids,
// before the store forgets them: create-only, fenced by the lease. Ids the
// store does not know are left out; nothing is published when none is
// left. An error means nothing may be forgotten.
//
// With a non-zero idleBefore (the expiry, which publishes one document for
// a batch before it tries each producer), the producers that the expiry
// will leave are left out too: busy ones (their batches may ride in a
// checkpoint at most the document's, being committed) and ones active
// since idleBefore (an init since the listing). A producer that becomes
// busy or active after this check writes in a checkpoint beyond the
// document's or inits at a higher epoch, which void the document for it
// (recovery.Store.ApplyForgotten). A DELETE calls it once its producer is
// known not busy and unknown to writes, under the init lock.
func (lc *lifecycle) recordForgotten(ctx context.Context, ids []string, idleBefore time.Time) error {
	doc := layout.Forgotten{Node: lc.e.cfg.Node, Producers: map[string]int64{}}
	// Every batch of a producer that may be forgotten is committed (it is
	// not busy at the check below, after this), so in a checkpoint before
	// the one open now.
	lc.e.ing.mu.Lock()
	doc.After = lc.e.ing.openID - 1
	lc.e.ing.mu.Unlock()
	for _, id := range ids {
		if !idleBefore.IsZero() {
			lc.e.ing.mu.Lock()
			p := lc.e.ing.prods.m[id]
			busy := p != nil && lc.e.ing.prods.busy(p)
			lc.e.ing.mu.Unlock()
			if busy {
				continue // the expiry leaves it
			}
		}
		epoch, active, ok, err := lc.e.store.ProducerActive(id)
		if errors.Is(err, recovery.ErrProducerDamaged) {
			continue // never forgotten: its row stays for an operator
		}
		if err != nil {
			return fmt.Errorf("record forgotten producers: %w", err)
		}
		if !ok || (!idleBefore.IsZero() && !active.Before(idleBefore)) {
			continue // unknown, or active again: the expiry leaves it
		}
		doc.Producers[id] = epoch
	}
	if len(doc.Producers) == 0 {
		return nil
	}
	if err := lc.seal.Seal(&doc); err != nil {
		return fmt.Errorf("record forgotten producers: %w", err)
	}
	body, err := json.Marshal(&doc)
	if err != nil {
		return fmt.Errorf("record forgotten producers: %w", err)
	}
	// Names under one checkpoint are used in order: start after the last
	// one this run used (a former run's checkpoint ids are all below
	// this one's, so its names are not in the way).
	lc.forgot.Lock()
	defer lc.forgot.Unlock()
	n := 0
	if lc.forgot.after == doc.After {
		n = lc.forgot.next
	}
	for ; ; n++ {
		if n > maxForgottenNum {
			return fmt.Errorf("record forgotten producers: %d documents after checkpoint %d: no name left until a checkpoint passes: %w",
				maxForgottenNum+1, doc.After, committer.ErrExists)
		}
		if err := lc.leaseCheck(); err != nil {
			if classify(err) != verdictStop {
				// Stale (a renewal refused, by a full disk say): retry.
				return fmt.Errorf("%w: record forgotten producers: %w", ErrNotReady, err)
			}
			return fmt.Errorf("record forgotten producers: %w", err)
		}
		err := lc.e.cfg.Publisher.Publish(ctx, layout.ForgottenName(doc.Node, doc.After, n), body)
		if errors.Is(err, committer.ErrExists) {
			continue // another forget before the same checkpoint
		}
		if errors.Is(err, ErrDiskFull) {
			// Nothing is forgotten; a DELETE is answered 507, as every
			// call refused for space is.
			return fmt.Errorf("record forgotten producers in the destination: %w", err)
		}
		if err != nil && classify(err) != verdictStop {
			// Nothing is forgotten: the caller may retry (a DELETE is
			// answered 503 not_ready, the expiry tries at its next run).
			return fmt.Errorf("%w: record forgotten producers in the destination: %w", ErrNotReady, err)
		}
		if err != nil {
			return fmt.Errorf("record forgotten producers: %w", err)
		}
		lc.forgot.after, lc.forgot.next = doc.After, n+1
		return nil
	}
}

// maxForgottenNum is the highest document number of one checkpoint
// (layout.ForgottenName: 4 digits).
const maxForgottenNum = 9999

// loadForgotten reads this node's forgotten-producers documents written
// after newest (the store's newest committed checkpoint, or the newest
// one a rebuild of it went through, when the store kept up: it reflects
// every forget before it; 0 for all of them) and
// within limit (the ids this node reserved: beyond, not its own); of a
// merged document, the entries after newest. Documents that do not parse
// are reported and skipped, and so are, unless rebuild, documents after
// the store's seal that it did not seal (layout.ForgottenSeal): a store
// that kept up holds the key of every document its node wrote since —
// also one that has committed nothing yet (newest 0), whose seal checks
// every document after checkpoint 0. Documents at or below the checkpoint
// through which the store applied every document when it made its key
// (recovery.Store.ForgottenApplied) are skipped unread, not reported: a
// lost store's, applied at the first start over a new one, would be
// refused at every start until the node commits. A rebuild (the store is lost, or an
// older copy) takes every document: one sealed under a lost store's key
// can't be told from one planted, and a producer forgotten and brought
// back would be answered its old incarnation's committed_seq.
func (lc *lifecycle) loadForgotten(ctx context.Context, newest, limit uint64, rebuild bool) ([]*layout.Forgotten, error) {
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		return nil, nil
	}
	var seal layout.ForgottenSeal
	var applied uint64
	if !rebuild {
		var err error
		if seal, err = lc.e.store.ForgottenSeal(); err != nil {
			return nil, err
		}
		if applied, err = lc.e.store.ForgottenApplied(); err != nil {
			return nil, err
		}
	}
	dir := path.Dir(layout.ForgottenName(lc.e.cfg.Node, 0, 0)) + "/"
	entries, err := listForgotten(ctx, r, dir, newest)
	if err != nil {
		return nil, fmt.Errorf("list forgotten producers: %w", err)
	}
	from := max(newest, 1) - 1 // the documents skipped below are before it
	var docs []*layout.Forgotten
	for _, en := range entries {
		// A merged document holds the forgets through its id, a single one
		// those after its id: both are checked against limit and from alike.
		node, at, _, ok := layout.ParseForgottenName(en.Path)
		mnode, through, _, merged := layout.ParseForgottenMergedName(en.Path)
		if merged {
			node, at, ok = mnode, through, true
		}
		switch {
		case layout.IsTempName(en.Path):
		case !ok || node != lc.e.cfg.Node || at > limit:
			lc.e.log.Error("document under this node's forgotten-producers prefix that it did not write: ignored", "op", "recovery", "path", en.Path)
		case at < from:
			// The store had committed past it (every entry of a merged
			// one is before newest-1): it reflects the forgets.
		case applied > 0 && at <= applied:
			// The store applied every document through it before it made
			// its key (a lost store's, at the first start over a new
			// one): it reflects the forgets, and one put there since is
			// not the node's (it opened beyond applied+1). Not a refusal
			// to report at every start until the node commits past it.
			// (Applied 0 is also a key made at checkpoint 1, whose
			// documents are after 0.)
		default:
			got, err := readForgottenDocs(ctx, r, seal, en.Path, merged, from)
			if errors.Is(err, layout.ErrBadForgotten) {
				msg := "forgotten-producers document not believed: skipped"
				if merged {
					msg = "merged " + msg
				}
				lc.e.log.Error(msg, "op", "recovery", "path", en.Path, "err", err)
				continue
			}
			if err != nil {
				return nil, err
			}
			docs = append(docs, got...)
		}
	}
	return docs, nil
}

// applyForgotten applies docs (loadForgotten) to the store.
func (lc *lifecycle) applyForgotten(docs []*layout.Forgotten) error {
	n, err := lc.e.store.ApplyForgotten(docs)
	if err != nil {
		return err
	}
	if n > 0 {
		lc.e.log.Warn("forgot producers again that the state store still held (it is older than their forget)",
			"op", "recovery", "producers", n, "documents", len(docs))
	}
	return nil
}

// listForgotten lists the documents under dir that may be after newest-1:
// names sort by checkpoint (20 digits), so a Pager starts at the first
// one that may be needed and the cost of a start depends on the documents
// since its store's newest commit and on the merged ones, not on every
// one the node ever wrote (the compaction bounds them: compactForgotten).
// Names that sort before it are not documents this node needs (nor
// wrote, when they do not parse); merged names sort after every checkpoint.
func listForgotten(ctx context.Context, r committer.Reader, dir string, newest uint64) ([]committer.Entry, error) {
	pg, ok := r.(committer.Pager)
	if !ok || newest < 2 {
		return r.List(ctx, dir)
	}
	after := fmt.Sprintf("%s%020d", dir, newest-1) // sorts just before <newest-1>-0000.json
	var out []committer.Entry
	for {
		page, err := pg.ListPage(ctx, dir, after, forgottenPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < forgottenPage {
			return out, nil
		}
		after = page[len(page)-1].Path
	}
}

// forgottenPage is how many forgotten-producers documents a start lists at once.
const forgottenPage = 1000

// readForgotten reads and checks the document at name, and checks its
// seal (an ErrBadForgotten when seal does not believe it).
func readForgotten(ctx context.Context, r committer.Reader, seal layout.ForgottenSeal, name string) (*layout.Forgotten, error) {
	return readDoc(ctx, r, name, layout.DecodeForgotten, seal.Check)
}

// readForgottenDocs reads the document at name: a merged one's entries
// after from (readMerged), or the one document (readForgotten).
func readForgottenDocs(ctx context.Context, r committer.Reader, seal layout.ForgottenSeal, name string, merged bool, from uint64) ([]*layout.Forgotten, error) {
	if !merged {
		doc, err := readForgotten(ctx, r, seal, name)
		if err != nil {
			return nil, err
		}
		return []*layout.Forgotten{doc}, nil
	}
	m, err := readMerged(ctx, r, seal, name)
	if err != nil {
		return nil, err
	}
	return m.Docs(from), nil
}

// readMerged is readForgotten for a merged document.
func readMerged(ctx context.Context, r committer.Reader, seal layout.ForgottenSeal, name string) (*layout.ForgottenMerged, error) {
	return readDoc(ctx, r, name, layout.DecodeForgottenMerged, seal.CheckMerged)
}

func readDoc[T any](ctx context.Context, r committer.Reader, name string, decode func(string, io.Reader) (*T, error), check func(string, *T) error) (*T, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer rc.Close()
	doc, err := decode(name, rc)
	if err != nil {
		return nil, err
	}
	if err := check(name, doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// Compaction of the forgotten-producers documents.
//
// Every DELETE and every expiry run publishes a document, and a start
// after a store loss reads them all (loadForgotten): a million producers
// forgotten one DELETE at a time are a million documents. The compaction
// merges a node's documents into merged ones of up to layout.MaxForgotten
// entries (layout.ForgottenMerged) and removes what it merged, so their
// number follows the producers they name, not the forgets.
//
// What the rebuild derives does not change, at any step, crash or not.
// Take as the destination's forget set E every entry (producer, checkpoint,
// epoch) of every document under the node's prefix that a start believes
// (the compaction reads no other: none beyond the checkpoints the node
// used, none that does not parse). What a start does
// with E — per entry: skip it when its checkpoint is before the store's
// newest committed one minus one (never after a rebuild); raise the
// epoch floor above its epoch; forget the producer when the store holds
// it born at or below the epoch, at that epoch or below, with nothing
// committed after the checkpoint (recovery.Store.ApplyForgotten; a
// rebuild's Restore leaves out the producers this forgets, with the same
// predicate, recovery.forgottenAs) — depends only on the entries of E
// that no other entry dominates (same producer, checkpoint and epoch
// at least as high: layout.ForgottenEntry.dominates): the skip, the
// floor and the forget of a dominated entry all follow from its
// dominator's, and the store forgets a producer when any entry says so,
// in whatever order. Each step of a compaction keeps that frontier:
//
//  1. list and read the documents: changes nothing;
//  2. publish merged documents, create-only and durable before Publish
//     returns, holding exactly the frontier of the entries read: adds
//     entries that are copies of entries in E (a publish a crash cuts
//     short leaves a temp name, which no reader takes for a document);
//  3. only then remove the documents read, one by one: each removed entry
//     is dominated by an entry of a merged document already durable. A
//     removal that a power cut undoes brings back entries that are still
//     dominated.
//
// Other compactions (the next run, another process of the node after a
// lease takeover, one before a crash) keep it too, since each removes only
// what a merged document it published first dominates; documents published
// while one runs are not listed by it and stay. Two runs may leave
// entries twice: they cost bytes, never a different rebuild. A document
// that does not parse is never removed (the rebuild skips it anyway; an
// operator may want it).
//
// Merged documents hold their entries' own checkpoints, so the skip by
// the store's newest commit stays per entry. A node older than merged
// documents reports them as not its own and ignores them: running an
// older binary after a compaction loses the forgets it merged.
//
// What stays unbounded: one entry per producer forgotten and not
// forgotten again since (at most layout.MaxForgotten per document). The
// manifests name those producers anyway, and they are what the rebuild
// reads (BENCHMARKS.md "Growth").

// ForgottenCompaction is what one compaction did.
type ForgottenCompaction struct {
	Read    int // documents read and merged (regular and merged ones)
	Written int // merged documents published
	Removed int // documents removed
	Entries int // entries in the merged documents written
}

const (
	// forgottenCompactAt is how many regular documents a periodic
	// compaction waits for; a start after a loss reads at most these and
	// the merged ones.
	forgottenCompactAt = 16
	// forgottenSmallMerged: merged documents under this many bytes are
	// merged again. An entry is at most 194 bytes, at least 30, so a
	// full merged document (MaxForgotten entries) is over it and any
	// merged document left alone holds at least 512 entries.
	forgottenSmallMerged = layout.MaxForgottenDoc / 8
	// forgottenCompactBytes bounds the bytes one compaction reads (by the
	// listing's sizes), so its memory is bounded; the next run goes on.
	forgottenCompactBytes = 16 * layout.MaxForgottenDoc
	// forgottenCompactEvery is how often the compaction loop runs.
	forgottenCompactEvery = time.Hour
)

// CompactForgotten merges this node's forgotten-producers documents into
// merged ones and removes those it merged (see above), whatever their
// number. The compaction loop runs it hourly once forgottenCompactAt
// documents wait; tests call it directly. It returns what it did, also on
// error; an error leaves every forget in the destination, and the next
// run goes on.
func (e *Engine) CompactForgotten(ctx context.Context) (ForgottenCompaction, error) {
	select {
	case <-e.life.ready:
	default:
		return ForgottenCompaction{}, ErrNotReady
	}
	return e.life.compactForgotten(ctx, 1)
}

// compactForgotten compacts when at least atLeast regular documents
// wait.
func (lc *lifecycle) compactForgotten(ctx context.Context, atLeast int) (ForgottenCompaction, error) {
	var res ForgottenCompaction
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	rm, ok2 := lc.e.cfg.Publisher.(committer.Remover)
	if !ok || !ok2 {
		return res, nil
	}
	lc.compactMu.Lock()
	defer lc.compactMu.Unlock()
	node := lc.e.cfg.Node
	dir := path.Dir(layout.ForgottenName(node, 0, 0)) + "/"
	listed, err := r.List(ctx, dir)
	if err != nil {
		return res, fmt.Errorf("compact forgotten producers: list: %w", err)
	}
	// 1. The documents to merge: regular ones in checkpoint order, then
	// the small merged ones, within the bytes of one run. Only documents
	// believed count against them: ones this node did not write, or
	// damaged ones, are read (the start reads them too), left as they
	// are and never keep the run from the node's own behind them. One
	// over the bytes a reader accepts is not read at all.
	// A document beyond the checkpoints this node has used (the one open
	// now is past every After it wrote) is not its own: a start ignores
	// it (loadForgotten's limit), so it is never merged, neither making
	// the node's own entries beyond a start's limit nor getting believed
	// under a merged name.
	lc.e.ing.mu.Lock()
	used := lc.e.ing.openID - 1
	lc.e.ing.mu.Unlock()
	var inputs []committer.Entry
	var regular int
	for _, en := range listed {
		n, after, _, isDoc := layout.ParseForgottenName(en.Path)
		mn, through, _, isMerged := layout.ParseForgottenMergedName(en.Path)
		switch {
		case layout.IsTempName(en.Path) || en.Bytes > layout.MaxForgottenDoc:
			continue
		case isDoc && n == node && after <= used:
			regular++
		case isMerged && mn == node && through <= used && en.Bytes < forgottenSmallMerged:
		default:
			continue
		}
		inputs = append(inputs, en)
	}
	if regular < atLeast {
		return res, nil
	}
	// The store's seal now, not the start's: a store with no commit at
	// its start (new, or rebuilt) believes unsealed documents up to the
	// first checkpoint it opened minus 2 only once it has committed
	// (recovery.Store.ForgottenSeal), and then adopts a lost store's.
	seal, err := lc.e.store.ForgottenSeal()
	if err != nil {
		return res, fmt.Errorf("compact forgotten producers: %w", err)
	}
	var all []layout.ForgottenEntry
	var read []string
	var size int64
	for _, en := range inputs {
		if size+en.Bytes > forgottenCompactBytes && len(read) > 0 {
			break
		}
		var got []layout.ForgottenEntry
		if _, _, _, ok := layout.ParseForgottenName(en.Path); ok {
			d, err := readForgotten(ctx, r, seal, en.Path)
			if err == nil {
				got = d.Entries()
			}
			err = compactReadErr(err)
			if err != nil {
				return res, err
			}
		} else {
			m, err := readMerged(ctx, r, seal, en.Path)
			if err == nil {
				got = m.Entries
			}
			if err = compactReadErr(err); err != nil {
				return res, err
			}
		}
		if got == nil {
			continue // gone (another compaction), or not believed: left as it is
		}
		size += en.Bytes
		all = append(all, got...)
		read = append(read, en.Path)
	}
	res.Read = len(read)
	if len(read) == 0 {
		return res, nil
	}
	// 2. The frontier of what was read, published durably.
	merged := layout.MergeForgotten(all)
	for len(merged) > 0 {
		chunk := merged[:min(len(merged), layout.MaxForgotten)]
		merged = merged[len(chunk):]
		doc := layout.ForgottenMerged{Node: node, Entries: chunk}
		for _, e := range chunk {
			doc.Through = max(doc.Through, e.After)
		}
		if err := lc.seal.SealMerged(&doc); err != nil {
			return res, fmt.Errorf("compact forgotten producers: %w", err)
		}
		body, err := json.Marshal(&doc)
		if err != nil {
			return res, fmt.Errorf("compact forgotten producers: %w", err)
		}
		if err := lc.publishMerged(ctx, &doc, used+1, body); err != nil {
			return res, err
		}
		res.Written++
		res.Entries += len(chunk)
	}
	// 3. Only now, what they hold goes.
	for _, name := range read {
		if err := lc.leaseCheck(); err != nil {
			return res, fmt.Errorf("compact forgotten producers: %w", err)
		}
		if err := rm.Remove(ctx, name); err != nil {
			return res, fmt.Errorf("compact forgotten producers: %w", err)
		}
		res.Removed++
	}
	return res, nil
}

// compactReadErr is what a failed read of a document means to the
// compaction: nil for a document gone (another compaction removed it) or
// not believed (left where it is), the error otherwise.
func compactReadErr(err error) error {
	if err == nil || errors.Is(err, committer.ErrNotFound) || errors.Is(err, layout.ErrBadForgotten) {
		return nil
	}
	return fmt.Errorf("compact forgotten producers: %w", err)
}

// publishMerged publishes doc under the first free merged name of its
// checkpoint and of open, the checkpoint this process has open (a name
// no other process takes: layout.ForgottenMergedName), fenced by the
// lease.
func (lc *lifecycle) publishMerged(ctx context.Context, doc *layout.ForgottenMerged, open uint64, body []byte) error {
	for n := 0; n <= maxForgottenNum; n++ {
		if err := lc.leaseCheck(); err != nil {
			return fmt.Errorf("compact forgotten producers: %w", err)
		}
		err := lc.e.cfg.Publisher.Publish(ctx, layout.ForgottenMergedName(doc.Node, doc.Through, open, n), body)
		if errors.Is(err, committer.ErrExists) {
			continue // an earlier run's (a crash, or a removal that failed)
		}
		if err != nil {
			return fmt.Errorf("compact forgotten producers: %w", err)
		}
		return nil
	}
	return fmt.Errorf("compact forgotten producers: %d merged documents through checkpoint %d: %w",
		maxForgottenNum+1, doc.Through, committer.ErrExists)
}

// compactLoop runs the compaction every forgottenCompactEvery once
// forgottenCompactAt documents wait. Its errors go through the failure
// policy: a stop (a failed fsync, the lease lost) stops the engine; any
// other is logged and the next run retries. It never holds a lock a
// commit or a write takes.
func (lc *lifecycle) compactLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lc.runEvery(ctx, t.C, func() bool {
		res, err := lc.compactForgotten(ctx, forgottenCompactAt)
		if lc.e.health.failOn(err) {
			return true
		}
		if err != nil && ctx.Err() == nil {
			lc.e.log.Warn("forgotten-producers compaction failed; the next one retries", "op", "compact", "err", err,
				"read", res.Read, "written", res.Written, "removed", res.Removed)
		} else if res.Removed > 0 {
			lc.e.log.Info("forgotten-producers documents compacted", "op", "compact",
				"read", res.Read, "written", res.Written, "removed", res.Removed, "entries", res.Entries)
		}
		return false
	})
}
