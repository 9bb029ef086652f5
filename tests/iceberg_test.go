package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/minio/minio-go/v7"

	"github.com/eosink/eosink/internal/testing/icebergread"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// Iceberg table streams read by readers that know nothing of eosink:
// apache/iceberg-go (here, in process) and npm icebird (icebird_test.go),
// each opening the newest metadata file the version hint names, as a
// Hadoop-catalog reader does.

// tableStream is the crash loop's and these tests' Iceberg stream: the
// crash loop's records, partitioned by producer.
const tableStream = "tb"

const tableStreamConf = `{"format":"parquet","table":"iceberg","partition":"p={field:p}","keep_snapshots":20,` +
	`"schema":{"fields":[{"name":"p","type":"string","required":true},{"name":"s","type":"string","required":true},` +
	`{"name":"q","type":"int64","required":true},{"name":"i","type":"int64","required":true},{"name":"n","type":"int64","required":true},{"name":"x","type":"string"}]}}`

// tableDest finds and reads a table's newest metadata in a destination.
type tableDest struct {
	// read reads a destination-relative name; a missing one is os.ErrNotExist.
	read func(ctx context.Context, name string) ([]byte, error)
	// write writes a destination-relative name, as another writer of
	// the destination would (a planted file).
	write func(ctx context.Context, name string, data []byte) error
	loc   string // the destination's absolute URI
	fsys  iceio.IO
}

func localTableDest(dir string) tableDest {
	return tableDest{
		read: func(_ context.Context, name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) },
		write: func(_ context.Context, name string, data []byte) error {
			return os.WriteFile(filepath.Join(dir, name), data, 0o644)
		},
		loc: "file://" + dir, fsys: iceio.LocalFS{},
	}
}

func (b s3Bucket) tableDest() tableDest {
	return tableDest{
		read: func(ctx context.Context, name string) ([]byte, error) {
			obj, err := b.c.GetObject(ctx, b.bucket, b.prefix+"/"+name, minio.GetObjectOptions{})
			if err != nil {
				return nil, err
			}
			defer obj.Close()
			data, err := io.ReadAll(obj)
			if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
				return nil, os.ErrNotExist
			}
			return data, err
		},
		write: func(ctx context.Context, name string, data []byte) error {
			_, err := b.c.PutObject(ctx, b.bucket, b.prefix+"/"+name, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
			return err
		},
		loc: "s3://" + b.bucket + "/" + b.prefix, fsys: icebergread.S3{Client: b.c},
	}
}

// newest returns the absolute location of stream's newest metadata file
// as the version hint names it, "" when there is no table yet.
func (d tableDest) newest(ctx context.Context, stream string) (string, error) {
	hint, err := d.read(ctx, stream+"/metadata/version-hint.text")
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read version hint: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(hint)))
	if err != nil {
		return "", fmt.Errorf("version hint %q: %w", hint, err)
	}
	return fmt.Sprintf("%s/%s/metadata/v%d.metadata.json", d.loc, stream, v), nil
}

// readGo reads the table with iceberg-go: its rows' batch keys and
// record indexes.
func (d tableDest) readGo(ctx context.Context, stream string) (*icebergread.Table, error) {
	loc, err := d.newest(ctx, stream)
	if err != nil || loc == "" {
		return &icebergread.Table{}, err
	}
	return icebergread.Read(ctx, d.fsys, loc)
}

// tableRecord is one row as a reader returned it.
type tableRecord struct {
	k batchKey
	i int
}

