package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// crashLoop is one crash-loop run: producers write while the service is
// killed and restarted at random moments.
type crashLoop struct {
	kills     int      // SIGKILLs to deliver
	producers int      // concurrent producers
	streams   []string // streams they write to
	args      []string // --dest and its flags
	env       []string // environment of the service (S3 credentials)
	dest      destReader
	verify    []string // `eosink verify` flags
	dir       string   // work directory; default a new one
	aim       int      // ms: aimed kills fall this long at most after a checkpoint request
	// configure: stream -> PUT /v1/streams/{stream} body, sent once the
	// service is first ready; those streams are written too.
	configure map[string]string
	// feed: a consumer follows the commit feed all along (feed_test.go)
	// and must read every committed batch exactly once.
	feed bool
	// after, when set, checks more once the destination is checked: it
	// gets the batches that must each be committed once (the table
	// readers of iceberg_test.go).
	after func(t *testing.T, want map[batchKey]int)
}

// crashConfigured: the crash loop's zstd stream and Parquet stream.
var crashConfigured = map[string]string{
	"zs": `{"format":"ndjson","compression":"zstd"}`,
	"pq": `{"format":"parquet","schema":{"fields":[{"name":"p","type":"string","required":true},{"name":"s","type":"string","required":true},` +
		`{"name":"q","type":"int64","required":true},{"name":"i","type":"int64","required":true},{"name":"n","type":"int64","required":true},{"name":"x","type":"string"}]}}`,
}

// crashStats is what a crash loop measured.
type crashStats struct {
	kills         int // SIGKILLs delivered
	startupKills  int // of which before the service was ready
	aimedKills    int // of which aimed at a requested checkpoint
	preparedKills int // of which while the newest checkpoint showed "prepared"
	leaseWaits    int // log lines of a start waiting on its own node lease
	recommits     int // restarts whose recovery re-committed a prepared checkpoint
	cleanups      int // restarts whose recovery removed staging files or aborted uploads
	restarts      int
	maxRecovery   time.Duration
	batches       int
	records       int
	resends       int   // times producers were told to resend accepted batches
	checkpoints   int64 // POST /v1/checkpoints answered by the test's trigger
	report        *invariant.Report
	elapsed       time.Duration
}

// producerLoop sends numbered batches until stop is set. Each batch goes
// to a random stream; its records carry (producer, stream, seq, index). A
// batch the sender keeps goes into the ledger; one it refuses is sent again
// unchanged, since it keeps its sequence number.
func producerLoop(ctx context.Context, s sender, streams []string, rng *rand.Rand, led *ledger, stop *atomic.Bool, errs *errorLog) {
	next := map[string]int64{}
	for !stop.Load() && ctx.Err() == nil {
		stream := streams[rng.IntN(len(streams))]
		n := 1 + rng.IntN(20)
		if rng.IntN(20) == 0 {
			n = 100 + rng.IntN(400)
		}
		k := batchKey{P: s.ID(), S: stream, Q: next[stream]}
		recs := makeRecords(rng, k, n, 64)
		for {
			kept, err := s.Send(ctx, stream, k.Q, recs)
			if kept {
				led.add(k, n)
				next[stream]++
			}
			if err != nil {
				errs.add(fmt.Errorf("producer %s: send %s (kept %v): %w", s.ID(), k, kept, err))
			}
			if kept || stop.Load() || ctx.Err() != nil {
				break
			}
			_ = ctxsleep.Sleep(ctx, 20*time.Millisecond)
		}
		if d := rng.IntN(3); d > 0 {
			time.Sleep(time.Duration(d) * time.Millisecond)
		}
	}
}

// errorLog collects errors from goroutines.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

