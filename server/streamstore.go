package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
)

// Stream configurations in the destination (DESIGN layout:
// _streams/<stream>.json, "a lost state store restores it").
//
// The state store is where a configuration is recorded; the destination
// keeps a copy so that a node whose store was lost (or restored from an
// older copy) gets back what PUT accepted instead of reverting every stream
// to the defaults. The document is recovery.StreamConfig's JSON: the stream,
// its configuration with its version, and when it was accepted. A PUT
// writes it after the store recorded it (atomically, compare-and-swap over
// the version it read, never over a newer version). At start, after the
// lease is taken, the node lists _streams/ and reads each document (one
// read per configured stream): a document of a stream the store lacks, or
// of a newer version than the store's (a store restored from an older
// copy), is restored into the store with its version, and a stream of the
// store that has no document (a write that failed after the store's) is
// written.
//
// What is read is checked before it is believed: a name through
// layout.ParseStreamConfName, a size bound, a strict decode, the stream
// named inside equal to the name, a version within bounds and a valid
// configuration. Anything else is reported in the log and skipped.
// Without a leaser (a destination that keeps no lease) none of this runs.

// streamDocMax bounds a stream document read from the destination. A
// configuration is a schema of at most streamconf.MaxFields fields.
const streamDocMax = 1 << 20

// streamVersionMax bounds a version read from the destination: versions
// count PUTs, an admin's act.
const streamVersionMax = 1 << 40

// encodeStreamDoc is the document of rec.
func encodeStreamDoc(rec recovery.StreamConfig) ([]byte, error) {
	data, err := json.MarshalIndent(&rec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode stream %s configuration: %w", rec.Stream, err)
	}
	return append(data, '\n'), nil
}

// parseStreamDoc reads and checks the document of stream.
func parseStreamDoc(stream string, data []byte) (recovery.StreamConfig, error) {
	var rec recovery.StreamConfig
	if len(data) > streamDocMax {
		return rec, fmt.Errorf("%d bytes, more than %d", len(data), streamDocMax)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return rec, errors.New("decode: data after the document")
	}
	switch {
	case rec.Stream != stream:
		return rec, fmt.Errorf("names stream %q", rec.Stream)
	case rec.Config.Version < 1 || rec.Config.Version > streamVersionMax:
		return rec, fmt.Errorf("version %d out of bounds", rec.Config.Version)
	}
	if err := rec.Config.Validate(); err != nil {
		return rec, err
	}
	rec.Config = rec.Config.Defaults()
	return rec, nil
}

// readStreamDoc reads stream's document and its version ("" when there is
// none, or it is not a valid one: then any version of ours replaces it).
func (e *Engine) readStreamDoc(ctx context.Context, stream string) (recovery.StreamConfig, string, bool, error) {
	name := layout.StreamConfName(stream)
	data, version, err := e.cfg.Leaser.ReadLease(ctx, name)
	if errors.Is(err, committer.ErrNotFound) {
		return recovery.StreamConfig{}, "", false, nil
	}
	if err != nil {
		return recovery.StreamConfig{}, "", false, fmt.Errorf("read %s: %w", name, err)
	}
	rec, err := parseStreamDoc(stream, data)
	if err != nil {
		e.log.Error("stream configuration in the destination is not valid: replacing it", "stream", stream, "path", name, "err", err)
		return recovery.StreamConfig{}, version, false, nil
	}
	return rec, version, true, nil
}

