package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"golang.org/x/sync/errgroup"
)

// The commit step, shared by the live checkpoint (server) and the replay on
// start: once a checkpoint is recorded prepared, Finish makes its files
// final, publishes its manifest, commits the table streams' files into
// their tables and records it committed.

// Finisher completes prepared checkpoints: commit every file, publish the
// manifest, commit the tables, record "committed". Each step is idempotent, so Finish can run
// again after any failure or crash.
type Finisher struct {
	Store     *Store
	Committer committer.Committer
	Publisher committer.Publisher
	Node      string
	Retain    int
	// Parallel bounds concurrent file commits; <= 0 means DefaultParallel.
	Parallel int
	// Fence, when set, is asked before the files are committed and before
	// the manifest is published: an error (the node's lease is not held)
	// stops Finish before it writes to the destination.
	Fence func() error
	// Displace, when set, is asked about a file whose Commit failed: it
	// returns the file under another final name to commit instead, and
	// true, when err says the destination refuses the name for good (the
	// failure policy decides). Since a re-commit after a crash must land
	// where the first one did, a displaced file is tried wherever the
	// first name fails for good, ErrLost included (the temp may have moved
	// there already). Nil: no file is displaced.
	Displace func(f committer.File, err error) (committer.File, bool)
	// Lost, when set, says whether err, a file's failed commit, means
	// the file is gone for good: neither its staged data nor a final file
	// exists, under its name or its displaced one (the failure policy
	// decides). No retry and no operator brings it back, so the
	// checkpoint is recorded committed without it instead of holding
	// back every later one — and the start, when the replay meets it: a
	// checkpoint a store put back from an older copy holds prepared,
	// committed since and its files removed by a retention job, or one
	// whose staging files were lost before it committed. Its sequence
	// numbers stay (I12: the next_seq init answered stays valid); Gone
	// is told. f is the file as prepared (its staging file under the
	// name it was recorded with). Nil: a lost file fails Finish, which is
	// retried.
	Lost func(f committer.File, err error) bool
	// Gone, when set, is told of the files of checkpoint id that Finish
	// recorded committed without (Lost), once the record holds it;
	// published says whether the checkpoint's manifest was there already
	// (it was committed before, its files removed since).
	Gone func(id uint64, files []committer.File, published bool)
	// Tables, when set, commits the checkpoint's files of table streams
	// into their tables after the manifest is published and before the
	// checkpoint is recorded committed (docs/design.md "Tables"). Nil: no
	// table step.
	Tables Tables
	// Park, when set, is asked about a table stream whose table commit
	// failed: true parks it (the failure policy says no retry cures
	// err). A parked stream's table commit is recorded with the
	// checkpoint (Store.CommitParking) instead of holding back the
	// checkpoint and so every other stream; so are its later
	// checkpoints', behind it, until the engine lands them in order
	// (docs/tables.md "Parked tables"). Nil: nothing is parked, a failure
	// is Finish's.
	Park func(stream string, err error) bool
	// Parked, when set, is told of each table commit Finish parked, once
	// the checkpoint's record holds it.
	Parked func(p Parked)
}

// Tables commits checkpoints into table formats (internal/table).
type Tables interface {
	// Commit appends files (those of table streams; others are skipped)
	// to their tables as node's checkpoint, exactly once: a checkpoint
	// the table holds already is success. Safe to call again after any
	// failure or crash.
	Commit(ctx context.Context, node string, checkpoint uint64, files []committer.File) error
}

// DefaultParallel is how many files eosink pre-commits or commits at once
// unless configured otherwise (server.Config.Parallel, Finisher.Parallel).
const DefaultParallel = 8

