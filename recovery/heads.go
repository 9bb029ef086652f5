package recovery

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"
)

// A checkpoint row holds its files and sequence numbers: the row of a
// checkpoint of 100,000 streams is megabytes. Lists (the API's, the UI's
// overview, polled in loops) want the rest, its head, newest rows first,
// again and again. heads keeps the decoded heads of the rows lists have
// read, each with a hash of the bytes it was decoded from: a row is decoded
// once per content, whoever wrote it and however (a state change rewrites
// the row, so its bytes and hash change). No invalidation to forget.

// maxHeads bounds the cache; past it, it starts again empty. Lists read the
// newest rows, and retention keeps about a thousand (the default).
const maxHeads = 4096

type headCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]headEntry
}

type headEntry struct {
	sum uint64
	n   int
	ck  Checkpoint // without Files and Seqs
}

func newHeadCache() *headCache {
	return &headCache{seed: maphash.MakeSeed(), m: map[uint64]headEntry{}}
}

// head returns the head of the checkpoint row k, v.
func (h *headCache) head(k, v []byte) (Checkpoint, error) {
	id := binary.BigEndian.Uint64(k)
	sum := maphash.Bytes(h.seed, v)
	h.mu.Lock()
	e, ok := h.m[id]
	h.mu.Unlock()
	if ok && e.sum == sum && e.n == len(v) {
		return e.ck, nil
	}
	ck, err := decodeHead(v)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint %d: %w", id, err)
	}
	h.mu.Lock()
	if len(h.m) >= maxHeads {
		clear(h.m)
	}
	h.m[id] = headEntry{sum: sum, n: len(v), ck: ck}
	h.mu.Unlock()
	return ck, nil
}

func decodeHead(v []byte) (Checkpoint, error) {
	var r checkpointHead
	if err := json.Unmarshal(v, &r); err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{ID: r.ID, State: r.State, FileCount: r.FileCount, Records: r.Records, Bytes: r.Bytes,
		StartedAt: r.StartedAt, PreparedAt: r.PreparedAt, CommittedAt: r.CommittedAt, DurationMS: r.DurationMS,
		Error: r.Error}, nil
}
