package recovery

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	bolt "go.etcd.io/bbolt"
)

// State of a checkpoint.
type State string

// Checkpoint states.
const (
	Prepared  State = "prepared"
	Committed State = "committed"
	Aborted   State = "aborted"
)

// Errors returned by the store.
var (
	// ErrCorrupt means the state file cannot be trusted; eosink refuses to start.
	ErrCorrupt = errors.New("state store corrupt")
	// ErrNotFound means no such checkpoint or producer.
	ErrNotFound = errors.New("not found")
	// ErrWriteFailed means a write transaction failed in bbolt's commit in
	// a way that may have left the file, or bbolt's view of it, in an
	// unknown state (a failed fdatasync; see bbolt issue #233). The store
	// refuses every later write: close it and open it again, which is what
	// recovery does.
	ErrWriteFailed = errors.New("state store write failed")
	// ErrNotIdle means a producer was active more recently than an expiry
	// allows deleting.
	ErrNotIdle = errors.New("producer not idle")
	// ErrProducerDamaged means one producer's record does not decode. It
	// comes with ErrCorrupt; a caller about that one producer (its init,
	// write, delete) answers it and serves the others.
	ErrProducerDamaged = errors.New("producer record damaged")
)

// DefaultRetain is how many checkpoint ids back rows are kept: older rows
// are deleted at commit, except prepared ones.
const DefaultRetain = 1000

var (
	bucketMeta        = []byte("meta")
	bucketCheckpoints = []byte("checkpoints")
	bucketProducers   = []byte("producers")
	bucketIntents     = []byte("intents")
	bucketPending     = []byte("pending")
	bucketSeqs        = []byte("seqs")
	bucketActive      = []byte("active")
	keyVersion        = []byte("version")
	keyLastID         = []byte("last_id")
	keyPrunedBelow    = []byte("pruned_below")
	keyLastCommitted  = []byte("last_committed")
	// keyEpochFloor is above the epoch of every producer ever forgotten: a
	// producer created again starts there, so a zombie of its forgotten
	// incarnation is fenced (I6) rather than taken for the new one.
	keyEpochFloor = []byte("epoch_floor")
	// keyProducerCount counts the producers bucket's rows, so a start
	// knows how many producers there are without reading them.
	keyProducerCount = []byte("producer_count")
	// keyForgottenKey is the key the node seals its forgotten-producers
	// documents with, and keyForgottenSince the checkpoint after which
	// every one it wrote is sealed (layout.ForgottenSeal).
	keyForgottenKey   = []byte("forgotten_key")
	keyForgottenSince = []byte("forgotten_since")
	// keyRebuiltThrough is the newest checkpoint of the destination's
	// manifests that a rebuild of this store went through: a start counts
	// it as committed when it decides whether the store kept up.
	keyRebuiltThrough = []byte("rebuilt_through")
)

// storeVersion is the state.db format (doc.go); Open migrates versions 1
// and 2.
const storeVersion = 3

// checkOnOpen is how many of the newest checkpoint rows Open decodes to
// catch a damaged file early; start time does not grow with history.
const checkOnOpen = 64

// Checkpoint is the durable record of one checkpoint.
type Checkpoint struct {
	ID          uint64
	State       State
	Files       []committer.File
	FileCount   int
	Records     int64
	Bytes       int64
	StartedAt   time.Time
	PreparedAt  time.Time
	CommittedAt time.Time
	DurationMS  int64
	Error       string
	// Seqs holds, for every (producer, stream) whose state changed in this
	// checkpoint, the next sequence number as of its barrier.
	Seqs map[string]map[string]int64
	// Keys are the idempotency keys of this checkpoint's batches, recorded
	// by Prepare in their own bucket (keys.go), never in this row;
	// KeyPolicy bounds them there.
	Keys      []Key
	KeyPolicy KeyPolicy
}

// StreamSeq is a producer's sequence state on one stream.
type StreamSeq struct {
	NextSeq      int64
	CommittedSeq int64
	// CommittedIn is the checkpoint that committed CommittedSeq; 0 when
	// none, or in records written before it was kept.
	CommittedIn uint64
}

// Producer is the durable state of one producer.
type Producer struct {
	ID      string
	Epoch   int64
	Streams map[string]StreamSeq
	// Active is the producer's last recorded activity: its init, or the
	// barrier of the newest checkpoint that prepared its batches.
	Active time.Time
}

