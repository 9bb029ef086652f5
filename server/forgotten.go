package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
			return fmt.Errorf("record forgotten producers: %w", err)
		}
		err := lc.e.cfg.Publisher.Publish(ctx, layout.ForgottenName(doc.Node, doc.After, n), body)
		if errors.Is(err, committer.ErrExists) {
			continue // another forget before the same checkpoint
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

// applyForgotten reads this node's forgotten-producers documents written
// after newest (the store's newest committed checkpoint: the store
// reflects every forget before it) and within limit (the ids this node
// reserved: beyond, not its own), and applies them to the store. Documents
// that do not parse are reported and skipped.
func (lc *lifecycle) applyForgotten(ctx context.Context, newest, limit uint64) error {
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		return nil
	}
	dir := path.Dir(layout.ForgottenName(lc.e.cfg.Node, 0, 0)) + "/"
	entries, err := listForgotten(ctx, r, dir, newest)
	if err != nil {
		return fmt.Errorf("list forgotten producers: %w", err)
	}
	var docs []*layout.Forgotten
	for _, en := range entries {
		node, after, _, ok := layout.ParseForgottenName(en.Path)
		switch {
		case layout.IsTempName(en.Path):
		case !ok || node != lc.e.cfg.Node || after > limit:
			lc.e.log.Error("document under this node's forgotten-producers prefix that it did not write: ignored", "op", "recovery", "path", en.Path)
		case after+1 < newest:
			// The store had committed past it: it reflects the forget.
		default:
			doc, err := readForgotten(ctx, r, en.Path)
			if errors.Is(err, layout.ErrBadForgotten) {
				lc.e.log.Error("forgotten-producers document not believed: skipped", "op", "recovery", "path", en.Path, "err", err)
				continue
			}
			if err != nil {
				return err
			}
			docs = append(docs, doc)
		}
	}
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
// since its store's newest commit, not on every one the node ever wrote
// (nothing removes them; I11). Names that sort before it are not
// documents this node needs (nor wrote, when they do not parse).
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

func readForgotten(ctx context.Context, r committer.Reader, name string) (*layout.Forgotten, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer rc.Close()
	return layout.DecodeForgotten(name, rc)
}
