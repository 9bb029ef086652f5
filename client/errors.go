package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Errors of the client. Errors from the service are *APIError values that
// unwrap to one of these, so test them with errors.Is.
var (
	// ErrFenced: a newer Init of the same producer id took over (HTTP 409
	// producer_fenced, or a newer epoch seen in the producer's state). The
	// client is a zombie: it drops the batches it kept and every later call
	// returns ErrFenced. Make a new Client to write again.
	ErrFenced = errors.New("producer fenced by a newer epoch")
	// ErrUnknownProducer: the service does not know the producer (409
	// unknown_producer; 404 on its state). Call Init.
	ErrUnknownProducer = errors.New("unknown producer")
	// ErrInvalidEpoch: the client's epoch is newer than the service's (409
	// invalid_epoch); the service lost an Init. Call Init.
	ErrInvalidEpoch = errors.New("epoch newer than the service's")
	// ErrOutOfOrder: the service expects another sequence number (409
	// out_of_order_sequence). Send handles it by resending; it is returned
	// only when it cannot (see ErrSequenceLost).
	ErrOutOfOrder = errors.New("out of order sequence")
	// ErrSequenceLost: the service expects a sequence number below every
	// batch the client still keeps, or beyond the last one it sent, so the
	// client cannot resend what is missing. The stream is unusable on this
	// Client. Two live clients sharing a producer id cause it.
	ErrSequenceLost = errors.New("sequence lost: cannot resend what the service expects")
	// ErrTooLarge: the batch, or a record, is over the service's limit (413
	// too_large), or the batch alone is over the client's buffer
	// (WithMaxBuffered). Split it.
	ErrTooLarge = errors.New("too large")
	// ErrInvalidJSON: a record is not valid JSON (400 invalid_json;
	// APIError.Line is the 1-based record).
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrInvalidRecord: a record is empty, blank or holds a newline; the
	// client refuses it before sending, since the service would split it
	// or skip it.
	ErrInvalidRecord = errors.New("invalid record")
	// ErrEmptyBatch: a batch without records.
	ErrEmptyBatch = errors.New("empty batch")
	// ErrInvalidStream: a stream name the service refuses (400 invalid_stream).
	ErrInvalidStream = errors.New("invalid stream name")
	// ErrInvalidCursor: the commit feed refused the cursor (400
	// invalid_cursor): not one it gave, or of another destination.
	ErrInvalidCursor = errors.New("invalid feed cursor")
	// ErrBadRequest: any other 400 answer.
	ErrBadRequest = errors.New("bad request")
	// ErrUnsupportedMediaType: 415 unsupported_media_type.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// ErrUnauthorized: missing or unknown token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the token lacks the role (403).
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: 404 not_found.
	ErrNotFound = errors.New("not found")
	// ErrBackpressure: the service holds too much uncommitted data (429);
	// retried, returned once the retry budget is spent.
	ErrBackpressure = errors.New("backpressure")
	// ErrNotReady: the service is recovering (503 not_ready); retried.
	ErrNotReady = errors.New("service not ready")
	// ErrAborted: the batch's checkpoint aborted (503 aborted, with
	// ?wait=commit); the client resends from the expected_seq.
	ErrAborted = errors.New("checkpoint aborted")
	// ErrInsufficientStorage: the service's disk is full (507); retried.
	ErrInsufficientStorage = errors.New("insufficient storage")
	// ErrServer: another 5xx answer; retried.
	ErrServer = errors.New("server error")
	// ErrKeyReused: the Idempotency-Key was used before with other
	// records (422 idempotency_key_reused); nothing was stored.
	ErrKeyReused = errors.New("idempotency key reused with other records")
	// ErrUnexpectedStatus: an answer this client does not know.
	ErrUnexpectedStatus = errors.New("unexpected status")

	// ErrKept: the batch did not get through in this call, but the client
	// keeps it with its sequence number and delivers it; do not send its
	// records again: that would store them twice. Send returns it when it
	// gave up (retry budget spent, ctx ended, an error on an earlier batch
	// of the stream) after an attempt that may have reached the service;
	// the next Send, SendWait or Flush delivers the batch before anything
	// newer on its stream. SendWait returns it also when the batch was
	// accepted but its commit was not seen before ctx ended; Flush waits
	// for it. The error wraps the cause too.
	ErrKept = errors.New("batch kept by the client, which delivers it: do not send it again")
	// ErrBufferFull: Send waited for kept batches to commit, to make room
	// under WithMaxBuffered, until its ctx ended. The batch was not kept.
	ErrBufferFull = errors.New("buffer full: waiting for commits")
	// ErrNoProducer: Init, Send, SendWait and Flush need WithProducer.
	ErrNoProducer = errors.New("no producer id: use WithProducer")
	// ErrNotInitialized: Send before Init.
	ErrNotInitialized = errors.New("producer not initialised: call Init first")
)

