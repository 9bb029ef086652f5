package server

import (
	"context"
	"fmt"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
)

// errRemoteDown is what fakeRemote answers while it is down.
var errRemoteDown = fmt.Errorf("fake remote down: %w", committer.ErrTransient)

// fakeRemote is an in-memory stand-in for an object store that prepares
// remotely, as S3 does: Prepare starts an "upload" (kept in memory, keyed by
// the final name), Commit completes it (the file is renamed by a local
// committer underneath, so the invariant checker sees the destination),
// Abort removes every upload on the file's name. While down, every remote
// call fails; abortDown fails only the aborts and removals — an abort
// that fails, then heals.
type fakeRemote struct {
	*local.Local
	node string

	mu        sync.Mutex
	seq       int
	uploads   map[string]fakeUpload // by upload id
	down      bool
	abortDown bool
	// onPrepare runs in Prepare after the upload started; an error fails
	// the Prepare and leaves the upload, as a cut connection would.
	onPrepare func(ctx context.Context, f committer.File) error
	aborts    int // failed abort calls
}

type fakeUpload struct {
	name      string
	initiated time.Time
}

var (
	_ committer.Committer      = (*fakeRemote)(nil)
	_ committer.RemotePreparer = (*fakeRemote)(nil)
	_ committer.Sweeper        = (*fakeRemote)(nil)
)

func newFakeRemote(l *local.Local, node string) *fakeRemote {
	return &fakeRemote{Local: l, node: node, uploads: map[string]fakeUpload{}}
}

func (f *fakeRemote) PreparesRemotely() {}

func (f *fakeRemote) set(fn func(f *fakeRemote)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// Uploads returns the names of the incomplete uploads, sorted.
func (f *fakeRemote) Uploads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, u := range f.uploads {
		out = append(out, u.name)
	}
	sort.Strings(out)
	return out
}

// startUpload adds an upload as a crash after the request would leave it.
func (f *fakeRemote) startUpload(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("up%d", f.seq)
	f.uploads[id] = fakeUpload{name: name, initiated: time.Now()}
	return id
}

func (f *fakeRemote) Prepare(ctx context.Context, file committer.File) (committer.File, error) {
	if err := ctx.Err(); err != nil {
		return file, err
	}
	f.mu.Lock()
	down, hook := f.down, f.onPrepare
	f.mu.Unlock()
	if down {
		return file, errRemoteDown
	}
	file.UploadID = f.startUpload(file.Final)
	if hook != nil {
		if err := hook(ctx, file); err != nil {
			return file, fmt.Errorf("prepare %s: %w", file.Final, err)
		}
	}
	return f.Local.Prepare(ctx, file)
}

// CommitUnsynced is Commit: a remote commit owes no sync. Defined so that
// the embedded local committer's batch commit (committer.BatchCommitter)
// is not promoted past the fake's uploads.
func (f *fakeRemote) CommitUnsynced(ctx context.Context, file committer.File) (string, error) {
	return "", f.Commit(ctx, file)
}

// SyncCommits has nothing to sync (see CommitUnsynced).
func (f *fakeRemote) SyncCommits(context.Context, string) error { return nil }

func (f *fakeRemote) Commit(ctx context.Context, file committer.File) error {
	f.mu.Lock()
	if f.down {
		f.mu.Unlock()
		return errRemoteDown
	}
	delete(f.uploads, file.UploadID)
	f.mu.Unlock()
	return f.Local.Commit(ctx, file)
}

func (f *fakeRemote) Abort(ctx context.Context, file committer.File) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("abort %s: %w", file.Final, err)
	}
	f.mu.Lock()
	if f.down || f.abortDown {
		f.aborts++
		f.mu.Unlock()
		return fmt.Errorf("abort %s: %w", file.Final, errRemoteDown)
	}
	for id, u := range f.uploads {
		if u.name == file.Final {
			delete(f.uploads, id)
		}
	}
	f.mu.Unlock()
	return f.Local.Abort(ctx, file)
}

// Leftovers lists the uploads of this node's part files and manifests.
func (f *fakeRemote) Leftovers(ctx context.Context) ([]committer.Leftover, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errRemoteDown
	}
	var out []committer.Leftover
	for id, u := range f.uploads {
		node, _, _, _, ok := layout.ParsePartName(path.Base(u.name))
		if !ok {
			node, _, ok = layout.ParseManifestName(u.name)
		}
		if !ok || node != f.node {
			continue
		}
		out = append(out, committer.Leftover{Kind: committer.LeftoverUpload, Name: u.name, Key: u.name, UploadID: id, Initiated: u.initiated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UploadID < out[j].UploadID })
	return out, nil
}

func (f *fakeRemote) RemoveLeftover(ctx context.Context, l committer.Leftover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.abortDown {
		return errRemoteDown
	}
	if _, ok := f.uploads[l.UploadID]; !ok || l.Kind != committer.LeftoverUpload {
		return fmt.Errorf("remove %s: %w", l.Key, committer.ErrNotFound)
	}
	delete(f.uploads, l.UploadID)
	return nil
}
