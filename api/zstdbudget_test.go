package api

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestSlowZstdBodiesHoldLittle: a zstd body that has sent nothing yet holds
// no decoder window against the in-flight budget, and those that sent a
// frame header hold at most half of it: a plain write of a whole body
// still fits. (Each held 8 MiB from its headers on: 32 connections
// declaring zstd and sending nothing held the default 256 MiB, and every
// other write was 429 for up to the body timeout — issue 22 item 8 again,
// by Content-Encoding.)
func TestSlowZstdBodiesHoldLittle(t *testing.T) {
	const senders = 8
	budget := int64(4 * zstdMaxWindow)
	r := newRig(t, rigOpts{api: func(c *Config) { c.MaxBody, c.MaxInflightBody = 1<<20, budget }})
	ts := httptest.NewServer(r.srv)
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	send := func(first []byte) {
		for range senders {
			slowSender(t, addr, 1<<20, string(first), "Content-Encoding", "zstd")
		}
		time.Sleep(300 * time.Millisecond) // the senders' handlers wait for their bodies
	}
	send(nil)
	if n, most := r.srv.inflight.inUse(), int64(senders*bodyFirst); n > most {
		t.Errorf("%d zstd senders of nothing hold %d bytes of the budget, want at most %d", senders, n, most)
	}
	big := strings.Repeat(`{"pad":"`+strings.Repeat("x", 1014)+`"}`+"\n", 900)
	postAccepted(t, ts, big, "a 900 KiB write beside zstd senders of nothing")

	// Senders of a frame header (an 8 MiB window, the most there is).
	var frame bytes.Buffer
	zw, err := zstd.NewWriter(&frame, zstd.WithWindowSize(zstdMaxWindow), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write([]byte(big))
	_ = zw.Close()
	send(frame.Bytes()[:64])
	if n, most := r.srv.inflight.inUse(), budget/2+int64(4*senders*bodyFirst); n > most {
		t.Errorf("zstd senders of a frame header hold %d bytes of the budget, want at most %d", n, most)
	}
	postAccepted(t, ts, big, "a 900 KiB write beside zstd senders of a frame header")
}