// APIError is an error answer of the service: {"error": Code, "message":
// Message, ...} with its HTTP status. Unwrap returns the sentinel of its
// code (ErrFenced for producer_fenced, ...), or of its status class.
type APIError struct {
	Status  int
	Code    string // "" when the body was not an eosink error (a proxy's page)
	Message string
	// ExpectedSeq is the sequence number the service expects next
	// (out_of_order_sequence, aborted).
	ExpectedSeq *int64
	// Line is the 1-based record of an invalid_json or too_large answer.
	Line int
	// Checkpoint is the checkpoint that aborted (aborted).
	Checkpoint uint64
	// RetryAfter is the answer's Retry-After, 0 without one.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("eosink: %d %s", e.Status, code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// codeErrors maps the error codes the client tells apart (api.ErrorCodes,
// which TestErrorCodes holds them to) to their sentinels.
var codeErrors = map[string]error{
	"producer_fenced":        ErrFenced,
	"unknown_producer":       ErrUnknownProducer,
	"invalid_epoch":          ErrInvalidEpoch,
	"out_of_order_sequence":  ErrOutOfOrder,
	"too_large":              ErrTooLarge,
	"invalid_json":           ErrInvalidJSON,
	"invalid_stream":         ErrInvalidStream,
	"unsupported_media_type": ErrUnsupportedMediaType,
	"unauthorized":           ErrUnauthorized,
	"forbidden":              ErrForbidden,
	"not_found":              ErrNotFound,
	"backpressure":           ErrBackpressure,
	"not_ready":              ErrNotReady,
	"aborted":                ErrAborted,
	"insufficient_storage":   ErrInsufficientStorage,
	"idempotency_key_reused": ErrKeyReused,
	"invalid_cursor":         ErrInvalidCursor,
}

// statusErrors maps the statuses of answers without a known code (a
// proxy's, an older service's) to their sentinels; other 5xx are ErrServer.
var statusErrors = map[int]error{
	http.StatusBadRequest:            ErrBadRequest,
	http.StatusUnauthorized:          ErrUnauthorized,
	http.StatusForbidden:             ErrForbidden,
	http.StatusNotFound:              ErrNotFound,
	http.StatusRequestEntityTooLarge: ErrTooLarge,
	http.StatusUnsupportedMediaType:  ErrUnsupportedMediaType,
	http.StatusTooManyRequests:       ErrBackpressure,
	http.StatusInsufficientStorage:   ErrInsufficientStorage,
}

// Unwrap returns the sentinel for the error's code or status.
func (e *APIError) Unwrap() error {
	if err, ok := codeErrors[e.Code]; ok {
		return err
	}
	if err, ok := statusErrors[e.Status]; ok {
		return err
	}
	if e.Status >= 500 {
		return ErrServer
	}
	return ErrUnexpectedStatus
}

// retryable reports whether the request may succeed if sent again as is.
func (e *APIError) retryable() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
}

// refusedUnheard reports whether the answer proves the service did not
// take the batch: it refused it before appending it. Any other failure may
// have come after the service took it (a proxy's 502, an internal error
// after the append), so the batch's sequence number stays bound to it.
func (e *APIError) refusedUnheard() bool {
	if e.Code == "" {
		return false
	}
	switch e.Code {
	case "backpressure", "not_ready", "shutting_down", "insufficient_storage":
		return true
	case "internal", "aborted":
		return false
	}
	return e.Status >= 400 && e.Status < 500
}
