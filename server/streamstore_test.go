package server

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

func readStreamDocFile(t *testing.T, fs afero.Fs, stream string) (recovery.StreamConfig, bool) {
	t.Helper()
	data, err := afero.ReadFile(fs, rigDest+"/"+layout.StreamConfName(stream))
	if os.IsNotExist(err) {
		return recovery.StreamConfig{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := parseStreamDoc(stream, data)
	if err != nil {
		t.Fatalf("stream document of %s: %v", stream, err)
	}
	return rec, true
}

// A lost state store must not silently revert every stream to the
// defaults: PUT keeps the configuration in the destination too
// (_streams/<stream>.json, versioned), and a start whose store lacks it
// restores it, version and all. Before, the rebuilt node wrote the
// stream's files with the defaults (uncompressed, default partitions).
func TestStreamConfigRestoredAfterStoreLoss(t *testing.T) {
	r := leaseRig(t, nil, 200*time.Millisecond, nil)
	e := r.start(nil)
	c := streamconf.Config{Format: streamconf.FormatNDJSON, Compression: streamconf.CompressionGzip, Partition: "p={ingest:%Y}"}
	if _, err := e.PutStream(t.Context(), "s", streamconf.Config{Format: streamconf.FormatNDJSON}); err != nil {
		t.Fatal(err)
	}
	info, err := e.PutStream(t.Context(), "s", c)
	if err != nil {
		t.Fatal(err)
	}
	if doc, ok := readStreamDocFile(t, r.fs, "s"); !ok || doc.Config.Version != 2 || !reflect.DeepEqual(doc.Config, info.Config) {
		t.Fatalf("document in the destination %+v (present %v), want version 2 %+v", doc, ok, info.Config)
	}
	r.stopLosingStore()
	time.Sleep(250 * time.Millisecond) // the crashed holder's lease expires
	e = r.start(nil)
	got := e.Stream("s")
	if !got.Configured || got.Config.Version != 2 || !reflect.DeepEqual(got.Config, info.Config) || got.ActiveVersion != 2 {
		t.Fatalf("stream after the store was lost: %+v, want %+v in force", got, info.Config)
	}
	mustSend(t, e, nil, "s", 1, 1)
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 1 || !strings.HasSuffix(res.Files[0].Final, ".ndjson.gz") || !strings.HasPrefix(res.Files[0].Final, "s/p=") {
		t.Fatalf("checkpoint after the restore: %+v, want one gzip file under the configured partition", res)
	}
	// The next PUT continues the restored version.
	if info, err := e.PutStream(t.Context(), "s", streamconf.Config{}); err != nil || info.Config.Version != 3 {
		t.Fatalf("PUT after the restore: %+v %v, want version 3", info, err)
	}
	r.foreign = true // the gzip file is not the checker's plain NDJSON
}

// What the destination holds under _streams/ is checked before it is
// believed: documents that don't parse, name another stream, carry an
// invalid configuration or an absurd version are reported and skipped;
// a configuration the store has and the destination lacks is written back.
func TestStreamConfigBadDocumentsSkipped(t *testing.T) {
	r := leaseRig(t, nil, time.Hour, nil)
	e := r.start(nil)
	if _, err := e.PutStream(t.Context(), "kept", streamconf.Config{Format: streamconf.FormatText}); err != nil {
		t.Fatal(err)
	}
	r.stop()
	if err := r.fs.Remove(rigDest + "/" + layout.StreamConfName("kept")); err != nil {
		t.Fatal(err)
	}
	good := func(stream string, version int64, format string) []byte {
		data, _ := json.Marshal(recovery.StreamConfig{Stream: stream, Config: streamconf.Config{Version: version, Format: format}, UpdatedAt: time.Now()})
		return data
	}
	plant := map[string][]byte{
		"garbage":   []byte("{not json"),
		"other":     good("elsewhere", 1, streamconf.FormatText),
		"invalid":   good("invalid", 1, "nope"),
		"huge":      good("huge", 1<<62, streamconf.FormatText),
		"zero":      good("zero", 0, streamconf.FormatText),
		"trailing":  append(good("trailing", 1, streamconf.FormatText), []byte(`{"x":1}`)...),
		"fine":      good("fine", 4, streamconf.FormatText),
		"_x":        good("_x", 1, streamconf.FormatText), // not a stream name
		"with.json": []byte("{}"),
	}
	for name, data := range plant {
		if err := afero.WriteFile(r.fs, rigDest+"/"+layout.StreamDir+"/"+name+".json", data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e = r.start(nil)
	for name := range plant {
		if name == "fine" {
			continue
		}
		if st := e.Stream(name); st.Configured {
			t.Errorf("stream %s configured from a bad document: %+v", name, st)
		}
	}
	if st := e.Stream("fine"); !st.Configured || st.Config.Version != 4 || st.Config.Format != streamconf.FormatText {
		t.Errorf("stream fine: %+v, want version 4 restored", st)
	}
	if st := e.Stream("kept"); !st.Configured || st.Config.Format != streamconf.FormatText {
		t.Errorf("stream kept: %+v", st)
	}
	if doc, ok := readStreamDocFile(t, r.fs, "kept"); !ok || doc.Config.Version != 1 {
		t.Errorf("the destination's document of kept was not written back: %+v %v", doc, ok)
	}
	r.broken = "planted documents under _streams/"
}