// checkTableRows compares rows a reader saw with the batches that must be
// in the table, each record once, and nothing else.
func checkTableRows(t testing.TB, reader string, rows []tableRecord, want map[batchKey]int) {
	t.Helper()
	seen := map[tableRecord]int{}
	for _, r := range rows {
		seen[r]++
	}
	problems := 0
	bad := func(format string, a ...any) {
		if problems++; problems <= 10 {
			t.Errorf(reader+": "+format, a...)
		}
	}
	total := 0
	for k, n := range want {
		for i := range n {
			switch c := seen[tableRecord{k, i}]; c {
			case 1:
			case 0:
				bad("record %s #%d missing", k, i)
			default:
				bad("record %s #%d read %d times", k, i, c)
			}
		}
		total += n
	}
	for r := range seen {
		if n, ok := want[r.k]; !ok || r.i >= n {
			bad("record %s #%d was never sent", r.k, r.i)
		}
	}
	if problems > 10 {
		t.Errorf("%s: ... %d problems in all", reader, problems)
	}
	if len(rows) != total {
		t.Errorf("%s: %d rows, want %d", reader, len(rows), total)
	}
}

func goRows(tb *icebergread.Table) []tableRecord {
	out := make([]tableRecord, 0, len(tb.Rows))
	for _, r := range tb.Rows {
		q, _ := r["q"].(float64)
		i, _ := r["i"].(float64)
		p, _ := r["p"].(string)
		s, _ := r["s"].(string)
		out = append(out, tableRecord{batchKey{P: p, S: s, Q: int64(q)}, int(i)})
	}
	return out
}

// onlyStream keeps the batches of stream.
func onlyStream(want map[batchKey]int, stream string) map[batchKey]int {
	out := map[batchKey]int{}
	for k, n := range want {
		if k.S == stream {
			out[k] = n
		}
	}
	return out
}

// checkTable reads stream's table with every reader and checks it holds
// exactly want's batches of the stream.
func checkTable(t testing.TB, d tableDest, want map[batchKey]int) {
	t.Helper()
	want = onlyStream(want, tableStream)
	tb, err := d.readGo(t.Context(), tableStream)
	if err != nil {
		t.Fatalf("iceberg-go: %v", err)
	}
	checkTableRows(t, "iceberg-go", goRows(tb), want)
	n := 0
	for _, c := range want {
		n += c
	}
	report(t, "iceberg-go read %d rows of %d batches from %d snapshots, each record once", len(tb.Rows), len(want), tb.Snapshots)
	checkIcebird(t, d, want)
}

// icebergE2E: a table stream written through the API; nothing of a
// checkpoint is in the table before it commits, everything once after.
func icebergE2E(ctx context.Context, t *testing.T, p *proc, d tableDest) {
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[batchKey]int{}
	next := map[string]int64{} // each producer's next sequence number
	senders := []sender{newSender(ctx, t, p.URL, "p0"), newSender(ctx, t, p.URL, "p1")}
	send := func(batches int) {
		for b := range batches {
			s := senders[b%2]
			k := batchKey{P: s.ID(), S: tableStream, Q: next[s.ID()]}
			n := 1 + rng.IntN(50)
			if kept, err := s.Send(ctx, tableStream, k.Q, makeRecords(rng, k, n, 16)); err != nil || !kept {
				t.Fatalf("send %s: kept %v, %v", k, kept, err)
			}
			want[k] = n
			next[s.ID()]++
		}
	}
	send(6)
	if _, err := p.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	committed := maps.Clone(want)
	// Accepted, not committed (--checkpoint-interval 0): not in the table.
	send(4)
	tb, err := d.readGo(ctx, tableStream)
	if err != nil {
		t.Fatal(err)
	}
	checkTableRows(t, "iceberg-go before the commit", goRows(tb), committed)
	checkIcebird(t, d, committed)
	if _, err := p.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, d, want)
}