// writeStreamDoc writes rec as its stream's document unless the one there
// has a newer version, swapping from the version it read.
func (e *Engine) writeStreamDoc(ctx context.Context, rec recovery.StreamConfig) error {
	if e.cfg.Leaser == nil {
		return nil
	}
	data, err := encodeStreamDoc(rec)
	if err != nil {
		return err
	}
	name := layout.StreamConfName(rec.Stream)
	for range 8 {
		cur, version, ok, err := e.readStreamDoc(ctx, rec.Stream)
		if err != nil {
			return err
		}
		if ok && cur.Config.Version > rec.Config.Version {
			return nil // a newer one is there already
		}
		if err := e.life.leaseCheck(); err != nil {
			return err
		}
		_, err = e.cfg.Leaser.WriteLease(ctx, name, data, version)
		if errors.Is(err, committer.ErrExists) || errors.Is(err, committer.ErrPrecondition) {
			continue // written meanwhile: look again
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("write %s: %w: changed by another writer at every try", name, committer.ErrTransient)
}

// replaceStreamDoc writes rec as its stream's document over the one read
// at version, whatever that one's version (a document the store's
// configuration can't change to: see syncStreamsOnce). A document written
// meanwhile is an error: the caller's retry reads and judges it.
func (lc *lifecycle) replaceStreamDoc(ctx context.Context, rec recovery.StreamConfig, version string) error {
	data, err := encodeStreamDoc(rec)
	if err != nil {
		return err
	}
	if err := lc.leaseCheck(); err != nil {
		return err
	}
	name := layout.StreamConfName(rec.Stream)
	if _, err := lc.e.cfg.Leaser.WriteLease(ctx, name, data, version); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}

// putStreamDoc writes rec, just recorded and put in force by PUT, to the
// destination. An error leaves it recorded and in force; the next start
// writes it (syncStreams).
func (e *Engine) putStreamDoc(ctx context.Context, rec recovery.StreamConfig) error {
	if err := e.writeStreamDoc(ctx, rec); err != nil {
		return fmt.Errorf("put stream %s: recorded (version %d, in force) but not written to the destination: %w",
			rec.Stream, rec.Config.Version, err)
	}
	return nil
}

// syncStreams restores stream configurations from the destination into
// the state store and writes back those the destination lacks, once the
// lease is taken and before recovery. It retries what may pass.
func (lc *lifecycle) syncStreams(ctx context.Context) bool {
	if lc.e.cfg.Leaser == nil {
		return true
	}
	r, ok := lc.e.cfg.Publisher.(committer.Reader)
	if !ok {
		if r, ok = lc.e.cfg.Committer.(committer.Reader); !ok {
			return true
		}
	}
	return lc.retry(ctx, "restore stream configurations from the destination", error.Error, func() error {
		return lc.syncStreamsOnce(ctx, r)
	})
}

func (lc *lifecycle) syncStreamsOnce(ctx context.Context, r committer.Reader) error {
	entries, err := r.List(ctx, layout.StreamDir+"/")
	if err != nil {
		return fmt.Errorf("list stream configurations: %w", err)
	}
	all, err := lc.e.store.Streams()
	if err != nil {
		return fmt.Errorf("load stream configurations: %w", err)
	}
	inStore := make(map[string]int64, len(all)) // the store's version of each stream
	stored := make(map[string]recovery.StreamConfig, len(all))
	for _, rec := range all {
		inStore[rec.Stream] = rec.Config.Version
		stored[rec.Stream] = rec
	}
	inDest := map[string]bool{}
	restored := 0
	for _, en := range entries {
		stream, ok := layout.ParseStreamConfName(en.Path)
		if !ok {
			// A local compare-and-swap's lock file is no document.
			if !strings.HasSuffix(en.Path, ".json.lock") && !layout.IsTempName(en.Path) {
				lc.e.log.Error("unexpected name among stream configurations: skipped", "path", en.Path)
			}
			continue
		}
		inDest[stream] = true
		if en.Bytes > streamDocMax {
			lc.e.log.Error("stream configuration in the destination too large: skipped", "stream", stream, "path", en.Path, "bytes", en.Bytes)
			continue
		}
		// Read also when the store has the stream: a store restored from
		// an older copy has an older version than the destination, and
		// must not revert the stream to it. (An older document is left to
		// the next PUT: a start takes no lock over a present document.)
		rec, version, ok, err := lc.e.readStreamDoc(ctx, stream)
		if err != nil {
			return err
		}
		if ours, have := inStore[stream]; !ok || have && rec.Config.Version <= ours {
			continue // the store's is the record
		}
		if have, ok := stored[stream]; ok {
			// A change PUT refuses (a table stream made a plain one, a
			// column dropped) is no configuration this stream can take,
			// whoever wrote it: believed, it would wedge the stream, since
			// PUT could not change it back (I13).
			if err := streamconf.CheckChange(have.Config, rec.Config); err != nil {
				lc.e.log.Error("stream configuration in the destination is a change the stream can't take: replaced by the store's, which stays in force",
					"stream", stream, "path", en.Path, "version", rec.Config.Version, "store_version", have.Config.Version, "err", err)
				// Left there, its version above the store's would keep
				// every later PUT of this node out of the destination
				// (writeStreamDoc writes over no newer document), and a
				// lost store would then restore it after all.
				if err := lc.replaceStreamDoc(ctx, have, version); err != nil {
					return err
				}
				continue
			}
		}
		wrote, err := lc.e.store.RestoreStream(rec)
		if err != nil {
			return err
		}
		if wrote {
			restored++
			lc.e.log.Warn("stream configuration restored from the destination: the state store lacked it",
				"stream", stream, "version", rec.Config.Version, "path", en.Path)
		}
	}
	if restored > 0 {
		lc.e.ing.mu.Lock()
		err := lc.e.ing.loadStreams()
		lc.e.health.publishLocked()
		lc.e.ing.mu.Unlock()
		if err != nil {
			return err
		}
	}
	// Ours that the destination lacks (a write after the store's failed,
	// or a store older than this feature): written now.
	for _, rec := range all {
		if !inDest[rec.Stream] {
			if err := lc.e.writeStreamDoc(ctx, rec); err != nil {
				return err
			}
		}
	}
	return nil
}
