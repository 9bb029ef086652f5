package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// BatchLocation is one committed file holding a producer's batch.
type BatchLocation struct {
	Node        string    `json:"node"`
	Checkpoint  uint64    `json:"checkpoint"`
	CommittedAt time.Time `json:"committed_at"`
	Manifest    string    `json:"manifest"`
	Path        string    `json:"path"` // Download reads it
	// First and Last bound the producer's range in the file.
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	// Epoch and Incarnation are the producer's as of the commit; nil in
	// manifests written before they were kept. A producer deleted and
	// created again is a new incarnation whose numbers start again at 0.
	Epoch       *int64 `json:"epoch"`
	Incarnation *int64 `json:"incarnation"`
}

// BatchLocations is where a producer's batch was committed.
type BatchLocations struct {
	Producer string `json:"producer"`
	Stream   string `json:"stream"`
	Seq      int64  `json:"seq"`
	// Locations: one per incarnation (and node) that committed such a
	// batch, newest incarnation first.
	Locations []BatchLocation `json:"locations"`
	// Complete: every manifest was read; false when only the newest were.
	Complete bool `json:"complete"`
}

// Locate asks which committed file holds batch seq of producer on stream
// (GET /v1/producers/{producer}/streams/{stream}/seqs/{seq}, role ingest
// or read). An error wrapping ErrNotFound when no committed manifest holds
// it; its message says whether the service has it accepted, not yet
// committed.
func (c *Client) Locate(ctx context.Context, producer, stream string, seq int64) (BatchLocations, error) {
	var out BatchLocations
	p := "/v1/producers/" + url.PathEscape(producer) + "/streams/" + url.PathEscape(stream) + "/seqs/" + strconv.FormatInt(seq, 10)
	err := c.call(ctx, "locate batch", request{method: http.MethodGet, path: p}, &out)
	return out, err
}
