package server

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/internal/testing/invariant"
	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

// A record's partition values make its file's path as long as the
// destination takes (accepted: the write-time check allows it), and the
// state store is lost while that file's checkpoint commits (renamed into
// place, no manifest). The next start moves the file aside under
// _quarantine/<node>/: a path longer than the file's own by
// len("_quarantine/n1/"), over PATH_MAX (an S3 key over 1,024 bytes
// likewise). The move then fails on every try and the node never becomes
// ready: a client's record keeps it from starting (I13).
func TestQuarantineOfLongestPath(t *testing.T) {
	// A deep folder holds the destination: its files' paths reach
	// PATH_MAX with partition values of at most 200 bytes.
	dir := t.TempDir()
	for len(dir) < 800 {
		dir += "/" + strings.Repeat("d", 200)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, afero.NewBasePathFs(afero.NewOsFs(), dir))
	r.foreign = true
	clock := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	r.tweak = func(c *Config) {
		c.Now = func() time.Time { return clock }
		c.Leaser = c.Publisher.(committer.Leaser)
	}
	e := r.start(nil)
	// The file's real path: dir + rigDest + "/" + final, 4,090 bytes
	// (PATH_MAX 4,096 with the NUL); the quarantine adds 15.
	part := layout.PartName(rigNode, 99, 0, "ndjson")
	segs := 4090 - len(dir) - len(rigDest) - 1 - len("ev/") - 1 - len(part)
	const levels = 16
	left := segs - levels*len("fNN=") - (levels - 1) // bytes of values
	var tmpl, vals []string
	for i := range levels {
		n := left / (levels - i)
		left -= n
		tmpl = append(tmpl, fmt.Sprintf("f%02d={field:f%02d}", i, i))
		vals = append(vals, fmt.Sprintf(`"f%02d":"%s"`, i, strings.Repeat("v", n)))
	}
	configure(t, r, "ev", streamconf.Config{Format: streamconf.FormatNDJSON, Partition: strings.Join(tmpl, "/")})
	if _, err := writeLines(e, "ev", "{"+strings.Join(vals, ",")+"}"); err != nil {
		t.Fatalf("write: %v", err)
	}
	res := r.checkpoint()
	if res.State != recovery.Committed || len(res.Files) != 1 {
		t.Fatalf("checkpoint: %+v", res)
	}
	if got := len(dir) + len(rigDest) + 1 + len(res.Files[0].Final); got != 4090 {
		t.Fatalf("the file's real path is %d bytes, want 4090", got)
	}
	r.stop()
	if err := r.fs.Remove(rigDest + "/" + layout.ManifestName(rigNode, res.ID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.storePath); err != nil {
		t.Fatal(err)
	}
	expireLease(t, r.fs)

	e, err := Open(r.config(r.fs))
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		why := e.Status().Recovering
		if len(why) > 60 {
			why = why[len(why)-60:] // the paths in it are 4,000 bytes
		}
		r.broken = "the node never started"
		t.Fatalf("start after the loss: %v (...%s)", err, why)
	}
	rep := r.check(invariant.Expect{})
	if len(rep.Quarantined) != 1 {
		t.Fatalf("quarantined %v, want the lost checkpoint's file", rep.Quarantined)
	}
}
