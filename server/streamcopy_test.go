package server

import (
	"os"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
)

// An older copy of the state store (a volume snapshot restored) must not
// revert a stream to the configuration it had when the copy was taken:
// the destination's document holds a newer version, and the start takes
// it. Failed before: the start read no document of a stream its store
// had, so the stream ran with version 1 (partition a=...) while
// _streams/s.json held version 2 (b=...), and records written for version
// 2 were refused as invalid_partition.
func TestStreamConfigOlderStoreCopy(t *testing.T) {
	r := leaseRig(t, nil, 200*time.Millisecond, nil)
	e := r.start(nil)
	ctx := t.Context()
	if _, err := e.PutStream(ctx, "s", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "a={field:a}"}); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(r.storePath)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := e.PutStream(ctx, "s", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: "b={field:b}"})
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	if err := os.WriteFile(r.storePath, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the stopped holder's lease expires
	e = r.start(nil)
	got := e.Stream("s")
	if got.Config.Version != 2 || got.ActiveVersion != 2 || got.Config.Partition != v2.Config.Partition {
		t.Fatalf("stream after an older store copy: version %d (active %d) partition %q, want version 2 %q",
			got.Config.Version, got.ActiveVersion, got.Config.Partition, v2.Config.Partition)
	}
}
