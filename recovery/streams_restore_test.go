package recovery

import (
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
)

// RestoreStream writes a configuration read back from the destination
// only where the store has none or an older version, keeping its version,
// so the next PUT continues after it.
func TestRestoreStreamKeepsVersion(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	c := streamconf.Config{Version: 5, Format: streamconf.FormatText}.Defaults()
	if wrote, err := s.RestoreStream(StreamConfig{Stream: "a", Config: c, UpdatedAt: time.Now()}); err != nil || !wrote {
		t.Fatalf("restore into an empty store: %v %v", wrote, err)
	}
	older := streamconf.Config{Version: 4, Format: streamconf.FormatNDJSON}.Defaults()
	if wrote, err := s.RestoreStream(StreamConfig{Stream: "a", Config: older}); err != nil || wrote {
		t.Fatalf("restore of an older version: %v %v, want nothing written", wrote, err)
	}
	got, ok, err := s.Stream("a")
	if err != nil || !ok || got.Config != c {
		t.Fatalf("stream a: %+v %v %v, want %+v", got, ok, err, c)
	}
	next, err := s.PutStream("a", streamconf.Config{}, time.Now())
	if err != nil || next.Config.Version != 6 {
		t.Fatalf("PUT after the restore: %+v %v, want version 6", next, err)
	}
	if _, err := s.RestoreStream(StreamConfig{Stream: "b", Config: streamconf.Config{Format: "nope", Version: 1}}); err == nil {
		t.Fatal("an invalid configuration was restored")
	}
}