// Finish commits checkpoint c, which must be recorded prepared.
func (f *Finisher) Finish(ctx context.Context, c *Checkpoint) error {
	par := f.Parallel
	if par <= 0 {
		par = DefaultParallel
	}
	if err := f.fence(); err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", c.ID, err)
	}
	name := layout.ManifestName(f.Node, c.ID)
	early := f.stageManifest(ctx, name, c, par)
	defer early.discard()
	// The record's row is read and decoded while the files commit too (a
	// read: no file system operation, nothing the fault sweep orders).
	draft := make(chan *CommitDraft, 1)
	go func() {
		d, _ := f.Store.DraftCommit(c.ID) // without one, the record decodes the row itself
		draft <- d
	}()
	defer func() {
		if draft != nil {
			<-draft
		}
	}()
	// Every file is tried, whatever the others do: errors are kept, not
	// used to cancel.
	files, lost, err := f.commitFiles(ctx, c.Files, par)
	if err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", c.ID, err)
	}
	var moved []committer.File // nil unless a file was displaced
	for i := range files {
		if files[i].Final != c.Files[i].Final {
			moved = files
			break
		}
	}
	if err := f.fence(); err != nil {
		return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
	}
	body, err := f.publish(ctx, name, c, moved, early)
	published := errors.Is(err, committer.ErrExists)
	if published {
		// Published by an earlier try — if it holds these bytes (they are
		// deterministic). Other bytes mean the id was used before, by a
		// state store since lost: never call that published.
		if err := f.sameManifest(ctx, name, body); err != nil {
			return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
		}
	} else if err != nil {
		return fmt.Errorf("commit checkpoint %d: manifest: %w", c.ID, err)
	}
	// The table commit follows the manifest: a rebuild after a lost state
	// store counts the checkpoint by its manifest, and the start finishes
	// the table commits of each table stream's newest manifests if the
	// table lacks them (docs/tables.md "Parked tables"). A table holds no
	// checkpoint that no manifest names.
	var parked []Parked
	if f.Tables != nil {
		if err := f.fence(); err != nil {
			return fmt.Errorf("commit checkpoint %d: table: %w", c.ID, err)
		}
		if parked, err = f.commitTables(ctx, c.ID, present(files, lost)); err != nil {
			return fmt.Errorf("commit checkpoint %d: table: %w", c.ID, err)
		}
	}
	dur := time.Since(c.StartedAt).Milliseconds()
	d := <-draft
	draft = nil
	if err := f.Store.CommitParking(c.ID, moved, time.Now(), dur, f.Retain, d, parked); err != nil {
		return fmt.Errorf("commit checkpoint %d: record: %w", c.ID, err)
	}
	if f.Parked != nil {
		for _, p := range parked {
			f.Parked(p)
		}
	}
	if f.Gone != nil && len(lost) > 0 {
		f.Gone(c.ID, lost, published)
	}
	if moved != nil {
		c.Files = moved // the caller's answer names them where they are
	}
	return nil
}

// commitTables commits files of table streams into their tables as
// checkpoint id, stream by stream, and returns the table commits to park
// with the checkpoint's record: those of streams parked already (the
// store's rows, which they must not overtake) and those whose commit
// failed in a way Park parks. Any other failure is returned (all of
// them, joined): Finish fails and is tried again, these commits too.
func (f *Finisher) commitTables(ctx context.Context, id uint64, files []committer.File) ([]Parked, error) {
	byStream := map[string][]committer.File{}
	var streams []string
	for _, file := range files {
		if file.Table == "" {
			continue
		}
		if byStream[file.Stream] == nil {
			streams = append(streams, file.Stream)
		}
		byStream[file.Stream] = append(byStream[file.Stream], file)
	}
	if len(streams) == 0 {
		return nil, nil
	}
	sort.Strings(streams)
	var behind map[string]bool
	if f.Park != nil {
		var err error
		if behind, err = f.Store.ParkedStreams(); err != nil {
			return nil, err
		}
	}
	var parked []Parked
	var errs []error
	now := time.Now()
	for _, s := range streams {
		if behind[s] {
			parked = append(parked, Parked{Stream: s, Checkpoint: id, Files: byStream[s], At: now,
				Error: "an earlier checkpoint's table commit of the stream is parked"})
			continue
		}
		err := f.Tables.Commit(ctx, f.Node, id, byStream[s])
		switch {
		case err == nil:
		case f.Park != nil && f.Park(s, err):
			parked = append(parked, Parked{Stream: s, Checkpoint: id, Files: byStream[s], At: now, Error: err.Error()})
		default:
			errs = append(errs, err)
		}
	}
	return parked, errors.Join(errs...)
}

