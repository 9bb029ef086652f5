package recovery

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	bolt "go.etcd.io/bbolt"
)

// Stream configurations (DESIGN.md "Streams") live in their own bucket:
//
//	streams      stream name -> StreamConfig as JSON: the newest accepted
//	             configuration of the stream and its version (1 for the
//	             first PUT, +1 for each later one)
//
// The bucket is created by the first PutStream; a store without it holds
// no configured stream (every stream has the defaults, version 0). A
// stream's row is written, durably, before PUT /v1/streams/{stream}
// answers, once the stream's batches accepted under the old configuration
// are prepared (the PUT's barrier), and the engine applies it at once;
// each file records the version it was written with (committer.File
// SchemaVersion), so a checkpoint's files name their configuration.
// The bucket holds one row per configured stream: it grows only with PUTs
// of new stream names (an admin's act), not with traffic (I11).
var bucketStreams = []byte("streams")

// StreamConfig is one stream's stored configuration.
type StreamConfig struct {
	Stream    string            `json:"stream"`
	Config    streamconf.Config `json:"config"` // Config.Version is the version
	UpdatedAt time.Time         `json:"updated_at"`
}

// PutStream durably records c as stream's configuration, with the stored
// version + 1, and returns what it recorded. c must be valid
// (streamconf.Config.Validate); it is stored with its defaults applied.
func (s *Store) PutStream(stream string, c streamconf.Config, at time.Time) (StreamConfig, error) {
	if !layout.Stream(stream) {
		return StreamConfig{}, fmt.Errorf("put stream %q: invalid stream name", stream)
	}
	if err := c.Validate(); err != nil {
		return StreamConfig{}, fmt.Errorf("put stream %s: %w", stream, err)
	}
	var out StreamConfig
	err := s.update("put stream", func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketStreams)
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketStreams, err)
		}
		prev := int64(0)
		if v := b.Get([]byte(stream)); v != nil {
			old, err := s.decodeStream(stream, v)
			if err != nil {
				return err
			}
			prev = old.Config.Version
		}
		c = c.Defaults()
		c.Version = prev + 1
		out = StreamConfig{Stream: stream, Config: c, UpdatedAt: at.UTC()}
		v, err := json.Marshal(&out)
		if err != nil {
			return fmt.Errorf("encode stream %s: %w", stream, err)
		}
		return b.Put([]byte(stream), v)
	})
	if err != nil {
		return StreamConfig{}, fmt.Errorf("put stream %s: %w", stream, err)
	}
	return out, nil
}

// RestoreStream records sc, read back from the destination, when the store
// has no configuration of its stream or an older version: a lost or older
// store gets back what PUT recorded. It keeps sc's version, so files keep
// naming the configuration they were written with. It reports whether it
// wrote. sc must be valid, with its defaults applied.
func (s *Store) RestoreStream(sc StreamConfig) (bool, error) {
	if !layout.Stream(sc.Stream) || sc.Config.Version < 1 {
		return false, fmt.Errorf("restore stream %q: invalid stream name or version %d", sc.Stream, sc.Config.Version)
	}
	if err := sc.Config.Validate(); err != nil {
		return false, fmt.Errorf("restore stream %s: %w", sc.Stream, err)
	}
	wrote := false
	err := s.update("restore stream", func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketStreams)
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketStreams, err)
		}
		if v := b.Get([]byte(sc.Stream)); v != nil {
			old, err := s.decodeStream(sc.Stream, v)
			if err != nil {
				return err
			}
			if old.Config.Version >= sc.Config.Version {
				return nil
			}
		}
		v, err := json.Marshal(&sc)
		if err != nil {
			return fmt.Errorf("encode stream %s: %w", sc.Stream, err)
		}
		wrote = true
		return b.Put([]byte(sc.Stream), v)
	})
	if err != nil {
		return false, fmt.Errorf("restore stream %s: %w", sc.Stream, err)
	}
	return wrote, nil
}

// Stream returns one stream's stored configuration; false if it was never
// configured.
func (s *Store) Stream(stream string) (StreamConfig, bool, error) {
	var out StreamConfig
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStreams)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(stream))
		if v == nil {
			return nil
		}
		var err error
		out, err = s.decodeStream(stream, v)
		found = err == nil
		return err
	})
	return out, found, err
}

// Streams returns every configured stream, by name.
func (s *Store) Streams() ([]StreamConfig, error) {
	var out []StreamConfig
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStreams)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			c, err := s.decodeStream(string(k), v)
			if err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// decodeStream reads and checks one row: a damaged row is ErrCorrupt,
// naming the file, as every other row read on start.
func (s *Store) decodeStream(stream string, v []byte) (StreamConfig, error) {
	var c StreamConfig
	if err := json.Unmarshal(v, &c); err != nil {
		return c, s.corrupt("stream %q: %v", stream, err)
	}
	if c.Stream != stream || c.Config.Version < 1 {
		return c, s.corrupt("stream %q: row names stream %q version %d", stream, c.Stream, c.Config.Version)
	}
	if err := c.Config.Validate(); err != nil {
		return c, s.corrupt("stream %q: %v", stream, err)
	}
	return c, nil
}