// Store is the bbolt-backed state store. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	opts Options

	mu     sync.Mutex
	broken error // the commit failure that left the store in an unknown state
	// wmu serializes write transactions with the check after a failed
	// one (update): bbolt gives the next writer the failed one's id, so a
	// writer that committed in between would make it look visible.
	wmu sync.Mutex

	decodedOnOpen int // checkpoint rows init decoded; tests check it stays small
	// opened holds the prepared checkpoints init decoded, for the first
	// Pending (the replay) to take instead of decoding them again, as
	// long as the store has not changed since (txid).
	opened struct {
		txid    int
		pending []Checkpoint
	}

	heads *headCache // decoded rows for List and ListBefore

	// version counts write transactions: it changes after every change
	// (and after every failed attempt at one), so readers may keep what
	// they derived from the store until it does (internal/memo).
	version atomic.Uint64
}

// Version returns a number that changes after every write to the store.
// Read it before reading the store: what is read then is at least as new.
func (s *Store) Version() uint64 { return s.version.Load() }

// Phase says where a write transaction's commit is when Options.WriteFault
// is consulted.
type Phase int

// Phases of a write transaction's commit.
const (
	// BeforeCommit is after the transaction's changes are made, before
	// bbolt writes anything: a fault here is one that leaves the file as it
	// was (a page write refused for lack of space).
	BeforeCommit Phase = iota
	// AfterCommit is after bbolt's commit returned: a fault here is one
	// reported after the change may have reached the file (its final
	// fdatasync failed).
	AfterCommit
)

// Options tune Open. The zero value is what eosink runs with.
type Options struct {
	// WriteFault, for tests only, is called at both phases of the commit of
	// every write transaction, with the operation's name ("init producer",
	// "prepare", ...). A non-nil error fails the transaction there as the
	// disk would have: at BeforeCommit the transaction is rolled back and
	// the error returned as bbolt's; at AfterCommit the transaction stays
	// committed and the error is returned as if its fdatasync had failed.
	// The error should look like the OS's: an *os.PathError with Op "write"
	// for a failed page write, a bare syscall.Errno for a failed fdatasync.
	// Both calls run under the store's write lock (update): the hook must
	// not write to the store, which would wait for itself.
	WriteFault func(op string, phase Phase) error
}

// Open opens or creates the state store at path. A file that is not a valid
// store returns an error wrapping ErrCorrupt that names the file.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, opts Options) (s *Store, err error) {
	// bbolt may panic on pages it cannot parse, or fault on its memory map
	// where a corrupt page points outside the file; a corrupt file must be
	// an error naming it, never a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("open state store %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	if fi, serr := os.Stat(path); serr == nil && fi.Size() > 0 && fi.Size() < 4096*2 {
		return nil, fmt.Errorf("open state store %s: %w: file truncated to %d bytes", path, ErrCorrupt, fi.Size())
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open state store %s: locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("open state store %s: %w: %w", path, ErrCorrupt, err)
	}
	s = &Store{db: db, path: path, opts: opts, heads: newHeadCache()}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) corrupt(format string, args ...any) error {
	return fmt.Errorf("open state store %s: %w: %s", s.path, ErrCorrupt, fmt.Sprintf(format, args...))
}

// init creates the buckets, migrates a version 1 store, and checks what a
// start reads: the meta keys, every prepared checkpoint, and the newest
// checkOnOpen checkpoint rows. Producers are checked as recovery reads them.
// A store that needs none of the writes (every bucket there, the current
// version, the producer count kept) is checked in a read transaction: a
// start then writes nothing before the replay (a write transaction is a
// page write and two fdatasyncs).
func (s *Store) init() error {
	var current bool
	err := s.view(func(tx *bolt.Tx) error { current = isCurrent(tx); return nil })
	switch {
	case err != nil:
		return err
	case current:
		err = s.view(s.check)
	default:
		err = s.update("open", func(tx *bolt.Tx) error {
			if err := s.setUp(tx); err != nil {
				return err
			}
			return s.check(tx)
		})
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		return fmt.Errorf("open state store %s: %w", s.path, err)
	}
	return nil
}

// isCurrent reports whether setUp would write nothing.
func isCurrent(tx *bolt.Tx) bool {
	for _, b := range [][]byte{bucketMeta, bucketCheckpoints, bucketProducers, bucketIntents, bucketPending, bucketSeqs, bucketActive} {
		if tx.Bucket(b) == nil {
			return false
		}
	}
	meta := tx.Bucket(bucketMeta)
	v := meta.Get(keyVersion)
	return len(v) == 8 && binary.BigEndian.Uint64(v) == storeVersion && meta.Get(keyProducerCount) != nil
}

