package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
)

// Errors returned by the Engine. The API maps them to HTTP answers.
var (
	ErrNotReady        = errors.New("not ready: recovery running")
	ErrClosed          = errors.New("engine closed")
	ErrUnknownProducer = errors.New("unknown producer")
	ErrFenced          = errors.New("producer fenced by a newer epoch")
	ErrInvalidEpoch    = errors.New("epoch newer than current")
	ErrOutOfOrder      = errors.New("out of order sequence")
	ErrBackpressure    = errors.New("too much uncommitted data held")
	ErrAborted         = errors.New("checkpoint aborted")
	ErrFailed          = errors.New("engine stopped after a failure; restart to recover")
	ErrProducerBusy    = errors.New("producer has uncommitted batches")
	// ErrKeyReused: an Idempotency-Key already accepted came with another body.
	ErrKeyReused = errors.New("idempotency key reused with a different body")
	// ErrProducerDamaged: the producer's record in the state store does not
	// decode; its calls answer this, every other producer is served.
	ErrProducerDamaged = recovery.ErrProducerDamaged
	// ErrDiskFull: a write, init or checkpoint was refused for lack of
	// space (staging files or the state store) with nothing recorded; it
	// may succeed once space is freed. It is durable.ErrDiskFull itself, so
	// every error wrapped below the engine matches it.
	ErrDiskFull = durable.ErrDiskFull

	// Lease errors.

	// ErrLeaseHeld means another live process holds this node id's lease:
	// this one refuses to start.
	ErrLeaseHeld = errors.New("node lease held by another process")
	// ErrLeaseLost means another process took this node's lease: this one
	// is fenced and must never write to the destination again.
	ErrLeaseLost = errors.New("node lease lost to another process")
	// ErrLeaseStale means the last successful renewal is older than the
	// lease timeout minus the safety margin: commit steps wait until a
	// renewal succeeds.
	ErrLeaseStale = errors.New("node lease not renewed in time")

	// Errors of placing a batch (streams.go, see the comment at its top).

	// ErrInvalidStream means a stream name that DESIGN's rule refuses.
	ErrInvalidStream = errors.New("invalid stream name")
	// ErrTooManyPartitions means a batch spans more partitions than one
	// checkpoint of its stream may open; it can never be accepted. A
	// RecordError names the first record over; the API answers 400
	// invalid_partition.
	ErrTooManyPartitions = fmt.Errorf("too many partitions in one batch: %w", layout.ErrInvalidPartition)
	// ErrNameTooLong means a record's partition makes a file name longer
	// than the destination takes (an S3 key over 1,024 bytes, a path over
	// PATH_MAX or an element over NAME_MAX); 400 invalid_partition.
	ErrNameTooLong = fmt.Errorf("file name too long for the destination: %w", layout.ErrInvalidPartition)
	// ErrRecordTooLarge means a record is larger than its stream's
	// encoding takes (Parquet: staging.MaxRecordBytes); 413 too_large.
	ErrRecordTooLarge = errors.New("record too large for the stream's encoding")
)

// SeqError is returned for a sequence gap: the batch is refused and the
// client must resend from Expected.
type SeqError struct {
	Producer string
	Stream   string
	Got      int64
	Expected int64
}

func (e *SeqError) Error() string {
	return fmt.Sprintf("producer %s stream %s: sequence %d, expected %d", e.Producer, e.Stream, e.Got, e.Expected)
}

// Unwrap returns ErrOutOfOrder.
func (e *SeqError) Unwrap() error { return ErrOutOfOrder }

// RetryHint is implemented by an error that knows how soon a retry may
// pass (a lease held until its expiry, a parked table's next try): the
// failure policy waits that long instead of backing off, and the API's
// Retry-After takes it when it is longer than its own.
type RetryHint interface{ RetryAfter() time.Duration }

// hinted is err with a RetryHint of after.
type hinted struct {
	err   error
	after time.Duration
}

func (h *hinted) Error() string             { return h.err.Error() }
func (h *hinted) Unwrap() error             { return h.err }
func (h *hinted) RetryAfter() time.Duration { return h.after }
