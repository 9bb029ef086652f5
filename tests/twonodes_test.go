package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTwoNodesOneBucket runs two eosink nodes, writing the same streams into
// the same bucket and prefix at once, each SIGKILLed and restarted a few
// times. Node ids "n1" and "n10" share a prefix, and one node commits by
// multipart upload, the other by copy, so their staging objects, uploads
// and manifests sit side by side. Every batch of both must be there exactly
// once, each node's records only in its own files, and `eosink verify`
// must pass.
func TestTwoNodesOneBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("two nodes with crashes: not in -short mode")
	}
	srv := sharedMinIO(t)
	rng, _ := testRand(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b := newS3Bucket(t, srv, "shared/dest")
	env := b.env()
	dir := workDir(t)

	nodes := []struct{ id, mode string }{{"n1", "multipart"}, {"n10", "copy"}}
	procs := make([]*proc, len(nodes))
	var rngMu sync.Mutex
	for i, n := range nodes {
		procs[i] = newProc(t, dir, procConfig{
			Name: n.id,
			Args: append([]string{"--dest", b.url(), "--s3-commit", n.mode, "--node", n.id}, b.s3Flags()...),
			Env:  env,
			PerStart: func() []string {
				rngMu.Lock()
				defer rngMu.Unlock()
				return []string{"--checkpoint-interval", fmt.Sprintf("%dms", 100+rng.IntN(201))}
			},
		})
		procs[i].StartReady()
	}

	fl := startFleet(ctx, t, rng, procs, crashStreams)

	kills := envInt(t, envKills, 6)
	maxRecovery := killRestart(ctx, t, rng, procs, kills, 100, 700)
	fl.windDown(ctx, t)
	termAll(t, procs)

	fl.errs.check(t, "producer")
	d := b.dest()
	want := fl.led.snapshot()
	batches, records := fl.led.records()
	rep := requireDest(t, d, want, true)
	for _, n := range nodes {
		if rep.Nodes[n.id] == 0 {
			t.Errorf("no data file of node %s", n.id)
		}
	}
	if len(rep.Staging) > 0 {
		t.Errorf("staging objects left after clean stops: %s", firstN(rep.Staging, 10))
	}
	requireNoUploads(t, b.c, b.bucket, b.prefix, rep)
	requireOwnFiles(t, ctx, d)
	requireVerify(t, env, b.destFlags()...)
	resends := 0
	for _, s := range fl.senders {
		resends += s.Resends()
	}
	report(t, "2 nodes (n1 multipart, n10 copy) on one prefix, %d SIGKILLs; %d batches, %d records verified exactly once in %d files (n1: %d, n10: %d), %d manifests; %d resends; longest recovery %s",
		kills, batches, records, rep.Files, rep.Nodes["n1"], rep.Nodes["n10"], rep.Manifests, resends, maxRecovery.Round(time.Millisecond))
}

// requireOwnFiles checks that every data file holds only records of its
// node's producers (producer ids start with "<node>-").
func requireOwnFiles(t testing.TB, ctx context.Context, d destReader) {
	t.Helper()
	objs, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		_, node, _, ok := dataFile(o.Path)
		if !ok {
			continue
		}
		data, err := d.Read(ctx, o.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'}) {
			var r record
			if json.Unmarshal(line, &r) == nil && !strings.HasPrefix(r.P, node+"-") {
				t.Errorf("%s, a file of node %s, holds a record of producer %s", o.Path, node, r.P)
				break
			}
		}
	}
}
