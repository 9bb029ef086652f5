package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

var (
	_ committer.Leaser    = (*Local)(nil)
	_ committer.LockOwner = (*Local)(nil)
)

// defaultStaleLock is how old a lease lock file must be before a writer
// breaks it: the lock is held for one read, one small write and two fsyncs,
// so a lock this old belongs to a process that died holding it.
const defaultStaleLock = 10 * time.Second

// ReadLease reads name; its version is a digest of its content (every
// lease write changes the expiry, so the content never repeats).
func (l *Local) ReadLease(_ context.Context, name string) ([]byte, string, error) {
	data, err := l.readLease(name)
	if err != nil {
		return nil, "", err
	}
	return data, digest(data), nil
}

func (l *Local) readLease(name string) ([]byte, error) {
	f, err := l.FS.Open(l.abs(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read lease %s: %w", name, committer.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read lease %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read lease %s: %w", name, err)
	}
	return data, nil
}

// WriteLease writes name create-only (version "") or compare-and-swap.
//
// What a local file system guarantees, and what it does not:
//
//   - Create-only is atomic: the document is written to a temp file and
//     renamed without replacing (renameat2 RENAME_NOREPLACE, or link and
//     unlink), so of two nodes creating the lease at once exactly one wins,
//     also across processes and hosts sharing the file system (on NFS,
//     link(2) is atomic on the server).
//   - Compare-and-swap has no single system call. It is read, compare, write
//     a temp file, rename over, under a lock file created with O_EXCL next
//     to the lease (<name>.lock). Writers that all go through the lock are
//     serialized. The lock names its writer (SetLockOwner): one naming a
//     writer known dead is removed at once; any other lock older than
//     StaleLock (10 s) is taken to belong to a dead process and removed,
//     so a writer paused for longer than that while holding the lock
//     (SIGSTOP, a VM freeze) can race the next one.
//   - Nothing fences a writer that checked its lease and is then paused
//     past the expiry: leases are time-based, and file systems take no
//     fencing tokens. The engine stops committing well before the expiry
//     (see server/lease.go) to leave a margin for ordinary delays.
func (l *Local) WriteLease(_ context.Context, name string, data []byte, version string) (string, error) {
	l.leaseMu.Lock()
	defer l.leaseMu.Unlock()
	final := l.abs(name)
	if err := l.dirs.MkdirAll(l.FS, path.Dir(final)); err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	if err := l.dirs.MkdirAll(l.FS, l.Staging); err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(l.Staging, strings.ReplaceAll(name, "/", "_")+"."+hex.EncodeToString(rnd[:])+".lease"+layout.TempSuffix)
	if version == "" {
		err := durable.WriteFile(l.FS, &l.dirs, tmp, final, data)
		if errors.Is(err, fs.ErrExist) {
			_ = l.FS.Remove(tmp)
			return "", fmt.Errorf("write lease %s: %w", name, committer.ErrExists)
		}
		if err != nil {
			return "", fmt.Errorf("write lease %s: %w", name, err)
		}
		return digest(data), nil
	}
	unlock, err := l.lockLease(final)
	if err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	defer unlock()
	have, err := l.readLease(name)
	if errors.Is(err, committer.ErrNotFound) {
		return "", fmt.Errorf("write lease %s: gone: %w", name, committer.ErrPrecondition)
	}
	if err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	if digest(have) != version {
		return "", fmt.Errorf("write lease %s: %w", name, committer.ErrPrecondition)
	}
	if err := durable.ReplaceFile(l.FS, tmp, final, data); err != nil {
		return "", fmt.Errorf("write lease %s: %w", name, err)
	}
	return digest(data), nil
}

// SetLockOwner names the writer in the lock files it takes from now on,
// and the writers known dead whose locks it breaks at once.
func (l *Local) SetLockOwner(owner string, dead []string) {
	l.leaseMu.Lock()
	defer l.leaseMu.Unlock()
	l.owner, l.dead = owner, slices.Clone(dead)
}

// lockLease takes the lock file of a lease and returns its release. The
// lock is born named: the owner is written to a synced temp file that is
// renamed without replacing to the lock's name, so a lock is never seen
// (nor left by a crash or a power cut) without its owner. A lock left by a
// dead writer is broken: at once when it names a writer known dead, or
// this owner (leaseMu is held: no write of ours has it); otherwise once it
// is older than StaleLock. The caller holds leaseMu.
func (l *Local) lockLease(final string) (func(), error) {
	lock := final + ".lock"
	stale := l.StaleLock
	if stale <= 0 {
		stale = defaultStaleLock
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(l.Staging, path.Base(lock)+"."+hex.EncodeToString(rnd[:])+layout.TempSuffix)
	f, err := l.FS.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", durable.Classify(err))
	}
	if _, err := f.WriteString(l.owner); err != nil {
		_ = f.Close()
		_ = l.FS.Remove(tmp)
		return nil, fmt.Errorf("lock: %w", durable.Classify(err))
	}
	if err := durable.SyncClose(f); err != nil {
		_ = l.FS.Remove(tmp)
		return nil, fmt.Errorf("lock: %w", err)
	}
	for attempt := 0; ; attempt++ {
		err := durable.RenameNoReplace(l.FS, tmp, lock)
		if err == nil {
			mine := func(holder string, _ time.Time) bool { return holder == l.owner }
			return func() { l.breakLock(lock, mine) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			_ = l.FS.Remove(tmp)
			return nil, fmt.Errorf("lock: %w", err)
		}
		dead := func(holder string, modified time.Time) bool {
			return l.deadHolder(holder) || time.Since(modified) > stale
		}
		if l.judgeLock(lock, dead) && l.breakLock(lock, dead) {
			continue
		}
		if attempt >= 100 {
			_ = l.FS.Remove(tmp)
			return nil, fmt.Errorf("lock: %s held: %w", lock, committer.ErrTransient)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadHolder reports whether holder, a lock's content, is this owner or a
// writer known dead. An unnamed lock (a writer without SetLockOwner) is
// left to the stale age.
func (l *Local) deadHolder(holder string) bool {
	return holder != "" && (holder == l.owner || slices.Contains(l.dead, holder))
}

// judgeLock applies judge to the lock file as it is now.
func (l *Local) judgeLock(lock string, judge func(holder string, modified time.Time) bool) bool {
	data, err := afero.ReadFile(l.FS, lock)
	if err != nil {
		return false
	}
	fi, err := l.FS.Stat(lock)
	return err == nil && judge(string(data), fi.ModTime())
}

// breakLock moves the lock aside (one atomic rename) and removes what it
// moved if judge still says so; otherwise it puts it back for its holder.
// Judging the file moved, not the one looked at before, means a lock that
// another writer took in between is never removed: two breakers of one
// dead lock cannot both get in (found by review: check-then-remove let
// both compare-and-swaps succeed).
func (l *Local) breakLock(lock string, judge func(holder string, modified time.Time) bool) bool {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	aside := path.Join(l.Staging, path.Base(lock)+"."+hex.EncodeToString(rnd[:])+".broken"+layout.TempSuffix)
	if err := l.FS.Rename(lock, aside); err != nil {
		return false // gone already: the caller tries again
	}
	if l.judgeLock(aside, judge) {
		_ = l.FS.Remove(aside)
		return true
	}
	if err := durable.RenameNoReplace(l.FS, aside, lock); err != nil {
		_ = l.FS.Remove(aside) // a newer lock is there: its holder goes on
	}
	return false
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}