// flushAll flushes every sender at once, each within timeout, and adds
// each failure to errs.
func flushAll(ctx context.Context, senders []sender, timeout time.Duration, errs *errorLog) {
	var wg sync.WaitGroup
	for _, s := range senders {
		wg.Go(func() {
			fctx, fcancel := context.WithTimeout(ctx, timeout)
			defer fcancel()
			if err := s.Flush(fctx); err != nil {
				errs.add(fmt.Errorf("flush %s: %w", s.ID(), err))
			}
		})
	}
	wg.Wait()
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// check fails t with the errors collected, "<what> error: <err>" each:
// the first ten, then how many there were.
func (l *errorLog) check(t testing.TB, what string) {
	t.Helper()
	errs := l.all()
	for i, err := range errs {
		if i == 10 {
			t.Errorf("... %d %s errors in all", len(errs), what)
			break
		}
		t.Errorf("%s error: %v", what, err)
	}
}

// run runs the loop and checks the destination; the test fails on any
// broken promise.
func (cl crashLoop) run(t *testing.T) crashStats {
	rng, _ := testRand(t)
	began := time.Now()
	dir := cl.dir
	if dir == "" {
		dir = workDir(t)
	}
	p := newProc(t, dir, procConfig{Args: cl.args, Env: cl.env, PerStart: func() []string {
		return []string{"--checkpoint-interval", fmt.Sprintf("%dms", 100+rng.IntN(201))}
	}})
	p.StartReady()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute+time.Duration(cl.kills)*2*time.Second)
	defer cancel()
	streams := slices.Clone(cl.streams)
	for s, body := range cl.configure {
		if err := p.call(ctx, http.MethodPut, "/v1/streams/"+s, []byte(body), nil); err != nil {
			t.Fatalf("PUT /v1/streams/%s: %v", s, err)
		}
		streams = append(streams, s)
	}
	slices.Sort(streams)
	if len(cl.configure) > 0 {
		// The barrier that puts them in force.
		if _, err := p.Checkpoint(ctx); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
	}

	var feed *feedConsumer
	if cl.feed {
		feed = newFeedConsumer(p.hc, p.URL)
		feed.start(ctx)
		defer feed.stop()
	}

	fl := &fleet{led: newLedger()}
	for i := range cl.producers {
		fl.add(ctx, newSender(ctx, t, p.URL, fmt.Sprintf("p%d", i)), streams, rng)
	}
	// Checkpoints on request too, now and then, racing the periodic ones.
	var ckpts atomic.Int64
	var stopCkpt atomic.Bool
	crng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	ckptDone := make(chan struct{})
	go func() {
		defer close(ckptDone)
		for !stopCkpt.Load() && ctx.Err() == nil {
			time.Sleep(time.Duration(100+crng.IntN(600)) * time.Millisecond)
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := p.Checkpoint(cctx); err == nil {
				ckpts.Add(1)
			}
			ccancel()
		}
	}()

	var st crashStats
	for st.kills < cl.kills {
		switch strategy := rng.IntN(6); {
		case strategy == 0:
			// Aim between "prepared" and "committed": request a
			// checkpoint and kill as soon as it shows prepared.
			if err := ctxsleep.Sleep(ctx, time.Duration(50+rng.IntN(300))*time.Millisecond); err != nil {
				t.Fatalf("crash loop: %v after %d kills", err, st.kills)
			}
			if killOnPrepared(ctx, p) {
				st.preparedKills++
				st.kills++
				goto restart
			}
		case strategy <= 2:
			// Aim at a checkpoint: request one and kill while it runs.
			if err := ctxsleep.Sleep(ctx, time.Duration(50+rng.IntN(300))*time.Millisecond); err != nil {
				t.Fatalf("crash loop: %v after %d kills", err, st.kills)
			}
			go func() {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				defer ccancel()
				_, _ = p.Checkpoint(cctx)
			}()
			time.Sleep(time.Duration(rng.IntN(cl.aim+1)) * time.Millisecond)
			st.aimedKills++
		default:
			if err := ctxsleep.Sleep(ctx, time.Duration(30+rng.IntN(1000))*time.Millisecond); err != nil {
				t.Fatalf("crash loop: %v after %d kills", err, st.kills)
			}
		}
		if feed != nil {
			feed.mark()
		}
		p.Kill()
		st.kills++
	restart:
		if rng.IntN(3) == 0 {
			// Kill it again while it starts, up to three times in a row,
			// as a crash-looping process is: each start must take over at
			// once what the one before left (its lease, its lease lock).
			for n := 1 + rng.IntN(3); n > 0 && st.kills < cl.kills; n-- {
				p.Start()
				time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				p.Kill()
				st.kills++
				st.startupKills++
			}
		}
		d := p.Restart()
		st.restarts++
		st.maxRecovery = max(st.maxRecovery, d)
	}
	fl.halt(ctx, t, 200*time.Millisecond)

	// Every producer's batches committed: Flush, then the service's
	// committed_seq covers the last seq sent per stream.
	flushAll(ctx, fl.senders, 90*time.Second, &fl.errs)
	last := map[[2]string]int64{}
	for k := range fl.led.snapshot() {
		kk := [2]string{k.P, k.S}
		if q, ok := last[kk]; !ok || k.Q > q {
			last[kk] = k.Q
		}
	}
	for kk, q := range last {
		ps, err := p.Producer(ctx, kk[0])
		if err != nil {
			t.Errorf("GET /v1/producers/%s: %v", kk[0], err)
			continue
		}
		if c := ps.Streams[kk[1]].CommittedSeq; c < q {
			t.Errorf("producer %s stream %s: committed_seq %d after flush, last seq sent %d", kk[0], kk[1], c, q)
		}
	}
	stopCkpt.Store(true)
	<-ckptDone
	// Producers retry transient failures themselves: any error that
	// reached the loop is a broken promise (or a client bug).
	fl.errs.check(t, "producer")
	if feed != nil {
		feed.finish(t, ctx)
	}
	if code := p.Term(); code != 0 {
		t.Errorf("SIGTERM after the loop: exit %d, want 0; log %s", code, p.LogPath)
	}

	resends := 0
	for _, s := range fl.senders {
		resends += s.Resends()
	}
	st.resends = resends // from the client's log messages: informative only

	want := fl.led.snapshot()
	st.batches, st.records = fl.led.records()
	st.report = requireDest(t, cl.dest, want, true)
	if feed != nil {
		feed.check(t, want, st.report)
		report(t, "%s, across %d SIGKILLs", feed.summary(), st.kills)
	}
	for _, ext := range []string{"ndjson.zst", "parquet"} {
		if len(cl.configure) > 0 && st.report.Encoded[ext] == 0 {
			t.Errorf("no .%s file committed: the configured streams were not written encoded (%v)", ext, st.report.Encoded)
		}
	}
	if len(st.report.Staging) > 0 {
		t.Errorf("%d staging objects left after a clean stop: %s", len(st.report.Staging), firstN(st.report.Staging, 10))
	}
	if st.report.Records != st.records {
		t.Errorf("destination holds %d records, producers sent %d", st.report.Records, st.records)
	}
	requireVerify(t, cl.env, cl.verify...)
	if cl.after != nil {
		cl.after(t, want)
	}
	st.recommits, st.cleanups, st.leaseWaits = recoveryWork(t, p.LogPath)
	if st.leaseWaits > 0 {
		// One node, one data dir: nothing else holds its lease or lock.
		t.Errorf("a start waited %d times on the lease its own killed starts left (\"take node lease, retrying\" or \"lease held\"); log %s", st.leaseWaits, p.LogPath)
	}
	if st.kills >= 5 && st.cleanups == 0 {
		t.Errorf("%d kills, yet no recovery removed a staging file: the kills never hit accepted, unprepared batches", st.kills)
	}
	if d, log := p.SlowestStart(); d > time.Second {
		t.Logf("the slowest start took %s to get ready; its log:\n%s", d.Round(time.Millisecond), log)
	}
	st.checkpoints = ckpts.Load()
	st.elapsed = time.Since(began)
	if len(st.report.Encoded) > 0 {
		t.Logf("encoded files read back through staging's decoders: %v", st.report.Encoded)
	}
	report(t, "%d SIGKILLs (%d during recovery, %d aimed at a checkpoint, %d seen prepared), %d restarts; recovery re-committed a prepared checkpoint after %d of them and cleaned up staging after %d; %d batches, %d records verified exactly once in %d files, %d manifests; longest recovery (start to /readyz 200) %s; %d resends after lost batches; %d requested checkpoints; took %s",
		st.kills, st.startupKills, st.aimedKills, st.preparedKills, st.restarts, st.recommits, st.cleanups, st.batches, st.records, st.report.Files, st.report.Manifests,
		st.maxRecovery.Round(time.Millisecond), st.resends, st.checkpoints, st.elapsed.Round(time.Millisecond))
	return st
}

