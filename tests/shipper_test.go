package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/testing/invariant"
)

// anonSender prefixes the "p" of records written without producer headers
// (log shippers): checkDest expects no producer ranges for them in the
// manifests, and still checks their batches exactly once and in order.
const anonSender = "anon-"

// shipper sends batches the way a log shipper's HTTP output does, with
// Idempotency-Key and ?wait=commit: gzip bodies, a client timeout drawn
// anew for each attempt (300-1500 ms), and on anything but 200 — a
// timeout, a refused connection while the service is down, 503, 202 — the
// same body again under the same key. A batch is done at its 200; the next
// one is sent only then, so the ledger holds exactly what is committed.
type shipper struct {
	id        string
	byContent bool // key: the SHA-256 of the body (else a batch id)
	rng       *rand.Rand
	hc        *http.Client
	url       string
	retries   atomic.Int64
	timeouts  atomic.Int64
	dups      atomic.Int64
}

// newShipper is a test's shipper i, its random keys drawn from a stream of
// rng's: odd ones key their batches by content, even ones by batch id.
func newShipper(i int, rng *rand.Rand, hc *http.Client, url string) *shipper {
	return &shipper{id: fmt.Sprintf("%sship-%d", anonSender, i), byContent: i%2 == 1,
		rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), hc: hc, url: url}
}

// loop sends batches q, q+1, ... of 1 to maxRecs records, each to one of
// streams, until stop or the end of ctx; each batch committed goes into
// led and counts in sent. An error ends it, kept in errs.
func (s *shipper) loop(ctx context.Context, streams []string, q int64, maxRecs int, rng *rand.Rand, led *ledger, stop *atomic.Bool, errs *errorLog, sent *atomic.Int64) {
	for ; !stop.Load() && ctx.Err() == nil; q++ {
		stream := streams[rng.IntN(len(streams))]
		k := batchKey{P: s.id, S: stream, Q: q}
		recs := makeRecords(rng, k, 1+rng.IntN(maxRecs), 64)
		if err := s.sendOne(ctx, stream, q, recs); err != nil {
			errs.add(err)
			return
		}
		led.add(k, len(recs))
		sent.Add(1)
	}
}

// sendOne delivers batch q of stream and returns once it is committed; it
// gives up only when ctx ends or the service answers what a retry cannot
// change (422, 400).
func (s *shipper) sendOne(ctx context.Context, stream string, q int64, recs [][]byte) error {
	raw := ndjson(recs)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	key := fmt.Sprintf("%s-%s-%d", s.id, stream, q)
	if s.byContent {
		sum := sha256.Sum256(raw)
		key = hex.EncodeToString(sum[:])
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.retries.Add(1)
			if err := ctxsleep.Sleep(ctx, time.Duration(20+s.rng.IntN(80))*time.Millisecond); err != nil {
				return fmt.Errorf("batch %s/%s/%d: %w", s.id, stream, q, err)
			}
		}
		actx, cancel := context.WithTimeout(ctx, time.Duration(300+s.rng.IntN(1201))*time.Millisecond)
		req, err := http.NewRequestWithContext(actx, http.MethodPost, s.url+"/v1/streams/"+stream+"/records?wait=commit", bytes.NewReader(gz.Bytes()))
		if err != nil {
			cancel()
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Content-Encoding", "gzip")
		req.Header.Set("Idempotency-Key", key)
		resp, err := s.hc.Do(req)
		if err != nil {
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				s.timeouts.Add(1)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("batch %s/%s/%d: %w", s.id, stream, q, ctx.Err())
			}
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
		cancel()
		switch {
		case resp.StatusCode == http.StatusOK:
			if bytes.Contains(body, []byte(`"duplicate":true`)) {
				s.dups.Add(1)
			}
			return nil
		case resp.StatusCode == http.StatusAccepted || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			continue
		default:
			return fmt.Errorf("batch %s/%s/%d: %d %s", s.id, stream, q, resp.StatusCode, body)
		}
	}
}

// plainSend is a plain 202 write: no key, no wait, one attempt.
func plainSend(ctx context.Context, hc *http.Client, url, stream string, recs [][]byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/streams/"+stream+"/records", bytes.NewReader(ndjson(recs)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("plain write: %d %s", resp.StatusCode, body)
	}
	return nil
}

