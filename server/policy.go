package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/durable"
	"github.com/eosink/eosink/internal/table"
	"github.com/eosink/eosink/recovery"
)

// The failure policy (DESIGN I14): one classifier says what an error means,
// one loop retries what may pass. The live commit, the replay on start, the
// id reservation and the lease acquisition all go through them, so an
// error class added here is handled the same everywhere.

// verdict is what an error means for the step that met it.
type verdict uint8

const (
	// verdictRetry: the step may pass later (the network, a full disk, a
	// server that is down). Back off and try again.
	verdictRetry verdict = iota
	// verdictAbort: the step will not pass as things are (a file lost, a
	// name taken by other content, a path the destination refuses). Before
	// "prepared" the checkpoint aborts; after it the commit is stuck until
	// an operator acts: it is retried slowly and reported as stuck —
	// unless a file is lost (lost), which no operator can bring back: the
	// checkpoint is recorded committed without it.
	verdictAbort
	// verdictStop: the engine cannot go on safely (a failed fsync, a state
	// store in an unknown state, a lease another process holds). It stops;
	// recovery on the next start decides.
	verdictStop
)

func (v verdict) String() string {
	switch v {
	case verdictRetry:
		return "retry"
	case verdictAbort:
		return "abort"
	case verdictStop:
		return "stop"
	}
	return "verdict(?)"
}

// stopErrors are the errors after which nothing may be written: every
// sentinel that stops the engine, in one list.
var stopErrors = []error{
	durable.ErrSync,         // the kernel may have dropped the pages: never retried (fsyncgate)
	recovery.ErrWriteFailed, // the state store may or may not hold the write: reopen it
	recovery.ErrCorrupt,     // a damaged row: refuse to go on, naming the file
	ErrLeaseLost,            // another process holds the node id now: fenced
	ErrLeaseHeld,            // a live process holds the node id
	committer.ErrUnsupported,
	errStop,
}

// abortErrors are the errors a retry does not cure.
var abortErrors = []error{
	committer.ErrLost,     // neither the staged data nor the final file exists
	committer.ErrConflict, // the final name holds other content (I7)
	syscall.ENOTDIR,       // a file where the path needs a directory
	syscall.EISDIR,        // a directory where the path needs a file
	syscall.ENAMETOOLONG,  // a name or path over the destination's limit
	table.ErrIncompatible, // a table that can't take the stream's files (schema, spec)
	table.ErrCorrupt,      // table metadata in the destination that doesn't parse
}

// lost reports whether err, a file's failed commit, says the file is
// gone for good: an abort verdict, and what no retry cures is that
// neither the staged data nor the final file exists (committer.ErrLost),
// which no operator can put right either (unlike other content at the
// name, or a path the destination refuses). A prepared checkpoint is
// then recorded committed without the file, loudly
// (recovery.Finisher.Lost), on the live path and in the replay alike.
func lost(err error) bool {
	return classify(err) == verdictAbort && errors.Is(err, committer.ErrLost)
}

// errStop ends a retry at once: the engine cannot go on.
var errStop = errors.New("stop")

// classify returns what err means. A stop anywhere in err (errors.Join
// of many files' errors) wins over an abort, an abort over a retry.
func classify(err error) verdict {
	for _, s := range stopErrors {
		if errors.Is(err, s) {
			return verdictStop
		}
	}
	for _, s := range abortErrors {
		if errors.Is(err, s) {
			return verdictAbort
		}
	}
	return verdictRetry
}

// policy runs the one retry loop.
type policy struct {
	min, max time.Duration
	// stop stops the engine after err (Engine.fail).
	stop func(err error)
}

// failure is one failed try, as the loop reports it.
type failure struct {
	err     error
	attempt int
	verdict verdict // verdictRetry or verdictAbort: a stop ends the loop
	// planned: the error said when to try again (a RetryHint): a wait,
	// not a failure to shout about.
	planned bool
}

// retry runs fn until it succeeds and returns nil. It ends early with the
// error after a stop verdict (having stopped the engine), and with
// ErrClosed when ctx ends. Every other failure is reported to onFail (nil:
// none) and retried after a backoff; an abort verdict waits the longest
// backoff, since only an operator can cure it.
func (p *policy) retry(ctx context.Context, fn func() error, onFail func(failure)) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ErrClosed
		}
		v := classify(err)
		if v == verdictStop {
			p.stop(err)
			return err
		}
		var w RetryHint // the step may pass then (a lease held until its expiry): wait that long instead of backing off
		planned := errors.As(err, &w)
		if onFail != nil {
			onFail(failure{err: err, attempt: attempt, verdict: v, planned: planned})
		}
		d := p.wait(v, attempt)
		if planned {
			d, attempt = w.RetryAfter(), -1 // a wait is no failure: the backoff starts over after it
		}
		if ctxsleep.Sleep(ctx, d) != nil {
			return ErrClosed
		}
	}
}

// wait is the wait after the attempt-th failure with verdict v (retry or
// abort): the backoff, or the longest for an abort, since only an
// operator can cure it.
func (p *policy) wait(v verdict, attempt int) time.Duration {
	if v == verdictAbort {
		return p.max
	}
	return p.backoff(attempt)
}

// backoff is the wait after the attempt-th failure: exponential from min
// to max, with jitter.
func (p *policy) backoff(attempt int) time.Duration {
	d := p.min << min(attempt, 16)
	if d > p.max || d <= 0 {
		d = p.max
	}
	return d/2 + rand.N(d/2+1)
}