// icebergPlanted: documents planted in the table's metadata by someone
// else do not stop the table's commits, nor make them skip (I13). After
// the first checkpoint, a document that is no table metadata is planted
// as the table's next version with the version hint naming it: the next
// checkpoint commits past it. Then a copy of the newest version whose
// eosink.committed.n1 property names a checkpoint far ahead is planted
// as the next one: the next checkpoint is still appended. Both readers
// following the hint read every record once; the caller's verify (both
// directions) is clean. Failed before 3ff2f22: the second checkpoint's
// commit was stuck (ErrCorrupt, retried for ever).
func icebergPlanted(ctx context.Context, t *testing.T, p *proc, d tableDest) {
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[batchKey]int{}
	s := newSender(ctx, t, p.URL, "p0")
	// plantNext writes doc (given the newest version's document) as the
	// table's next version and points the hint at it.
	plantNext := func(doc func(newest []byte) []byte) {
		hint, err := d.read(ctx, tableStream+"/metadata/version-hint.text")
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(strings.TrimSpace(string(hint)))
		newest, err := d.read(ctx, tableStream+"/metadata/v"+strconv.Itoa(v)+".metadata.json")
		if err != nil {
			t.Fatal(err)
		}
		next := strconv.Itoa(v + 1)
		if err := d.write(ctx, tableStream+"/metadata/v"+next+".metadata.json", doc(newest)); err != nil {
			t.Fatal(err)
		}
		if err := d.write(ctx, tableStream+"/metadata/version-hint.text", []byte(next)); err != nil {
			t.Fatal(err)
		}
	}
	plants := []func(newest []byte) []byte{
		func([]byte) []byte { return []byte("<html>403</html>") },
		func(newest []byte) []byte {
			var m map[string]json.RawMessage
			var props map[string]string
			if err := json.Unmarshal(newest, &m); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(m["properties"], &props); err != nil {
				t.Fatal(err)
			}
			props["eosink.committed.n1"] = "1099511627776"
			m["properties"], _ = json.Marshal(props)
			b, _ := json.Marshal(m)
			return b
		},
	}
	for round := 0; ; round++ {
		for range 3 {
			k := batchKey{P: s.ID(), S: tableStream, Q: int64(len(want))}
			n := 1 + rng.IntN(20)
			if kept, err := s.Send(ctx, tableStream, k.Q, makeRecords(rng, k, n, 16)); err != nil || !kept {
				t.Fatalf("send %s: kept %v, %v", k, kept, err)
			}
			want[k] = n
		}
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		a, err := p.Checkpoint(cctx)
		ccancel()
		if err != nil || a.State != "committed" {
			t.Fatalf("checkpoint (round %d): %+v, %v", round, a, err)
		}
		if round == len(plants) {
			break
		}
		plantNext(plants[round])
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, d, want)
}

func TestIcebergLocal(t *testing.T)        { icebergNode(t, "", icebergE2E) }
func TestIcebergPlantedLocal(t *testing.T) { icebergNode(t, "", icebergPlanted) }
func TestIcebergS3(t *testing.T)           { icebergNode(t, "e2e/iceberg", icebergE2E) }
func TestIcebergPlantedS3(t *testing.T)    { icebergNode(t, "e2e/iceberg-planted", icebergPlanted) }

// icebergNode starts one node (--checkpoint-interval 0) on a local
// destination, or on a MinIO bucket under s3Prefix when that is not empty,
// configures the table stream, runs scenario within two minutes, and
// verifies the destination afterwards.
func icebergNode(t *testing.T, s3Prefix string, scenario func(context.Context, *testing.T, *proc, tableDest)) {
	args := []string{"--node", "n1", "--checkpoint-interval", "0"}
	var (
		p          *proc
		d          tableDest
		env, flags []string
	)
	if s3Prefix == "" {
		dir := workDir(t)
		dest := filepath.Join(dir, "dest")
		flags = []string{"--dest", "file://" + dest}
		p, d = newProc(t, dir, procConfig{Args: append(flags, args...)}), localTableDest(dest)
	} else {
		b := newS3Bucket(t, sharedMinIO(t), s3Prefix)
		env, flags = b.env(), b.destFlags()
		p, d = newProc(t, workDir(t), procConfig{Args: append(flags, args...), Env: env}), b.tableDest()
	}
	p.StartReady()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := p.call(ctx, "PUT", "/v1/streams/"+tableStream, []byte(tableStreamConf), nil); err != nil {
		t.Fatalf("PUT: %v", err)
	}
	scenario(ctx, t, p, d)
	requireVerify(t, env, flags...)
}