// setUp creates the buckets, migrates an older store and counts the
// producers of a store written before the count was kept.
func (s *Store) setUp(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	fresh := meta == nil
	for _, b := range [][]byte{bucketMeta, bucketCheckpoints, bucketProducers, bucketIntents, bucketPending, bucketSeqs, bucketActive} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return s.corrupt("create bucket %s: %v", b, err)
		}
	}
	meta = tx.Bucket(bucketMeta)
	switch v := meta.Get(keyVersion); {
	case v == nil && fresh:
		if err := meta.Put(keyVersion, u64(storeVersion)); err != nil {
			return err
		}
	case len(v) == 8 && binary.BigEndian.Uint64(v) == 1:
		if err := s.migrate1(tx); err != nil {
			return err
		}
		if err := s.migrate2(tx); err != nil {
			return err
		}
	case len(v) == 8 && binary.BigEndian.Uint64(v) == 2:
		if err := s.migrate2(tx); err != nil {
			return err
		}
	case len(v) != 8 || binary.BigEndian.Uint64(v) != storeVersion:
		return s.corrupt("unknown version %x", v)
	}
	if v := meta.Get(keyProducerCount); v != nil && len(v) != 8 {
		return s.corrupt("bad %s %x", keyProducerCount, v)
	}
	if meta.Get(keyProducerCount) == nil {
		// Written before the count was kept: count once, keys only.
		n := uint64(0)
		c := tx.Bucket(bucketProducers).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if err := meta.Put(keyProducerCount, u64(n)); err != nil {
			return err
		}
	}
	return nil
}

// check checks what a start reads (see init) and keeps the prepared
// checkpoints it decoded for the replay (opened).
func (s *Store) check(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	for _, k := range [][]byte{keyLastID, keyLastCommitted, keyPrunedBelow, keyEpochFloor, keyProducerCount, keyForgottenSince, keyRebuiltThrough} {
		if v := meta.Get(k); v != nil && len(v) != 8 {
			return s.corrupt("bad %s %x", k, v)
		}
	}
	cks := tx.Bucket(bucketCheckpoints)
	checked := map[string]bool{}
	s.opened.pending = nil
	if err := tx.Bucket(bucketPending).ForEach(func(k, _ []byte) error {
		if len(k) != 8 {
			return s.corrupt("pending key %x", k)
		}
		c, err := s.checkRow(k, cks.Get(k))
		if err != nil {
			return err
		}
		if c.State != Prepared {
			return s.corrupt("checkpoint %d: pending but %s", c.ID, c.State)
		}
		checked[string(k)] = true
		s.opened.pending = append(s.opened.pending, *c)
		return nil
	}); err != nil {
		return err
	}
	c := cks.Cursor()
	n := 0
	for k, v := c.Last(); k != nil && n < checkOnOpen; k, v = c.Prev() {
		if !checked[string(k)] { // a prepared row was checked above
			if _, err := s.checkRow(k, v); err != nil {
				return err
			}
		}
		n++
	}
	s.opened.txid = tx.ID()
	return nil
}

// checkRow decodes a checkpoint row at open, as a corruption check.
func (s *Store) checkRow(k, v []byte) (*Checkpoint, error) {
	s.decodedOnOpen++
	if len(k) != 8 {
		return nil, s.corrupt("checkpoint key %x", k)
	}
	if v == nil {
		return nil, s.corrupt("checkpoint %d: pending but missing", binary.BigEndian.Uint64(k))
	}
	c, err := decodeCheckpoint(v)
	if err != nil || c.ID != binary.BigEndian.Uint64(k) {
		return nil, s.corrupt("checkpoint %d: undecodable record", binary.BigEndian.Uint64(k))
	}
	return c, nil
}

