package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/internal/testing/enginetest"
	"github.com/eosink/eosink/internal/testing/faultfs"
	"github.com/eosink/eosink/server"
)

// interceptor may answer a request itself (true) instead of the service.
type interceptor func(w http.ResponseWriter, r *http.Request, next http.Handler) bool

// rig is an engine rig (internal/testing/enginetest: the destination is
// checked when the test ends), opened by start, served by api.Server
// behind an httptest server whose handler can be swapped atomically:
// crash() closes the engine without a checkpoint and opens a new one over
// the same disk and store, as a restarted process would.
type rig struct {
	t  *testing.T
	ts *httptest.Server
	er *enginetest.Rig // from start on

	// Set before start.
	inject faultfs.Injector // faults on the engine's disk
	// Set before start or crash.
	interval time.Duration // checkpoint interval of the next engine
	engine   func(*server.Config)
	api      func(*api.Config)

	crashMu sync.Mutex // one crash at a time
	handler atomic.Pointer[http.Handler]
	icpt    atomic.Pointer[interceptor]

	writes atomic.Int64 // write requests that reached the test server
	seqLog sync.Map     // "stream/seq" -> *atomic.Int64: write requests per batch
}

// failPreCommitsWhile has the engine's disk fail the close of every
// staging file while failing is set (after its fsync passed, which would
// stop the engine, I14): the pre-commit fails and the checkpoint aborts.
// Not the close of a manifest's early copy (<name>.publish.inprogress,
// written while a prepared checkpoint commits, recovery.Finisher): a
// commit that fails is retried until it passes (I4), so a checkpoint
// committing when failing is set stayed stuck while it was set, and the
// checkpoint meant to abort waited behind it until its ctx ended.
// Call it before start.
func (r *rig) failPreCommitsWhile(failing *atomic.Bool) {
	r.inject = faultfs.InjectorFunc(func(op faultfs.Op) error {
		if failing.Load() && op.Kind == faultfs.OpClose && strings.HasSuffix(op.Path, ".inprogress") && !strings.HasSuffix(op.Path, ".publish.inprogress") {
			return syscall.EIO
		}
		return nil
	})
}

func newRig(t *testing.T, interval time.Duration) *rig {
	t.Helper()
	r := &rig{t: t, interval: interval}
	r.ts = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.ts.Close)
	return r
}

