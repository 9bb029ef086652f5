package faultfs

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors returned by this package.
var (
	// ErrCrashed fails every operation after a CrashAfter injector's crash
	// point, as if the process had died.
	ErrCrashed = errors.New("faultfs: process crashed")
)

// OpKind classifies the operations InjectFS counts and can fail.
type OpKind uint8

// Operation kinds. Seek and Name are not operations: they neither touch the
// disk nor fail on a real one.
const (
	OpOpen     OpKind = iota // Fs.Open, Fs.OpenFile, Fs.Create
	OpWrite                  // File.Write, File.WriteAt, File.WriteString
	OpSync                   // File.Sync, on files and directories
	OpClose                  // File.Close
	OpRename                 // Fs.Rename, RenameNoReplace
	OpRemove                 // Fs.Remove, Fs.RemoveAll
	OpMkdir                  // Fs.Mkdir, Fs.MkdirAll
	OpTruncate               // File.Truncate
	OpRead                   // File.Read, File.ReadAt, File.Readdir, File.Readdirnames
	OpStat                   // Fs.Stat, File.Stat
	OpSetAttr                // Fs.Chmod, Fs.Chown, Fs.Chtimes

	numKinds = iota
)

// String returns the kind's lowercase name, such as "sync".
func (k OpKind) String() string {
	switch k {
	case OpOpen:
		return "open"
	case OpWrite:
		return "write"
	case OpSync:
		return "sync"
	case OpClose:
		return "close"
	case OpRename:
		return "rename"
	case OpRemove:
		return "remove"
	case OpMkdir:
		return "mkdir"
	case OpTruncate:
		return "truncate"
	case OpRead:
		return "read"
	case OpStat:
		return "stat"
	case OpSetAttr:
		return "setattr"
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// KindSet is a set of operation kinds.
type KindSet uint16

// AllKinds holds every operation kind.
const AllKinds KindSet = 1<<numKinds - 1

// Kinds returns the set holding kinds.
func Kinds(kinds ...OpKind) KindSet {
	var s KindSet
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in s.
func (s KindSet) Has(k OpKind) bool { return s&(1<<k) != 0 }

// String lists the kinds in s, such as "{write,sync}".
func (s KindSet) String() string {
	var names []string
	for k := range OpKind(numKinds) {
		if s.Has(k) {
			names = append(names, k.String())
		}
	}
	return "{" + strings.Join(names, ",") + "}"
}

// Op describes one operation about to run on an InjectFS.
type Op struct {
	Kind OpKind
	// Path is the name the operation works on: the file's name for file
	// operations, the old name for Rename.
	Path string
	// Index is the operation's 0-based position among all operations of the
	// InjectFS, whatever their kind.
	Index int64
}

// String describes op for test messages, such as "#12 sync /d/f".
func (op Op) String() string {
	return fmt.Sprintf("#%d %s %s", op.Index, op.Kind, op.Path)
}

// Injector decides whether an operation fails.
//
// MaybeError is called before each operation, possibly from many goroutines
// at once. A nil result lets the operation run. Any other error fails it
// without running it; InjectFS returns the error wrapped in *os.PathError (or
// *os.LinkError for Rename) unless it already is one, so raw errnos such as
// syscall.EIO read like the OS's errors. A *ShortWriteError returned for an
// OpWrite makes the write write half its buffer before failing.
type Injector interface {
	MaybeError(op Op) error
}

// ShortWriteError asks InjectFS to perform a write partly, as a full disk
// does: the first half of the buffer (rounded down) is written, then the
// write fails with Err.
type ShortWriteError struct {
	Err error
}

// Error describes the short write.
func (e *ShortWriteError) Error() string { return "short write: " + e.Err.Error() }

// Unwrap returns Err.
func (e *ShortWriteError) Unwrap() error { return e.Err }

// FailNthInjector fails one operation; make it with FailNth or ShortWriteNth.
// It is safe for concurrent use.
type FailNthInjector struct {
	n     int64
	kinds KindSet
	err   error
	short bool

	count atomic.Int64
	mu    sync.Mutex
	fired *Op
}

var _ Injector = (*FailNthInjector)(nil)

// FailNth returns an injector that fails the n-th (0-based) operation whose
// kind is in kinds with err, typically syscall.EIO or syscall.ENOSPC, and
// lets every other operation through.
func FailNth(n int64, kinds KindSet, err error) *FailNthInjector {
	return &FailNthInjector{n: n, kinds: kinds, err: err}
}

// ShortWriteNth returns an injector that makes the n-th (0-based) write write
// the first half of its buffer and then fail with err, typically
// syscall.ENOSPC, and lets every other operation through.
func ShortWriteNth(n int64, err error) *FailNthInjector {
	return &FailNthInjector{n: n, kinds: Kinds(OpWrite), err: err, short: true}
}

// MaybeError fails op if it is the chosen one.
func (f *FailNthInjector) MaybeError(op Op) error {
	if !f.kinds.Has(op.Kind) || f.count.Add(1)-1 != f.n {
		return nil
	}
	f.mu.Lock()
	f.fired = &op
	f.mu.Unlock()
	if f.short {
		return &ShortWriteError{Err: f.err}
	}
	return f.err
}

// Fired returns the operation that was failed, and false if none was: the
// workload ran fewer than n+1 operations of the chosen kinds, which ends a
// sweep over n.
func (f *FailNthInjector) Fired() (Op, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired == nil {
		return Op{}, false
	}
	return *f.fired, true
}

// CrashAfterInjector simulates the process dying right after one operation;
// make it with CrashAfter. It is safe for concurrent use.
type CrashAfterInjector struct {
	n     int64
	kinds KindSet

	count   atomic.Int64
	crashed atomic.Bool
}

var _ Injector = (*CrashAfterInjector)(nil)

// CrashAfter returns an injector that lets the n-th (0-based) operation whose
// kind is in kinds run, and fails every later operation of any kind with
// ErrCrashed.
func CrashAfter(n int64, kinds KindSet) *CrashAfterInjector {
	return &CrashAfterInjector{n: n, kinds: kinds}
}

// MaybeError lets operations through until the crash point, then fails them
// with ErrCrashed.
func (c *CrashAfterInjector) MaybeError(op Op) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	if !c.kinds.Has(op.Kind) {
		return nil
	}
	switch i := c.count.Add(1) - 1; {
	case i == c.n:
		c.crashed.Store(true)
	case i > c.n:
		// A concurrent operation passed the crash point first.
		return ErrCrashed
	}
	return nil
}

// Crashed reports whether the crash point was reached: the n-th operation
// was let through and every later one fails. It is true as soon as that
// operation is let through, before it completes.
func (c *CrashAfterInjector) Crashed() bool { return c.crashed.Load() }

// InjectorFunc is an Injector written as a function.
type InjectorFunc func(op Op) error

var _ Injector = InjectorFunc(nil)

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

// SwapInjector forwards to an injector a test may change while an InjectFS
// runs: faults on for a phase of a test, then off. The zero value, and
// Set(nil), fail nothing. It is safe for concurrent use.
type SwapInjector struct {
	cur atomic.Pointer[Injector]
}

var _ Injector = (*SwapInjector)(nil)

// Set makes inj decide from the next operation on; nil fails nothing.
func (s *SwapInjector) Set(inj Injector) {
	if inj == nil {
		s.cur.Store(nil)
		return
	}
	s.cur.Store(&inj)
}

// MaybeError asks the current injector.
func (s *SwapInjector) MaybeError(op Op) error {
	if p := s.cur.Load(); p != nil {
		return (*p).MaybeError(op)
	}
	return nil
}