// update runs fn in one write transaction. fn's own error (a refusal) rolls
// the transaction back and is returned as it is. A failure of bbolt's
// commit is classified (see "Write failures" in doc.go):
//
//   - a page write refused for space (ENOSPC, EDQUOT from pwrite) before the
//     new meta page was seen: nothing is recorded and bbolt rolled back, so
//     the error wraps durable.ErrDiskFull and the store goes on;
//   - anything else (a failed fdatasync, EIO, a failed file resize, or a
//     change already visible): the error wraps ErrWriteFailed, and every
//     later write is refused the same way until the store is reopened.
func (s *Store) update(op string, fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.recoverCorrupt(op, &err)
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken != nil {
		return fmt.Errorf("%s: %w: refused after an earlier failure: %w", op, ErrWriteFailed, broken)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	hook := s.opts.WriteFault
	var refused error
	txid := 0
	defer s.version.Add(1)
	err = s.db.Update(func(tx *bolt.Tx) error {
		txid = tx.ID()
		if refused = fn(tx); refused != nil {
			return refused
		}
		if hook != nil {
			return hook(op, BeforeCommit)
		}
		return nil
	})
	if err == nil && hook != nil {
		err = hook(op, AfterCommit)
	}
	switch {
	case err == nil:
		return nil
	case refused != nil || txid == 0:
		// Refused by fn, or no transaction began (the store is closed):
		// nothing was written.
		return err
	case pageWriteNoSpace(err) && !s.visible(txid):
		return fmt.Errorf("%w: %w", durable.ErrDiskFull, err)
	}
	s.mu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.mu.Unlock()
	return fmt.Errorf("%w: %w", ErrWriteFailed, err)
}

// view runs fn in a read transaction. A page bbolt cannot read (a panic,
// or a fault on its memory map) is ErrCorrupt naming the file, never a
// crash of the process.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.recoverCorrupt("read", &err)
	return s.db.View(fn)
}

// viewValue runs fn in a read transaction (view) and returns its value.
func viewValue[T any](s *Store, fn func(*bolt.Tx) (T, error)) (T, error) {
	var v T
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	return v, err
}

// recoverCorrupt, deferred, turns a panic inside bbolt into ErrCorrupt.
// bbolt rolls the transaction back as the panic unwinds.
func (s *Store) recoverCorrupt(op string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: state store %s: %w: %v", op, s.path, ErrCorrupt, r)
	}
}

// pageWriteNoSpace reports whether err is bbolt's pwrite of a page failing
// for lack of space: an *os.PathError "write" with ENOSPC or EDQUOT. bbolt
// returns fdatasync's error as a bare errno and a failed file resize as
// text, so neither is mistaken for it.
func pageWriteNoSpace(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" {
		return false
	}
	return errors.Is(pe.Err, syscall.ENOSPC) || errors.Is(pe.Err, syscall.EDQUOT)
}

// visible reports whether the write transaction txid is what readers see:
// its meta page was written, so its fate on disk is unknown.
func (s *Store) visible(txid int) bool {
	cur := txid
	if err := s.view(func(tx *bolt.Tx) error { cur = tx.ID(); return nil }); err != nil {
		return true // cannot tell: assume the worst
	}
	return cur >= txid
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// Reserve durably marks every id up to id as used, so no later start hands
// one out again: the engine names ids in answers before anything records
// them, and only from a block reserved this way.
func (s *Store) Reserve(id uint64) error {
	return s.update("reserve", func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyLastID); v != nil && binary.BigEndian.Uint64(v) >= id {
			return nil
		}
		return meta.Put(keyLastID, u64(id))
	})
}

// ForgottenSeal returns the key the node seals its forgotten-producers
// documents with, and the checkpoint after which they are sealed
// (layout.ForgottenSeal); a zero seal (no key) when none was made. Since
// is never above the store's newest commit minus 2, counting the one a
// rebuild went through (RebuiltThrough) as committed: a start whose
// store kept up reads every document after that minus 1, and must
// believe only sealed ones there.
func (s *Store) ForgottenSeal() (layout.ForgottenSeal, error) {
	return viewValue(s, readForgottenSeal)
}

// MakeForgottenSeal returns the store's seal (ForgottenSeal), first making
// one with a new random key when there is none: every document after since
// must then be sealed with it, so the node must open no checkpoint at or
// below since+1 from now on (layout.ForgottenSeal: its newest commit minus
// 2, once it has applied every document there is).
//
// With a non-zero rebuilt, the start has rebuilt the store from the
// destination's manifests through checkpoint rebuilt (and applied every
// forgotten-producers document, set aside what it found, reserved its
// ids): it is recorded (RebuiltThrough) in the same transaction, the
// start's last write, so a store that holds it holds the key too, and
// no state the rebuild writes comes after it.
func (s *Store) MakeForgottenSeal(since, rebuilt uint64) (layout.ForgottenSeal, error) {
	var seal layout.ForgottenSeal
	err := s.update("make forgotten seal", func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if rebuilt > metaUint64(tx, keyRebuiltThrough) {
			if err := meta.Put(keyRebuiltThrough, u64(rebuilt)); err != nil {
				return err
			}
		}
		var err error
		if seal, err = readForgottenSeal(tx); err != nil || seal.Key != nil {
			return err
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		if err := meta.Put(keyForgottenKey, key); err != nil {
			return err
		}
		if err := meta.Put(keyForgottenSince, u64(since)); err != nil {
			return err
		}
		seal, err = readForgottenSeal(tx)
		return err
	})
	return seal, err
}

