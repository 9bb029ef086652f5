package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"

	"github.com/eosink/eosink/internal/layout"
)

// headerIdempotencyKey keys a write without producer headers.
const headerIdempotencyKey = "Idempotency-Key"

// SendKeyed appends records as one batch to stream under an
// Idempotency-Key, for clients that keep no producer (no WithProducer or
// Init needed): the service stores a batch once per key and stream within
// its --idempotency-window, however often it is sent. Use a key that names
// the batch (a batch id, a file and offset, or ContentKey of the records)
// and send the same records under it every time.
//
// Transient failures (transport errors, 5xx including an aborted
// checkpoint, 408, 429 honouring Retry-After) are retried with the same
// key under the Retry policy: a retry of a batch the service already has is
// answered as a duplicate (Result.Duplicate), never stored twice. A nil
// error means the batch is accepted (not yet committed unless
// Result.Committed); a batch accepted but lost before its checkpoint was
// prepared (a crash) is forgotten with its key, so send it again under the
// same key until SendKeyedWait says committed if it must not be lost.
// ErrKeyReused: the key was used for other records; nothing was stored.
func (c *Client) SendKeyed(ctx context.Context, stream, key string, records [][]byte) (Result, error) {
	return c.sendKeyed(ctx, stream, key, records, false)
}

// SendKeyedWait is SendKeyed with ?wait=commit: it returns once the batch
// is committed, sending it again under the same key when its checkpoint
// aborts, the service restarted, or its own wait ended first (202).
func (c *Client) SendKeyedWait(ctx context.Context, stream, key string, records [][]byte) (Result, error) {
	return c.sendKeyed(ctx, stream, key, records, true)
}

// ContentKey returns a key naming records by their content: the hex
// SHA-256 of their NDJSON body. Two batches of the same records get the
// same key, so the second is dropped as a duplicate within the window.
func ContentKey(records [][]byte) (string, error) {
	body, err := encode(records)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

func (c *Client) sendKeyed(ctx context.Context, name, key string, records [][]byte, wait bool) (Result, error) {
	if !layout.Stream(name) {
		return Result{}, fmt.Errorf("send to %q: %w: want ^[a-z0-9][a-z0-9_.-]{0,127}$ without \"..\"", name, ErrInvalidStream)
	}
	if !layout.IdempotencyKey(key) {
		return Result{}, fmt.Errorf("send to %s: %w: idempotency key %q: want 1 to 255 printable ASCII", name, ErrBadRequest, key)
	}
	body, err := encode(records)
	if err != nil {
		return Result{}, fmt.Errorf("send to %s: %w", name, err)
	}
	req := request{
		method: http.MethodPost,
		path:   "/v1/streams/" + name + "/records",
		header: http.Header{"Content-Type": {contentTypeNDJSON}, headerIdempotencyKey: {key}},
		body:   body,
	}
	if wait {
		req.query = url.Values{"wait": {"commit"}}
	}
	op := fmt.Sprintf("send to %s key %q", name, key)
	for {
		var ans writeAnswer
		if err := c.call(ctx, op, req, &ans); err != nil {
			return Result{}, err
		}
		res := Result{Stream: name, Seq: -1, Checkpoint: ans.Checkpoint, Records: len(records), Bytes: len(body),
			Duplicate: ans.Duplicate, Committed: ans.Committed}
		if !wait || res.Committed {
			return res, nil
		}
		// The service's wait ended first (202): ask again under the key;
		// the duplicate waits for its checkpoint.
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%s: wait for commit: %w", op, err)
		}
	}
}