// killOnPrepared requests a checkpoint and SIGKILLs the service the moment
// GET /v1/checkpoints shows the newest one "prepared". It reports whether
// it killed; it gives up when the checkpoint ends first.
func killOnPrepared(ctx context.Context, p *proc) bool {
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Checkpoint(cctx)
	}()
	for {
		var list struct {
			Checkpoints []checkpointAnswer `json:"checkpoints"`
		}
		if err := p.call(cctx, "GET", "/v1/checkpoints?limit=1", nil, &list); err == nil &&
			len(list.Checkpoints) > 0 && list.Checkpoints[0].State == "prepared" {
			p.Kill()
			return true
		}
		select {
		case <-done:
			return false
		default:
		}
	}
}

// recoveryWork reads the service's log: how many recoveries re-committed a
// prepared checkpoint, and how many removed staging files or aborted
// uploads. Those are the kills that fell inside a checkpoint.
func recoveryWork(t testing.TB, logPath string) (recommits, cleanups, leaseWaits int) {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Errorf("read log: %v", err)
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "take node lease, retrying") || strings.Contains(line, "node lease held by another process") || strings.Contains(line, "waiting for its expiry") {
			leaseWaits++
		}
		if !strings.Contains(line, `"recovery done"`) {
			continue
		}
		var m struct {
			Recommitted int `json:"recommitted"`
			Removed     int `json:"removed"`
			Aborted     int `json:"aborted_uploads"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			continue
		}
		if m.Recommitted > 0 {
			recommits++
		}
		if m.Removed > 0 || m.Aborted > 0 {
			cleanups++
		}
	}
	return recommits, cleanups, leaseWaits
}

// fleet is producers, each sending batches of its streams in a loop
// (producerLoop) until wound down, what each sent kept in led.
type fleet struct {
	led     *ledger
	stop    atomic.Bool
	errs    errorLog
	wg      sync.WaitGroup
	senders []sender
}

// startFleet starts the producers of procs' nodes: <node>-p0 and
// <node>-p1, each with its own rng drawn from rng.
func startFleet(ctx context.Context, t testing.TB, rng *rand.Rand, procs []*proc, streams []string) *fleet {
	f := &fleet{led: newLedger()}
	for _, p := range procs {
		for j := range 2 {
			f.add(ctx, newSender(ctx, t, p.URL, fmt.Sprintf("%s-p%d", p.cfg.Name, j)), streams, rng)
		}
	}
	return f
}

// add starts s sending batches of streams in a loop, with its own rng
// drawn from rng.
func (f *fleet) add(ctx context.Context, s sender, streams []string, rng *rand.Rand) {
	f.senders = append(f.senders, s)
	prng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	f.wg.Go(func() { producerLoop(ctx, s, streams, prng, f.led, &f.stop, &f.errs) })
}

// windDown lets the producers run 300ms more, stops them, waits for them
// and flushes every sender, adding failures to errs.
func (f *fleet) windDown(ctx context.Context, t testing.TB) {
	t.Helper()
	f.halt(ctx, t, 300*time.Millisecond)
	flushAll(ctx, f.senders, 60*time.Second, &f.errs)
}

// halt lets the producers run for d more, stops them (each finishes its
// batch in flight) and waits for them.
func (f *fleet) halt(ctx context.Context, t testing.TB, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	f.stop.Store(true)
	if !waitGroup(&f.wg, ctx) {
		t.Fatalf("producers did not stop: %v", ctx.Err())
	}
}

// killRestart SIGKILLs and restarts procs in turn, kills times, each
// after a pause of minMS plus up to spreadMS milliseconds drawn from rng.
// It returns the longest restart to ready.
func killRestart(ctx context.Context, t testing.TB, rng *rand.Rand, procs []*proc, kills, minMS, spreadMS int) time.Duration {
	t.Helper()
	var longest time.Duration
	for k := range kills {
		if err := ctxsleep.Sleep(ctx, time.Duration(minMS+rng.IntN(spreadMS))*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		p := procs[k%len(procs)]
		p.Kill()
		longest = max(longest, p.Restart())
	}
	return longest
}

// termAll stops every running node with SIGTERM; an exit code other than
// 0 is an error, reported with the node's log.
func termAll(t testing.TB, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		if p.Running() {
			if code := p.Term(); code != 0 {
				t.Errorf("node %s: SIGTERM: exit %d; log %s", p.cfg.Name, code, p.LogPath)
			}
		}
	}
}

// waitGroup waits for wg or ctx; false if ctx ended first.
func waitGroup(wg *sync.WaitGroup, ctx context.Context) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

var crashStreams = []string{"clicks", "orders", "views.v2"}

// TestCrashLoopLocal kills the service with SIGKILL at random moments while
// producers write to three streams of a file:// destination, restarts it on
// the same data directory, and checks that every batch sent is committed
// exactly once and nothing else is.
func TestCrashLoopLocal(t *testing.T) {
	cl := localCrashLoop(t, envInt(t, envKills, 20), envInt(t, envProducers, 4))
	cl.configure = crashConfigured
	cl.run(t)
}

// localCrashLoop is a crash loop of the given size over crashStreams, to a
// file:// destination in a new work dir. Crash loops are long: in -short
// mode it skips t.
func localCrashLoop(t *testing.T, kills, producers int) crashLoop {
	t.Helper()
	if testing.Short() {
		t.Skip("crash loop: not in -short mode")
	}
	dir := workDir(t)
	dest := dir + "/dest"
	return crashLoop{
		kills:     kills,
		producers: producers,
		streams:   crashStreams,
		args:      []string{"--dest", "file://" + dest, "--node", "e2e"},
		aim:       30,
		dest:      invariant.LocalDest(dest),
		verify:    []string{"--dest", "file://" + dest},
		dir:       dir,
	}
}

// TestCrashLoopS3 is the crash loop against MinIO, in both commit modes.
func TestCrashLoopS3(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: not in -short mode")
	}
	srv := sharedMinIO(t)
	for _, tc := range []struct {
		mode  string
		kills int
	}{{"multipart", 10}, {"copy", 5}} {
		t.Run(tc.mode, func(t *testing.T) {
			b := newS3Bucket(t, srv, "e2e/crash")
			st := crashLoop{
				kills:     envInt(t, envKills, tc.kills),
				producers: envInt(t, envProducers, 4),
				streams:   crashStreams,
				configure: crashConfigured,
				args:      append([]string{"--dest", b.url(), "--s3-commit", tc.mode, "--node", "e2e"}, b.s3Flags()...),
				env:       b.env(),
				dest:      b.dest(),
				aim:       100,
				verify:    b.destFlags(),
			}.run(t)
			requireNoUploads(t, b.c, b.bucket, b.prefix, st.report)
		})
	}
}

// s3Env is the service's environment for an S3 destination.
func s3Env(access, secret string) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret}
}

// requireNoUploads fails the test if an incomplete multipart upload is
// left in the bucket after a clean stop: every upload of an aborted or
// crashed checkpoint must have been aborted by recovery.
func requireNoUploads(t testing.TB, c *minio.Client, bucket, prefix string, _ *invariant.Report) {
	t.Helper()
	var left []string
	for u := range c.ListIncompleteUploads(t.Context(), bucket, "", true) {
		if u.Err != nil {
			t.Logf("list incomplete uploads of %s: %v (not checked)", bucket, u.Err)
			return
		}
		// Say what is left: its parts, and whether the key is final.
		var parts string
		if res, err := (minio.Core{Client: c}).ListObjectParts(t.Context(), bucket, u.Key, u.UploadID, 0, 1000); err == nil {
			parts = fmt.Sprint(len(res.ObjectParts))
		} else if minio.ToErrorResponse(err).Code == minio.NoSuchUpload {
			// MinIO still lists an upload that a cut-off Complete
			// consumed, though it no longer exists: nothing is stored
			// and nothing can abort it. Not a leak of eosink's.
			t.Logf("MinIO lists upload %s of %s, which does not exist (phantom after an interrupted Complete)", u.UploadID, u.Key)
			continue
		} else {
			parts = fmt.Sprintf("(list parts: %v)", err)
		}
		final := "absent"
		if info, err := c.StatObject(t.Context(), bucket, u.Key, minio.StatObjectOptions{}); err == nil {
			final = fmt.Sprintf("present (%d bytes)", info.Size)
		}
		left = append(left, fmt.Sprintf("%s upload %s: %s parts, final object %s", u.Key, u.UploadID, parts, final))
	}
	if len(left) > 0 {
		t.Errorf("%d incomplete multipart uploads left in %s after a clean stop: %s", len(left), bucket, firstN(left, 10))
	}
}