// TestShippers: several shipper-like senders (keys from a batch id or the
// body's hash, gzip, random client timeouts, retries under the same key,
// ?wait=commit) write while eosink is SIGKILLed and restarted; at the end
// every batch a sender saw committed is in the destination exactly once,
// and nothing else is. Before the kills, the throughput of the same number
// of senders is measured with keyed waiting writes and with plain 202
// writes (logged, not asserted).
func TestShippers(t *testing.T) {
	if testing.Short() {
		t.Skip("shipper crash loop: not in -short mode")
	}
	rng, _ := testRand(t)
	dir := workDir(t)
	dest := dir + "/dest"
	// After the first start (the throughput phases, at the defaults), half
	// the starts linger 1 s before a waited-for commit: then commits take
	// longer than many client timeouts, and retries under the same key
	// ride on the batch their first attempt left.
	starts := 0
	p := newProc(t, dir, procConfig{Args: []string{"--dest", "file://" + dest, "--node", "e2e", "--checkpoint-interval", "1s"},
		PerStart: func() []string {
			starts++
			if starts > 1 && rng.IntN(2) == 0 {
				return []string{"--commit-linger", "1s"}
			}
			return nil
		}})
	p.StartReady()
	kills := envInt(t, envKills, 8)
	senders := envInt(t, envProducers, 4)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute+time.Duration(kills)*3*time.Second)
	defer cancel()
	led := newLedger()
	var errs errorLog
	streams := []string{"logs", "events"}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * senders}}

	// Throughput, no kills: plain 202 writes, then keyed waiting writes.
	const phase = 3 * time.Second
	measure := func(send func(i int, q int64, stream string, recs [][]byte) error, tag string) (batches, records int64) {
		var wg sync.WaitGroup
		var nb, nr atomic.Int64
		end := time.Now().Add(phase)
		for i := range senders {
			prng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			wg.Go(func() {
				for q := int64(0); time.Now().Before(end) && ctx.Err() == nil; q++ {
					stream := streams[prng.IntN(len(streams))]
					k := batchKey{P: fmt.Sprintf("%s%s-%d", anonSender, tag, i), S: stream, Q: q}
					recs := makeRecords(prng, k, 20+prng.IntN(80), 64)
					if err := send(i, q, stream, recs); err != nil {
						errs.add(err)
						return
					}
					led.add(k, len(recs))
					nb.Add(1)
					nr.Add(int64(len(recs)))
				}
			})
		}
		wg.Wait()
		return nb.Load(), nr.Load()
	}
	filesBefore := countFiles(t, dest)
	pb, pr := measure(func(_ int, _ int64, stream string, recs [][]byte) error {
		return plainSend(ctx, hc, p.URL, stream, recs)
	}, "plain")
	if _, err := p.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	plainFiles := countFiles(t, dest) - filesBefore
	keyed := make([]*shipper, senders)
	for i := range keyed {
		keyed[i] = newShipper(i, rng, hc, p.URL)
	}
	filesBefore = countFiles(t, dest)
	kb, kr := measure(func(i int, q int64, stream string, recs [][]byte) error {
		return keyed[i].sendOne(ctx, stream, q, recs)
	}, "ship")
	keyedFiles := countFiles(t, dest) - filesBefore
	report(t, "%d senders for %s each: plain 202 writes %d batches, %d records (%.0f records/s, %d files); keyed gzip wait=commit writes %d batches, %d records (%.0f records/s, %d files)",
		senders, phase, pb, pr, float64(pr)/phase.Seconds(), plainFiles, kb, kr, float64(kr)/phase.Seconds(), keyedFiles)

	// The crash loop: the keyed senders go on (new batch numbers) while
	// eosink is killed and restarted.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent atomic.Int64
	for _, s := range keyed {
		prng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Go(func() { s.loop(ctx, streams, 1<<20, 50, prng, led, &stop, &errs, &sent) })
	}
	for range kills {
		if err := ctxsleep.Sleep(ctx, time.Duration(300+rng.IntN(1500))*time.Millisecond); err != nil {
			t.Fatalf("crash loop: %v", err)
		}
		p.Kill()
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // senders time out and retry meanwhile
		p.Restart()
	}
	time.Sleep(500 * time.Millisecond)
	stop.Store(true) // each sender finishes its batch in flight: the ledger is exact
	if !waitGroup(&wg, ctx) {
		t.Fatalf("senders did not stop: %v", ctx.Err())
	}
	errs.check(t, "sender")
	if code := p.Term(); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0; log %s", code, p.LogPath)
	}
	want := led.snapshot()
	batches, records := led.records()
	rep := requireDest(t, invariant.LocalDest(dest), want, true)
	if rep.Records != records {
		t.Errorf("destination holds %d records, senders saw %d committed", rep.Records, records)
	}
	var retries, timeouts, dups int64
	for _, s := range keyed {
		retries, timeouts, dups = retries+s.retries.Load(), timeouts+s.timeouts.Load(), dups+s.dups.Load()
	}
	report(t, "%d SIGKILLs; %d batches in the crash loop; %d batches, %d records in all verified exactly once in %d files; keyed senders: %d retries (%d client timeouts), %d answered as duplicates",
		kills, sent.Load(), batches, records, rep.Files, retries, timeouts, dups)
}

// countFiles counts the committed data files under dest.
func countFiles(t testing.TB, dest string) int {
	t.Helper()
	objs, err := invariant.LocalDest(dest).List(t.Context())
	if err != nil {
		return 0
	}
	n := 0
	for _, o := range objs {
		if isDataFile(o.Path) {
			n++
		}
	}
	return n
}
