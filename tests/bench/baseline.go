package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// baselineArg, as the first argument, makes this program the raw baseline
// server instead of the harness (it re-executes itself that way).
const baselineArg = "__baseline-serve"

// baseline is the raw comparison point: the least an HTTP server can do
// with the same requests. Each write body is read the way eosink reads it
// (one buffer sized from Content-Length; by default taken from a pool and
// given back, as eosink does since 7e48158, or a fresh one per request
// with --baseline-alloc fresh) and appended to one file with a single
// write(2) on an O_APPEND descriptor: no validation, no buffering across
// requests, no fsync, no lock (O_APPEND makes each write land whole at the
// end of the file). It answers 202 with a JSON body of the same shape and
// size as eosink's, and fakes the producer init and /readyz so the load
// generator runs unchanged against it.
type baseline struct {
	f    *os.File
	pool bool
	bufs sync.Pool
}

func newBaselineHandler(f *os.File, pool bool) http.Handler {
	b := &baseline{f: f, pool: pool}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/streams/{stream}/records", b.records)
	mux.HandleFunc("POST /v1/producers/{producer}/init", b.init)
	ok := func(w http.ResponseWriter, _ *http.Request) {
		writeRaw(w, http.StatusOK, []byte(`{"status":"ready"}`+"\n"))
	}
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /healthz", ok)
	return mux
}

const baselineMaxBody = 64 << 20 // eosink's default --max-body

func (b *baseline) records(w http.ResponseWriter, r *http.Request) {
	buf := new(bytes.Buffer)
	if b.pool {
		if pb, ok := b.bufs.Get().(*bytes.Buffer); ok {
			buf = pb
		}
		defer func() {
			if buf.Cap() <= 4<<20 {
				buf.Reset()
				b.bufs.Put(buf)
			}
		}()
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + 1)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, baselineMaxBody)); err != nil {
		writeRaw(w, http.StatusBadRequest, []byte(`{"error":"invalid_body","message":"read body"}`+"\n"))
		return
	}
	if _, err := b.f.Write(buf.Bytes()); err != nil {
		writeRaw(w, http.StatusInsufficientStorage, []byte(`{"error":"insufficient_storage","message":"write"}`+"\n"))
		return
	}
	// Same shape as eosink's WriteResponse; the counts are not computed
	// (that would be validation), the size is about the same.
	body := fmt.Appendf(nil, `{"stream":%q,"checkpoint":1,"records":0,"bytes":%d,"duplicate":false,"committed":false,"next_seq":0}`+"\n",
		r.PathValue("stream"), buf.Len())
	w.Header().Set("X-Eosink-Checkpoint", "1")
	writeRaw(w, http.StatusAccepted, body)
}

func (b *baseline) init(w http.ResponseWriter, r *http.Request) {
	writeRaw(w, http.StatusOK, fmt.Appendf(nil, `{"producer":%q,"epoch":1,"streams":{},"fenced":0}`+"\n", r.PathValue("producer")))
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// baselineServer is a running baseline, in this process.
type baselineServer struct {
	URL  string
	hs   *http.Server
	f    *os.File
	done chan error
}

// startBaseline serves the baseline on a free loopback port, appending to path.
func startBaseline(path string, pool bool) (*baselineServer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open baseline file: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The same server settings as eosink's.
	hs := &http.Server{
		Handler:           newBaselineHandler(f, pool),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      30*time.Second + time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	s := &baselineServer{URL: "http://" + ln.Addr().String(), hs: hs, f: f, done: make(chan error, 1)}
	go func() { s.done <- hs.Serve(ln) }()
	return s, nil
}

func (s *baselineServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.hs.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, s.f.Close())
}

// serveBaseline is the child-process mode: serve until SIGTERM, announcing
// the address on stdout as eosink does.
func serveBaseline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(baselineArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("file", "", "file to append bodies to")
	alloc := fs.String("alloc", "pool", "body buffers: pool or fresh")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("--file is required")
	}
	s, err := startBaseline(*path, *alloc != "fresh")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "baseline listening on %s\n", s.URL)
	select {
	case <-ctx.Done():
	case err := <-s.done:
		s.done <- err
	}
	return s.Close()
}
