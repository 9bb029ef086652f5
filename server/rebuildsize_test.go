package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

// A start after a state-store loss over a destination whose manifests
// name many producers, all of them forgotten since: the store it rebuilds
// holds none of them, and its file must not have held them on the way
// (bbolt never gives pages back: a store that took every producer the
// manifests ever named and then forgot them keeps their size, which
// grows with how many producers ever existed, against I11).
func TestRebuildStoreSizeOfForgottenProducers(t *testing.T) {
	const manifests, per = 20, 500 // 10,000 producers
	fs := afero.NewMemMapFs()
	write := func(name string, data []byte) {
		full := path.Join(rigDest, name)
		if err := fs.MkdirAll(path.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := afero.WriteFile(fs, full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	forgot := layout.Forgotten{Node: rigNode, Producers: map[string]int64{}}
	n := 0
	flush := func() {
		if len(forgot.Producers) == 0 {
			return
		}
		body, err := json.Marshal(&forgot)
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ForgottenName(rigNode, forgot.After, n), body)
		n++
		forgot.Producers = map[string]int64{}
	}
	for c := uint64(1); c <= manifests; c++ {
		f := committer.File{Stream: "s", Final: "s/dt=2026-11-29/hour=09/" + layout.PartName(rigNode, c, 0, "ndjson"),
			Records: 1, CRC32C: "00000000", Producers: map[string]committer.SeqRanges{}, Epochs: map[string]committer.ProducerEpoch{}}
		for j := range per {
			id := fmt.Sprintf("producer-%07d", int(c-1)*per+j)
			f.Producers[id] = committer.SeqRanges{{0, 0}}
			f.Epochs[id] = committer.ProducerEpoch{Epoch: 1, Incarnation: 1}
			forgot.Producers[id] = 1
		}
		body := []byte("{\"x\":1}\n")
		f.Bytes = int64(len(body))
		write(f.Final, body)
		doc, err := layout.EncodeManifest(layout.NewManifest(rigNode, c, at, []committer.File{f}))
		if err != nil {
			t.Fatal(err)
		}
		write(layout.ManifestName(rigNode, c), doc)
		forgot.After = c
		if len(forgot.Producers) >= layout.MaxForgotten-per {
			flush()
		}
	}
	forgot.After = manifests
	flush()

	empty := newRig(t, nil)
	empty.start(nil)
	empty.stop()
	base := fileSize(t, empty.storePath)

	r := newRig(t, fs)
	r.broken = "a synthetic destination"
	e := r.start(nil)
	if c := e.ProducerCount(); c != 0 {
		t.Fatalf("the rebuild kept %d producers, all forgotten", c)
	}
	r.stop()
	got := fileSize(t, r.storePath)
	t.Logf("state.db: %d bytes after rebuilding %d forgotten producers; %d for an empty destination", got, manifests*per, base)
	if got > base+1<<20 {
		t.Fatalf("state.db is %d bytes after a rebuild whose producers were all forgotten, %d for an empty destination: it held them on the way", got, base)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
