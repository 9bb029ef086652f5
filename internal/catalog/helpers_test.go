package catalog

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

const (
	tDest    = "/dest"
	tStaging = "/staging"
)

// dest is a local destination on a MemMapFs that tests fill with
// committed checkpoints of any node, as the engine would leave them.
type dest struct {
	t     testing.TB
	fs    afero.Fs
	local *local.Local
}

func newDest(t testing.TB) *dest {
	t.Helper()
	fs := afero.NewMemMapFs()
	for _, d := range []string{tDest, tStaging} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &dest{t: t, fs: fs, local: local.New(fs, tDest, tStaging)}
}

func (d *dest) write(name string, data []byte) {
	d.t.Helper()
	p := path.Join(tDest, name)
	if err := d.fs.MkdirAll(path.Dir(p), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := afero.WriteFile(d.fs, p, data, 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// commit writes node's checkpoint id: one file per stream, records lines
// each, and its manifest. It returns the files' paths.
func (d *dest) commit(node string, id uint64, records int, streams ...string) []string {
	d.t.Helper()
	c := &recovery.Checkpoint{ID: id, State: recovery.Committed, PreparedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	var paths []string
	for i, s := range streams {
		var b strings.Builder
		for r := range records {
			fmt.Fprintf(&b, "{\"n\":%d}\n", r)
		}
		data := []byte(b.String())
		p := s + "/dt=2026-11-29/hour=09/" + layout.PartName(node, id, i, "ndjson")
		d.write(p, data)
		c.Files = append(c.Files, committer.File{Stream: s, Final: p, Bytes: int64(len(data)), Records: int64(records),
			CRC32C:    fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))),
			Producers: map[string]committer.SeqRanges{"p-" + node: {{int64(id), int64(id)}}}})
		paths = append(paths, p)
	}
	m, err := recovery.BuildManifest(node, c)
	if err != nil {
		d.t.Fatal(err)
	}
	d.write(layout.ManifestName(node, id), m)
	return paths
}

// lease writes node's lease document, expiring at exp.
func (d *dest) lease(node, incarnation, listen string, exp time.Time) {
	d.t.Helper()
	b, err := json.Marshal(layout.Lease{Node: node, Incarnation: incarnation, Listen: listen, RenewedAt: exp.Add(-30 * time.Second), ExpiresAt: exp})
	if err != nil {
		d.t.Fatal(err)
	}
	d.write(layout.LeaseName(node), b)
}

func (d *dest) catalog(cfg Config) *Catalog {
	d.t.Helper()
	if cfg.Files == nil {
		cfg.Files = d.local
	}
	c, err := New(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}