// earlyManifest is a manifest staged while the files commit
// (stageManifest): the bytes it holds, and what staged them.
type earlyManifest struct {
	done   chan struct{} // closed when staging ended; nil: nothing staged
	body   []byte
	staged committer.Staged
	err    error
	used   bool // Publish consumed it
}

// stageManifest starts writing c's manifest where readers never look
// (committer.StagedPublisher), built from c's files as prepared, so that
// its write and fsync run while the files commit and only its publish
// waits for them. With par 1 (one operation at a time: the fault sweep
// walks one order) it is staged before the files, not beside them.
// Nothing is staged when the publisher cannot stage.
func (f *Finisher) stageManifest(ctx context.Context, name string, c *Checkpoint, par int) *earlyManifest {
	sp, ok := f.Publisher.(committer.StagedPublisher)
	if !ok {
		return &earlyManifest{}
	}
	m := &earlyManifest{done: make(chan struct{})}
	ck := *c // Finish may name displaced files in c when it is done
	stage := func() {
		defer close(m.done)
		if m.body, m.err = BuildManifest(f.Node, &ck); m.err == nil {
			m.staged, m.err = sp.Stage(ctx, name, m.body)
		}
	}
	if par == 1 {
		stage()
	} else {
		go stage()
	}
	return m
}

// discard waits for the staging to end and removes what it wrote unless
// it was published. The temp copy is only an optimisation: a failure to
// remove it leaves it to the replay's sweep of the staging directory.
func (m *earlyManifest) discard() {
	if m.done == nil {
		return
	}
	<-m.done
	if m.staged != nil && !m.used {
		_ = m.staged.Discard()
	}
}

// publish publishes c's manifest as name and returns its bytes: the copy
// staged while the files committed when no file was displaced (moved nil:
// the files are c's, so the bytes are the same), else one built from the
// files as committed, published as Publisher.Publish does. A staging
// whose fsync failed is the publish's failure, not tried again (a failed
// fsync stops the engine); any other failure of it (no staging directory:
// Stage makes none) leaves the publish to Publisher.Publish.
func (f *Finisher) publish(ctx context.Context, name string, c *Checkpoint, moved []committer.File, early *earlyManifest) ([]byte, error) {
	if early.done != nil {
		<-early.done
		if errors.Is(early.err, durable.ErrSync) {
			return nil, early.err
		}
		if early.err == nil && moved == nil {
			early.used = true
			return early.body, early.staged.Publish(ctx)
		}
		early.discard()
	}
	committed := *c
	if moved != nil {
		committed.Files = moved
	}
	body, err := BuildManifest(f.Node, &committed)
	if err != nil {
		return nil, err
	}
	return body, f.Publisher.Publish(ctx, name, body)
}

// commitFiles commits every file, par at a time, and returns them as
// committed (some may be displaced) and those lost (Lost), which are
// not committed and owe no sync. Every file is tried, whatever the
// others do: errors are kept, not used to cancel.
//
// A committer.BatchCommitter commits every file first and then syncs each
// token once, after all the commits that returned it (local: one fsync per
// final directory, not per file). Only when every sync succeeded are the
// files committed; a failed sync is never retried here.
func (f *Finisher) commitFiles(ctx context.Context, in []committer.File, par int) ([]committer.File, []committer.File, error) {
	files := append([]committer.File(nil), in...)
	errs := make([]error, len(files))
	tokens := make([]string, len(files))
	gone := make([]bool, len(files))
	bc, batch := f.Committer.(committer.BatchCommitter)
	commit := func(file committer.File) (string, error) { return "", f.Committer.Commit(ctx, file) }
	if batch {
		commit = func(file committer.File) (string, error) { return bc.CommitUnsynced(ctx, file) }
	}
	var g errgroup.Group
	g.SetLimit(par)
	for i := range files {
		g.Go(func() error { files[i], tokens[i], gone[i], errs[i] = f.commitFile(files[i], commit); return nil })
	}
	_ = g.Wait() // the goroutines return nil; errs has their errors
	var lost []committer.File
	for i := range files {
		if gone[i] {
			lost = append(lost, files[i])
		}
	}
	if err := errors.Join(errs...); err != nil || !batch {
		return files, lost, err
	}
	seen := make(map[string]bool)
	var owed []string
	for _, t := range tokens {
		if t != "" && !seen[t] {
			seen[t] = true
			owed = append(owed, t)
		}
	}
	errs = make([]error, len(owed))
	g = errgroup.Group{}
	g.SetLimit(par)
	for i, t := range owed {
		g.Go(func() error { errs[i] = bc.SyncCommits(ctx, t); return nil })
	}
	_ = g.Wait()
	return files, lost, errors.Join(errs...)
}

