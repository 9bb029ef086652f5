package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/eosink/eosink/internal/durable"
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