// ForgottenApplied returns the checkpoint through which the store applied
// every forgotten-producers document there was when it made its seal's
// key (MakeForgottenSeal's since: the start applies them all first), 0
// when it has no key. A document at or below it found later was applied
// then, or was not there (not the node's: none it writes is that old).
// ForgottenSeal's Since may be lower until the store commits; this is
// not a seal, only what the store reflects.
func (s *Store) ForgottenApplied() (uint64, error) {
	return viewValue(s, func(tx *bolt.Tx) (uint64, error) {
		if tx.Bucket(bucketMeta).Get(keyForgottenKey) == nil {
			return 0, nil
		}
		return metaUint64(tx, keyForgottenSince), nil
	})
}

// RebuiltThrough returns the newest checkpoint a rebuild of the store
// went through (MakeForgottenSeal), 0 if it was never rebuilt (or by a
// binary that did not record it).
func (s *Store) RebuiltThrough() (uint64, error) { return s.metaNumber(keyRebuiltThrough) }

func readForgottenSeal(tx *bolt.Tx) (layout.ForgottenSeal, error) {
	key := tx.Bucket(bucketMeta).Get(keyForgottenKey)
	switch {
	case key == nil:
		return layout.ForgottenSeal{}, nil
	case len(key) != 32:
		return layout.ForgottenSeal{}, fmt.Errorf("%w: bad %s (%d bytes)", ErrCorrupt, keyForgottenKey, len(key))
	}
	// A store with no commit yet (new, or rebuilt) made its key with the
	// first checkpoint it opens minus 2, so that once it commits the
	// compaction adopts the documents a lost store's key sealed; until
	// then its newest (or rebuilt-through) commit bounds it.
	kept := max(metaUint64(tx, keyLastCommitted), metaUint64(tx, keyRebuiltThrough))
	since := min(metaUint64(tx, keyForgottenSince), max(kept, 2)-2)
	return layout.ForgottenSeal{Key: bytes.Clone(key), Since: since}, nil
}

// LastID returns the highest checkpoint id ever recorded or reserved, 0 if none.
func (s *Store) LastID() (uint64, error) { return s.metaNumber(keyLastID) }

// metaNumber reads, in a read transaction, a number the meta bucket keeps
// under key (metaUint64).
func (s *Store) metaNumber(key []byte) (uint64, error) {
	return viewValue(s, func(tx *bolt.Tx) (uint64, error) { return metaUint64(tx, key), nil })
}

