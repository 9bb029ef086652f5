// Package client is the Go producer client of eosink's HTTP API v1
// (docs/design.md, "HTTP API v1 (binding)"). It owns the producer's side of
// exactly-once delivery: the epoch, a sequence number per stream, and the
// batches sent but not yet committed, which it keeps in memory to resend
// when the service loses them. It uses only the standard library.
//
//	c, err := client.New("http://127.0.0.1:8080",
//		client.WithProducer("orders-eu-1"), client.WithToken(token))
//	if err != nil { ... }
//	if _, err := c.Init(ctx); err != nil { ... } // fences older instances
//	for batch := range batches {
//		if _, err := c.Send(ctx, "orders", batch); err != nil {
//			if errors.Is(err, client.ErrFenced) { return err } // a zombie stops
//			...
//		}
//	}
//	if err := c.Flush(ctx); err != nil { ... } // everything committed
//
// # Sequence numbers and resends
//
// Init takes a new epoch and, per stream, the service's next_seq; each
// Send gives its batch the stream's next number. Sends on one stream are
// serialized, and so are their HTTP requests: one in flight per stream,
// in sequence order. Different streams proceed in parallel.
//
// Every batch sent is kept until the client learns it is committed. The
// service may forget batches it accepted (202) but had not prepared in a
// checkpoint when it crashed, or whose checkpoint aborted (docs/design.md, I5).
// It then answers a later batch 409 out_of_order_sequence with
// expected_seq E (503 aborted with E under ?wait=commit), and the client
// resends its kept batches E, E+1, ... in order, each with its original
// number, then goes on. A duplicate answer (200, "duplicate": true) counts
// as accepted: an earlier attempt whose answer was lost got through.
//
// A sequence number, once an attempt with it may have reached the service,
// stays bound to its batch: a slow earlier attempt might still land, so
// reusing the number for other records could lose them as "duplicates".
// Hence a Send that gives up after such an attempt keeps the batch and
// returns an error wrapping ErrKept; the next Send, SendWait or Flush
// delivers it first. The rule for callers: after an error, send the
// records again unless errors.Is(err, ErrKept). A batch the service
// refused outright (400, 413, 415, 401/403, unknown_producer,
// invalid_epoch, or only 429s) is not kept and its number is reused.
//
// # Commits
//
// A batch is committed once the checkpoint holding it commits; the
// service's committed_seq per (producer, stream) then covers its number,
// and every lower one. Flush polls GET /v1/producers/{id} until
// committed_seq reaches the last number sent on every stream, resending
// from next_seq if the service reports less than was sent, and drops the
// committed batches. SendWait sends with ?wait=commit. Neither forces a
// checkpoint: the service runs them periodically (--checkpoint-interval).
//
// # Memory
//
// Kept batches are bounded by WithMaxBuffered (DefaultMaxBuffered). A Send
// over the bound blocks, polling the service for commits, until there is
// room or its ctx ends (ErrBufferFull); a batch larger than the bound is
// refused (ErrTooLarge).
//
// # Retries
//
// Transport errors, 5xx answers and 429 are retried with exponential
// backoff and jitter (Retry, WithRetry); a Retry-After is honoured.
// Other 4xx answers are returned as *APIError, which unwraps to a
// sentinel (ErrTooLarge, ErrInvalidJSON, ...).
//
// # Fencing
//
// An Init by another Client with the same producer id fences this one: its
// next write is refused with 409 producer_fenced, or Flush sees the newer
// epoch. The client then drops its kept batches and every call returns
// ErrFenced: the newer instance owns the producer id. A newer epoch that
// may be the client's own is not taken for fencing: one of its Inits
// taken by the service and not yet answered (the write waits for it), or
// one that failed without its answer (its ctx ended, its retries ran
// out), which the next call finishes by initialising again.
//
// # Reading what was committed
//
// Commits follows the service's commit feed (GET /v1/commits): every
// committed checkpoint of every node, each once, a page at a time, with a
// cursor to store with what the consumer made of each page
// (docs/feed.md, ExampleClient_Commits). Download reads a committed file.
package client
