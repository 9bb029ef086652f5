// Package faultfs owns the crash-test tooling for code that does local file
// I/O through an [afero.Fs]: a file system that remembers what was made
// durable ([CrashFS]) and a wrapper that counts operations and fails the
// chosen one ([InjectFS]). Both are safe for concurrent use.
//
// # Durability model
//
// CrashFS keeps inodes in memory. A directory maps names to inodes; a regular
// file has its current content and its synced content. Two kinds of state
// exist side by side:
//
//   - Current state is what the running process sees: every create, write,
//     truncate, rename, remove and mkdir applies to it at once.
//   - Durable state is what a power cut would leave. It changes only on Sync:
//     File.Sync on a regular file makes the file's current content its synced
//     content; File.Sync on a directory handle (fs.Open(dir) then Sync) makes
//     the directory's current set of entries (name to inode, subdirectories
//     included) its durable set of entries.
//
// So a new name is durable only once its parent directory is synced, and the
// bytes behind it only once the file is synced. A rename adds an entry to the
// destination directory and removes one from the source directory; each half
// becomes durable when its own directory is synced. After a power cut both
// names may therefore exist, naming the same inode (as Linux rename(2)
// allows), or neither change may have happened. Truncation is a content
// change, durable on the file's Sync. File metadata (mode, times) is not
// tracked for durability.
//
// [CrashFS.CrashClone] builds the file system a power cut would leave: from
// the root, which always exists, it follows the durable entries of each
// durable directory; each file gets its inode's synced content (empty if the
// file was never synced). Names that durably share an inode share it in the
// clone too, like hard links. A directory reached through a second durable
// name (possible only after directory renames synced on one side) keeps only
// its first name in sorted depth-first order, as a directory has one parent.
//
// # Fault injection
//
// [InjectFS] wraps any afero.Fs and the files it returns. Before each
// operation it asks an [Injector], passing an [Op] with the operation's
// [OpKind], path and global sequence index; a non-nil answer fails the
// operation without performing it, wrapped in *os.PathError (or
// *os.LinkError for Rename) the way the OS reports errors. [FailNth] fails
// one operation with an errno such as syscall.EIO or syscall.ENOSPC;
// [ShortWriteNth] makes one write write half its buffer before failing, as a
// full disk does; [CrashAfter] lets the n-th operation through and fails every
// later one with [ErrCrashed], as if the process died right after it.
// [InjectFS.Count] reports how many operations of given kinds ran, so a test
// can sweep the failure point over 0, 1, 2, … until a run succeeds.
//
// A typical crash test runs the workload on an InjectFS over a CrashFS with a
// CrashAfter injector, then recovers on CrashFS.CrashClone (power cut) or on
// the CrashFS itself (process crash, page cache intact) and checks its
// invariants.
package faultfs