// metaUint64 reads a number the meta bucket keeps under key (8 bytes,
// big-endian): 0 when there is none. A value of another length reads as
// none; check refuses a store holding one under the keys a start reads.
func metaUint64(tx *bolt.Tx, key []byte) uint64 {
	if v := tx.Bucket(bucketMeta).Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putCheckpoint(tx *bolt.Tx, c *Checkpoint) error {
	c.FileCount = max(c.FileCount, len(c.Files))
	v, err := encodeCheckpoint(c)
	if err != nil {
		return fmt.Errorf("encode checkpoint %d: %w", c.ID, err)
	}
	if err := tx.Bucket(bucketCheckpoints).Put(u64(c.ID), v); err != nil {
		return fmt.Errorf("put checkpoint %d: %w", c.ID, err)
	}
	meta := tx.Bucket(bucketMeta)
	last := uint64(0)
	if v := meta.Get(keyLastID); v != nil {
		last = binary.BigEndian.Uint64(v)
	}
	if c.ID > last {
		return meta.Put(keyLastID, u64(c.ID))
	}
	return nil
}

func getCheckpoint(tx *bolt.Tx, id uint64) (*Checkpoint, error) {
	v := tx.Bucket(bucketCheckpoints).Get(u64(id))
	if v == nil {
		return nil, fmt.Errorf("checkpoint %d: %w", id, ErrNotFound)
	}
	c, err := decodeCheckpoint(v)
	if err != nil {
		return nil, fmt.Errorf("decode checkpoint %d: %w", id, err)
	}
	return c, nil
}

// Prepare durably records c as prepared together with the producers'
// sequence state of c.Seqs, in one transaction, and drops c's intents. Once it returns nil, c must
// commit (I4).
func (s *Store) Prepare(c *Checkpoint) error {
	c.State = Prepared
	return s.update("prepare", func(tx *bolt.Tx) error {
		if err := stampEpochs(tx, c.Files); err != nil {
			return err
		}
		if err := putCheckpoint(tx, c); err != nil {
			return err
		}
		if err := tx.Bucket(bucketPending).Put(u64(c.ID), nil); err != nil {
			return err
		}
		intents := tx.Bucket(bucketIntents)
		for _, f := range c.Files {
			if err := intents.Delete([]byte(IntentKey(c.ID, f.Final))); err != nil {
				return err
			}
		}
		if err := putKeys(tx, c.Keys, c.KeyPolicy); err != nil {
			return err
		}
		for pid, streams := range c.Seqs {
			h, err := getHead(tx, pid)
			if err != nil {
				return err
			}
			if h == nil {
				// A producer is recorded at init; a missing one was
				// initialised and then lost, which cannot happen, but its
				// sequence state must still be kept.
				if h, err = newHead(tx, pid, 0); err != nil {
					return err
				}
			}
			if err := putHead(tx, h, c.StartedAt); err != nil {
				return err
			}
			for stream, next := range streams {
				ss, ok, err := getSeq(tx, pid, stream)
				if err != nil {
					return err
				}
				if !ok {
					ss = NewStreamSeq()
				}
				if err := putSeq(tx, pid, stream, ss.Prepared(next)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Commit records a prepared checkpoint committed and advances the committed
// sequence numbers of its producers. Committing a committed one is a no-op.
func (s *Store) Commit(id uint64, at time.Time, durationMS int64, retain int) error {
	return s.CommitFiles(id, nil, at, durationMS, retain)
}

// CommitFiles is Commit that also records files, when not nil, as the
// checkpoint's files: where they were committed (a displaced part file is
// not at its first final name).
func (s *Store) CommitFiles(id uint64, files []committer.File, at time.Time, durationMS int64, retain int) error {
	return s.CommitDrafted(id, files, at, durationMS, retain, nil)
}

// CommitDraft is a prepared checkpoint's row read and decoded (its files
// left encoded) ahead of its commit record, off the commit's path: see
// DraftCommit.
type CommitDraft struct {
	id  uint64
	row []byte // the row as read
	raw *checkpointRaw
}

// DraftCommit reads checkpoint id's row for a CommitDrafted that keeps
// its files, so that the record's transaction need not decode it: a start
// re-committing a checkpoint of 10,000 files decodes megabytes there. The
// caller may do it while the files commit.
func (s *Store) DraftCommit(id uint64) (*CommitDraft, error) {
	var row []byte
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCheckpoints).Get(u64(id))
		if v == nil {
			return fmt.Errorf("checkpoint %d: %w", id, ErrNotFound)
		}
		row = bytes.Clone(v) // v lives only as long as tx; decoded after it
		return nil
	})
	if err != nil {
		return nil, err
	}
	r, err := decodeCheckpointRaw(row)
	if err != nil {
		return nil, fmt.Errorf("decode checkpoint %d: %w", id, err)
	}
	return &CommitDraft{id: id, row: row, raw: r}, nil
}

// CommitDrafted is CommitFiles with draft, a DraftCommit of the same
// checkpoint (nil: none). The draft is used only if the row still holds
// the bytes it was read from; else the row is decoded as without one.
func (s *Store) CommitDrafted(id uint64, files []committer.File, at time.Time, durationMS int64, retain int, draft *CommitDraft) error {
	return s.CommitParking(id, files, at, durationMS, retain, draft, nil)
}

// CommitParking is CommitDrafted that also records parked, the table
// commits of the checkpoint set aside (Parked), in the same transaction.
func (s *Store) CommitParking(id uint64, files []committer.File, at time.Time, durationMS int64, retain int, draft *CommitDraft, parked []Parked) error {
	return s.update("commit", func(tx *bolt.Tx) error {
		if err := putParked(tx, parked); err != nil {
			return err
		}
		if files == nil {
			// The files stay as prepared: the row is rewritten without
			// decoding them (a checkpoint may name many thousands).
			return commitRow(tx, id, at, durationMS, retain, draft)
		}
		c, err := getCheckpoint(tx, id)
		if err != nil {
			return err
		}
		if c.State == Committed {
			return nil
		}
		if c.State != Prepared {
			return fmt.Errorf("commit checkpoint %d: state is %s", id, c.State)
		}
		c.State, c.CommittedAt, c.DurationMS = Committed, at.UTC(), durationMS
		c.Files = files
		if err := putCheckpoint(tx, c); err != nil {
			return err
		}
		return committed(tx, id, c.Seqs, retain)
	})
}

// commitRow records checkpoint id committed, its files as prepared.
func commitRow(tx *bolt.Tx, id uint64, at time.Time, durationMS int64, retain int, draft *CommitDraft) error {
	v := tx.Bucket(bucketCheckpoints).Get(u64(id))
	if v == nil {
		return fmt.Errorf("checkpoint %d: %w", id, ErrNotFound)
	}
	var r *checkpointRaw
	if draft != nil && draft.id == id && bytes.Equal(v, draft.row) {
		rr := *draft.raw
		r = &rr
	} else {
		var err error
		if r, err = decodeCheckpointRaw(v); err != nil {
			return fmt.Errorf("decode checkpoint %d: %w", id, err)
		}
	}
	if r.State == Committed {
		return nil
	}
	if r.State != Prepared {
		return fmt.Errorf("commit checkpoint %d: state is %s", id, r.State)
	}
	r.State, r.CommittedAt, r.DurationMS = Committed, at.UTC(), durationMS
	nv, err := encodeCheckpointRaw(r)
	if err != nil {
		return fmt.Errorf("encode checkpoint %d: %w", id, err)
	}
	if err := tx.Bucket(bucketCheckpoints).Put(u64(id), nv); err != nil {
		return fmt.Errorf("put checkpoint %d: %w", id, err)
	}
	return committed(tx, id, r.Seqs, retain)
}

// committed does what recording checkpoint id committed does besides its
// row: the producers' committed sequence numbers, the pending index, the
// last committed id and the pruning of old rows.
func committed(tx *bolt.Tx, id uint64, seqs map[string]map[string]int64, retain int) error {
	for pid, streams := range seqs {
		for stream, next := range streams {
			ss, ok, err := getSeq(tx, pid, stream)
			if err != nil {
				return err
			}
			if !ok {
				continue // its producer was deleted
			}
			if err := putSeq(tx, pid, stream, ss.Committed(next, id)); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bucketPending).Delete(u64(id)); err != nil {
		return err
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyLastCommitted); v == nil || binary.BigEndian.Uint64(v) < id {
		if err := meta.Put(keyLastCommitted, u64(id)); err != nil {
			return err
		}
	}
	return prune(tx, id, retain)
}

// prune deletes checkpoint rows beyond the newest retain ones, except
// prepared ones (recovery needs them). Rows, not ids: ids skip whole
// blocks across restarts. It walks retain rows back from the newest and
// deletes from where the last prune stopped, so a commit deletes only the
// rows that aged out since.
func prune(tx *bolt.Tx, id uint64, retain int) error {
	if retain <= 0 {
		return nil
	}
	meta := tx.Bucket(bucketMeta)
	from := uint64(1)
	if v := meta.Get(keyPrunedBelow); v != nil {
		from = binary.BigEndian.Uint64(v)
	}
	cur := tx.Bucket(bucketCheckpoints).Cursor()
	k, _ := cur.Last()
	for i := 1; i < retain && k != nil; i++ {
		k, _ = cur.Prev()
	}
	if k == nil {
		return nil // fewer rows than retain
	}
	below := binary.BigEndian.Uint64(k)
	if from >= below {
		return nil
	}
	b, pending := tx.Bucket(bucketCheckpoints), tx.Bucket(bucketPending)
	var old [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(u64(from)); k != nil && binary.BigEndian.Uint64(k) < below; k, _ = c.Next() {
		if pending.Get(k) == nil {
			old = append(old, bytes.Clone(k))
		}
	}
	for _, k := range old {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete checkpoint %d: %w", binary.BigEndian.Uint64(k), err)
		}
	}
	return meta.Put(keyPrunedBelow, u64(below))
}

// Abort records checkpoint c aborted with reason. c need not have been
// recorded before. Aborting a prepared or committed checkpoint is refused.
func (s *Store) Abort(c *Checkpoint, reason string) error {
	return s.update("abort", func(tx *bolt.Tx) error {
		if old, err := getCheckpoint(tx, c.ID); err == nil && old.State != Aborted {
			return fmt.Errorf("abort checkpoint %d: state is %s", c.ID, old.State)
		}
		rec := *c
		rec.State, rec.Error, rec.Files, rec.Seqs = Aborted, reason, nil, nil
		rec.FileCount = len(c.Files)
		return putCheckpoint(tx, &rec)
	})
}

// Get returns one checkpoint.
func (s *Store) Get(id uint64) (*Checkpoint, error) {
	return viewValue(s, func(tx *bolt.Tx) (*Checkpoint, error) { return getCheckpoint(tx, id) })
}

// List returns up to limit checkpoints, newest first, without their files
// and sequence numbers (their heads).
func (s *Store) List(limit int) ([]Checkpoint, error) {
	return s.ListBefore(0, limit)
}

// ListBefore returns up to limit checkpoints with ids below before (0: no
// bound), newest first, without their files and sequence numbers: a page
// after the one that ended at before. A cursor seek, and each row is
// decoded once per content (heads.go), so its cost does not grow with the
// store nor with the rows' files.
func (s *Store) ListBefore(before uint64, limit int) ([]Checkpoint, error) {
	var out []Checkpoint
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketCheckpoints).Cursor()
		k, v := c.Last()
		if before > 0 {
			if k, v = c.Seek(u64(before)); k == nil {
				k, v = c.Last()
			}
		}
		for ; k != nil && len(out) < limit; k, v = c.Prev() {
			if before > 0 && binary.BigEndian.Uint64(k) >= before {
				continue
			}
			ck, err := s.heads.head(k, v)
			if err != nil {
				return err
			}
			out = append(out, ck)
		}
		return nil
	})
	return out, err
}

// NewestCommitted returns the id of the newest committed checkpoint, 0 if
// none. It is kept in meta, so it outlives the pruned rows.
func (s *Store) NewestCommitted() (uint64, error) { return s.metaNumber(keyLastCommitted) }

// Pending returns every prepared (not yet committed) checkpoint, oldest
// first. It reads the pending index and those rows only.
func (s *Store) Pending() ([]Checkpoint, error) {
	var out []Checkpoint
	err := s.view(func(tx *bolt.Tx) error {
		if out = s.takeOpened(tx.ID()); out != nil {
			return nil
		}
		var err error
		out, err = pendingIn(tx)
		return err
	})
	return out, err
}

// takeOpened hands over, once, the prepared checkpoints init decoded, if
// the store is still as init left it (txid: no write since).
func (s *Store) takeOpened(txid int) []Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.opened.pending
	s.opened.pending = nil
	if txid != s.opened.txid {
		return nil
	}
	return out
}

func pendingIn(tx *bolt.Tx) ([]Checkpoint, error) {
	var out []Checkpoint
	err := tx.Bucket(bucketPending).ForEach(func(k, _ []byte) error {
		c, err := getCheckpoint(tx, binary.BigEndian.Uint64(k))
		if err != nil {
			return err
		}
		if c.State == Prepared {
			out = append(out, *c)
		}
		return nil
	})
	return out, err
}

// IntentKey is the intents-bucket key of a file of checkpoint id.
func IntentKey(id uint64, final string) string { return fmt.Sprintf("%020d/%s", id, final) }

// PutIntents records, in one transaction, that uploads are about to start
// for files of checkpoint id.
func (s *Store) PutIntents(id uint64, files []committer.File) error {
	return s.update("put intents", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		for _, f := range files {
			v, err := encodeFile(&f)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(IntentKey(id, f.Final)), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteIntents removes intents.
func (s *Store) DeleteIntents(keys ...string) error {
	return s.update("delete intents", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		for _, k := range keys {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Intents returns every recorded intent by key.
func (s *Store) Intents() (map[string]committer.File, error) {
	out := map[string]committer.File{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			f, err := decodeFile(v)
			if err != nil {
				return fmt.Errorf("decode intent %s: %w", k, err)
			}
			out[string(k)] = f
			return nil
		})
	})
	return out, err
}

// FileOf builds a committer.File; a convenience for tools and benchmarks.
func FileOf(stream, temp, final string, bytes, records int64, crc string) committer.File {
	return committer.File{Stream: stream, Temp: temp, Final: final, Bytes: bytes, Records: records, CRC32C: crc}
}

// Claims returns, read in one transaction, every intent and every prepared
// checkpoint: together the names no orphan sweep may remove. One read
// matters: a checkpoint that is prepared between two reads would be in
// neither.
func (s *Store) Claims() (intents map[string]committer.File, pending []Checkpoint, err error) {
	intents = map[string]committer.File{}
	err = s.view(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			f, err := decodeFile(v)
			if err != nil {
				return fmt.Errorf("decode intent %s: %w", k, err)
			}
			intents[string(k)] = f
			return nil
		}); err != nil {
			return err
		}
		var err error
		pending, err = pendingIn(tx)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read claims: %w", err)
	}
	return intents, pending, nil
}

// IntentCheckpoint returns the checkpoint id of an intent key made by
// IntentKey.
func IntentCheckpoint(key string) (uint64, bool) {
	if len(key) < 21 || key[20] != '/' {
		return 0, false
	}
	id, err := strconv.ParseUint(key[:20], 10, 64)
	return id, err == nil
}