// TestCrashLoopIceberg is the crash loop (SIGKILLs at random moments,
// producers resending what a crash lost) with a table stream besides the
// crash loop's streams; afterwards both readers must see each of the
// table's records exactly once. EOSINK_E2E_KILLS runs it longer.
func TestCrashLoopIceberg(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: not in -short mode")
	}
	configure := map[string]string{tableStream: tableStreamConf}
	maps.Copy(configure, crashConfigured)
	t.Run("local", func(t *testing.T) {
		cl := localCrashLoop(t, envInt(t, envKills, 8), envInt(t, envProducers, 4))
		cl.streams = crashStreams[:1]
		cl.configure = configure
		table := localTableDest(cl.dir + "/dest") // localCrashLoop's destination
		cl.after = func(t *testing.T, want map[batchKey]int) { checkTable(t, table, want) }
		cl.run(t)
	})
	t.Run("s3", func(t *testing.T) {
		b := newS3Bucket(t, sharedMinIO(t), "e2e/crash-iceberg")
		crashLoop{
			kills:     envInt(t, envKills, 5),
			producers: envInt(t, envProducers, 4),
			streams:   crashStreams[:1],
			configure: configure,
			args:      append([]string{"--dest", b.url(), "--node", "e2e"}, b.s3Flags()...),
			env:       b.env(),
			dest:      b.dest(),
			aim:       100,
			verify:    b.destFlags(),
			after:     func(t *testing.T, want map[batchKey]int) { checkTable(t, b.tableDest(), want) },
		}.run(t)
	})
}

// TestTwoNodesIceberg: two nodes write one table stream at once (their
// commits race for each metadata version), each SIGKILLed and restarted
// a few times, on a local destination and on MinIO. Both readers must see
// every record of both once.
func TestTwoNodesIceberg(t *testing.T) {
	if testing.Short() {
		t.Skip("two nodes with crashes: not in -short mode")
	}
	t.Run("local", func(t *testing.T) {
		dir := workDir(t)
		dest := dir + "/dest"
		twoNodesTable(t, dir, []string{"--dest", "file://" + dest}, nil, invariant.LocalDest(dest), localTableDest(dest), []string{"--dest", "file://" + dest})
	})
	t.Run("s3", func(t *testing.T) {
		b := newS3Bucket(t, sharedMinIO(t), "shared/table")
		twoNodesTable(t, workDir(t), append([]string{"--dest", b.url()}, b.s3Flags()...), b.env(), b.dest(), b.tableDest(), b.destFlags())
	})
}

func twoNodesTable(t *testing.T, dir string, args, env []string, d destReader, td tableDest, verify []string) {
	rng, _ := testRand(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	nodes := []string{"n1", "n2"}
	procs := make([]*proc, len(nodes))
	for i, n := range nodes {
		procs[i] = newProc(t, dir, procConfig{Name: n, Args: append(append([]string{}, args...), "--node", n, "--checkpoint-interval", "150ms"), Env: env})
		procs[i].StartReady()
		if err := procs[i].call(ctx, "PUT", "/v1/streams/"+tableStream, []byte(tableStreamConf), nil); err != nil {
			t.Fatalf("PUT on %s: %v", n, err)
		}
	}
	fl := startFleet(ctx, t, rng, procs, []string{tableStream})
	kills := envInt(t, envKills, 4)
	killRestart(ctx, t, rng, procs, kills, 200, 800)
	fl.windDown(ctx, t)
	termAll(t, procs)
	fl.errs.check(t, "producer")
	want := fl.led.snapshot()
	rep := requireDest(t, d, want, true)
	for _, n := range nodes {
		if rep.Nodes[n] == 0 {
			t.Errorf("no data file of node %s", n)
		}
	}
	requireVerify(t, env, verify...)
	checkTable(t, td, want)
	tb, err := td.readGo(ctx, tableStream)
	if err != nil {
		t.Fatal(err)
	}
	batches, records := fl.led.records()
	report(t, "2 nodes on one table, %d SIGKILLs: %d batches, %d records, %d files (n1: %d, n2: %d), %d snapshots kept",
		kills, batches, records, rep.Files, rep.Nodes["n1"], rep.Nodes["n2"], tb.Snapshots)
}