func (r *rig) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost && req.Header.Get("Producer-Seq") != "" {
		r.writes.Add(1)
		k := req.URL.Path + "#" + req.Header.Get("Producer-Seq")
		n, _ := r.seqLog.LoadOrStore(k, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	h := *r.handler.Load()
	if f := r.icpt.Load(); f != nil && (*f)(w, req, h) {
		return
	}
	h.ServeHTTP(w, req)
}

// attempts returns how many write requests carried seq on stream.
func (r *rig) attempts(stream string, seq int64) int64 {
	n, ok := r.seqLog.Load(fmt.Sprintf("/v1/streams/%s/records#%d", stream, seq))
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (r *rig) intercept(f interceptor) {
	if f == nil {
		r.icpt.Store(nil)
		return
	}
	r.icpt.Store(&f)
}

// start opens an engine and waits for it to be ready.
func (r *rig) start() *rig {
	r.t.Helper()
	r.er = enginetest.New(r.t, enginetest.Options{
		Inject: r.inject,
		Config: func(c *server.Config) {
			c.CheckpointInterval = r.interval
			if r.engine != nil {
				r.engine(c)
			}
		},
		Opened: r.serveEngine,
	})
	return r
}

func (r *rig) engine0() *server.Engine { return r.er.Engine() }

// serveEngine swaps the service to the rig's new engine; it does not wait
// for recovery, so clients may see 503 not_ready meanwhile. It is the one
// place the tests build an api.Server.
func (r *rig) serveEngine(er *enginetest.Rig) {
	eng := er.Engine()
	acfg := api.Config{Engine: eng, Files: er.Dest}
	if r.api != nil {
		r.api(&acfg)
	}
	srv, err := api.New(acfg)
	if err != nil {
		r.t.Fatalf("new api server: %v", err)
	}
	var h http.Handler = srv
	r.handler.Store(&h)
}

// crash stops the engine at once, without a checkpoint: batches accepted
// since the last prepared checkpoint are lost. Then a new engine recovers
// over the same disk and store and takes over the service.
func (r *rig) crash() {
	r.t.Helper()
	r.crashMu.Lock()
	defer r.crashMu.Unlock()
	if err := r.er.Crash(); err != nil {
		r.t.Fatalf("close engine: %v", err)
	}
}

// checkpoint runs a checkpoint and expects it committed.
func (r *rig) checkpoint() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	res, err := r.engine0().Checkpoint(ctx)
	if err != nil || res.State != "committed" {
		r.t.Fatalf("checkpoint: %+v %v", res, err)
	}
}

// client returns a client of the rig's service with fast retries.
func (r *rig) client(producer string, opts ...client.Option) *client.Client {
	r.t.Helper()
	opts = append([]client.Option{
		client.WithProducer(producer),
		client.WithRetry(client.Retry{Min: time.Millisecond, Max: 20 * time.Millisecond}),
	}, opts...)
	c, err := client.New(r.ts.URL, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// initClient returns a client of the rig's service (client), inited.
func (r *rig) initClient(producer string, opts ...client.Option) *client.Client {
	r.t.Helper()
	c := r.client(producer, opts...)
	if _, err := c.Init(ctx(r.t)); err != nil {
		r.t.Fatalf("init %s: %v", producer, err)
	}
	return c
}

// flush flushes c or fails the test.
func flush(t *testing.T, c *client.Client) {
	t.Helper()
	if err := c.Flush(ctx(t)); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// get GETs a path of the service and decodes JSON into out (if not nil),
// or returns the body.
func (r *rig) get(path string, out any) []byte {
	r.t.Helper()
	resp, err := http.Get(r.ts.URL + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, body, err)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			r.t.Fatalf("GET %s: decode: %v", path, err)
		}
	}
	return body
}

// committed reads every committed file of stream through the API
// (/v1/files) and counts each record's "k".
func (r *rig) committed(stream string) map[string]int {
	r.t.Helper()
	var list struct {
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	r.get("/v1/files?prefix="+url.QueryEscape(stream+"/"), &list)
	out := map[string]int{}
	for _, f := range list.Files {
		sc := bufio.NewScanner(bytes.NewReader(r.get("/v1/files/"+f.Path, nil)))
		for sc.Scan() {
			var rec struct {
				K string `json:"k"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.K == "" {
				r.t.Fatalf("file %s: bad record %q: %v", f.Path, sc.Text(), err)
			}
			out[rec.K]++
		}
	}
	return out
}

// expectOnce checks that the committed records of stream are exactly want,
// each once.
func (r *rig) expectOnce(stream string, want []string) {
	r.t.Helper()
	got := r.committed(stream)
	for _, k := range want {
		if got[k] != 1 {
			r.t.Errorf("stream %s: record %s committed %d times, want once", stream, k, got[k])
		}
		delete(got, k)
	}
	for k, n := range got {
		r.t.Errorf("stream %s: unexpected record %s committed %d times", stream, k, n)
	}
}

// records makes a batch of n records keyed tag-0 .. tag-(n-1); it returns
// the batch and the keys.
func records(tag string, n int) ([][]byte, []string) {
	var recs [][]byte
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s-%d", tag, i)
		recs = append(recs, fmt.Appendf(nil, `{"k":%q,"pad":"0123456789"}`, k))
		keys = append(keys, k)
	}
	return recs, keys
}

// sendBatches sends n batches of one record each (records tag0, tag1, ...)
// to stream "s" and returns the records' keys; a failed Send ends the test.
func sendBatches(t *testing.T, c *client.Client, tag string, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		recs, k := records(fmt.Sprintf("%s%d", tag, i), 1)
		keys = append(keys, k...)
		if _, err := c.Send(ctx(t), "s", recs); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// ctx returns a context bounded for one test step.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// hijackClose drops the connection without an answer.
func hijackClose(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// answer writes a JSON error the way the service does.
func answer(w http.ResponseWriter, status int, code string, hdr ...string) {
	for i := 0; i+1 < len(hdr); i += 2 {
		w.Header().Set(hdr[i], hdr[i+1])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":%q,"message":"injected by the test"}`+"\n", code)
}

// isWrite reports whether req is a write of a batch.
func isWrite(req *http.Request) bool {
	return req.Method == http.MethodPost && req.Header.Get("Producer-Seq") != ""
}

// answerOutOfOrder answers 409 out_of_order_sequence with expected_seq, the
// way the service does.
func answerOutOfOrder(w http.ResponseWriter, expected int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	_, _ = fmt.Fprintf(w, `{"error":"out_of_order_sequence","message":"injected by the test","expected_seq":%d}`+"\n", expected)
}