// present returns files without those in lost.
func present(files, lost []committer.File) []committer.File {
	if len(lost) == 0 {
		return files
	}
	gone := make(map[string]bool, len(lost))
	for _, l := range lost {
		gone[l.Final] = true
	}
	var out []committer.File
	for _, file := range files {
		if !gone[file.Final] {
			out = append(out, file)
		}
	}
	return out
}

// commitFile commits file with commit, or its displaced form when the
// destination refuses its name for good (Displace). It returns the file as
// committed and the sync it owes, or true when it is lost (Lost: under
// its name and, when displaced, under that one too).
func (f *Finisher) commitFile(file committer.File, commit func(committer.File) (string, error)) (committer.File, string, bool, error) {
	token, err := commit(file)
	if err == nil {
		return file, token, false, nil
	}
	lost := f.Lost != nil && f.Lost(file, err)
	if f.Displace == nil {
		return file, "", lost, unlessLost(lost, err)
	}
	moved, ok := f.Displace(file, err)
	if !ok {
		return file, "", lost, unlessLost(lost, err)
	}
	moved.DisplacedFrom = file.Final
	token, derr := commit(moved)
	if derr != nil {
		// Displace took err for a refusal for good (or a loss) of the
		// name: the file can't be there (a path that can't exist, a
		// name holding other content), so lost under its displaced name
		// it is lost, whatever err was.
		lost = f.Lost != nil && f.Lost(file, derr)
		return file, "", lost, unlessLost(lost, fmt.Errorf("%w; displaced to %s: %w", err, moved.Final, derr))
	}
	return moved, token, false, nil
}

// unlessLost is err, or nil when the file is lost: Finish goes on without it.
func unlessLost(lost bool, err error) error {
	if lost {
		return nil
	}
	return err
}

func (f *Finisher) fence() error {
	if f.Fence == nil {
		return nil
	}
	return f.Fence()
}

// sameManifest checks that the manifest published at name holds body. A
// Publisher that cannot be read (not a committer.Reader) is trusted.
func (f *Finisher) sameManifest(ctx context.Context, name string, body []byte) error {
	r, ok := f.Publisher.(committer.Reader)
	if !ok {
		return nil
	}
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("read existing %s: %w", name, err)
	}
	defer rc.Close()
	have, err := io.ReadAll(io.LimitReader(rc, int64(len(body))+1))
	if err != nil {
		return fmt.Errorf("read existing %s: %w", name, err)
	}
	if !bytes.Equal(have, body) && !sameButDisplacedFrom(have, body) {
		return fmt.Errorf("%w: %s exists with other content (a checkpoint id used before, by a lost or older state store?)", committer.ErrConflict, name)
	}
	return nil
}

// sameButDisplacedFrom reports whether manifests a and b differ only in
// their files' displaced_from, which versions before it was kept did not
// write: a checkpoint such a version published before a crash is replayed
// by this one.
func sameButDisplacedFrom(a, b []byte) bool {
	var ma, mb layout.Manifest
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return false
	}
	for _, m := range []*layout.Manifest{&ma, &mb} {
		for i := range m.Files {
			m.Files[i].DisplacedFrom = ""
		}
	}
	ea, erra := layout.EncodeManifest(&ma)
	eb, errb := layout.EncodeManifest(&mb)
	return erra == nil && errb == nil && bytes.Equal(ea, eb) && bytes.Equal(ea, a)
}
