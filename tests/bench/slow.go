package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// slowResult is the outcome of --slow-senders: eosink's resident set while
// N connections each declare a large body and send a few bytes of it.
type slowResult struct {
	Senders     int            `json:"senders"`
	Declared    int64          `json:"declared_bytes"`
	Sent        int            `json:"sent_bytes"`
	RSSBefore   int64          `json:"rss_before"`
	RSSPeak     int64          `json:"rss_peak"`
	RSSEnd      int64          `json:"rss_end"`
	SmallWrite  int            `json:"small_write_status"` // a normal write sent meanwhile
	SmallMillis int64          `json:"small_write_ms"`
	Answers     map[string]int `json:"sender_answers"` // status (or "none") -> senders
}

// slowSenders starts eosink, samples its RSS, then opens cfg.slowSenders
// connections that each declare cfg.slowDeclare bytes of body and send
// cfg.slowSend (at least 8),
// and holds them for --duration while sampling RSS every 100 ms. Halfway it
// sends one small write, which must still be answered. Every sender reads
// its answer, if any, until the end.
func slowSenders(ctx context.Context, cfg *config, stdout io.Writer) (*slowResult, error) {
	t, err := startEosink(ctx, cfg, cfg.bin, cfg.workDir, "slow")
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = t.Stop(cfg.stopTimeout) }()
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Second) // let the fresh process settle
	m, err := readMem(t.PID)
	if err != nil {
		return nil, err
	}
	first := []byte("{\"a\":1}\n")
	if cfg.slowSend > len(first) {
		first = []byte("{\"a\":\"" + strings.Repeat("x", cfg.slowSend-9) + "\"}\n")
	}
	res := &slowResult{Senders: cfg.slowSenders, Declared: cfg.slowDeclare, Sent: len(first), RSSBefore: m.RSS, RSSPeak: m.RSS, Answers: map[string]int{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	end := time.Now().Add(cfg.duration)
	for i := range cfg.slowSenders {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			return nil, fmt.Errorf("sender %d: %w", i, err)
		}
		defer c.Close()
		_, err = fmt.Fprintf(c, "POST /v1/streams/slow/records HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s",
			u.Host, cfg.slowDeclare, first)
		if err != nil {
			return nil, fmt.Errorf("sender %d: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(end)
			key := "none"
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				key = fmt.Sprint(resp.StatusCode)
				_ = resp.Body.Close()
			}
			mu.Lock()
			res.Answers[key]++
			mu.Unlock()
		}()
	}
	small := time.Now().Add(cfg.duration / 2)
	for now := time.Now(); now.Before(end); now = time.Now() {
		if m, err := readMem(t.PID); err == nil && m.RSS > res.RSSPeak {
			res.RSSPeak = m.RSS
		}
		if res.SmallWrite == 0 && now.After(small) {
			start := time.Now()
			resp, err := plainClient().Post(t.URL+"/v1/streams/slow/records", "application/x-ndjson", strings.NewReader("{\"small\":1}\n"))
			res.SmallWrite = -1
			if err == nil {
				res.SmallWrite = resp.StatusCode
				_ = resp.Body.Close()
			}
			res.SmallMillis = time.Since(start).Milliseconds()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	wg.Wait()
	if m, err := readMem(t.PID); err == nil {
		res.RSSEnd = m.RSS
	}
	keys := slices.Sorted(maps.Keys(res.Answers))
	var answers []string
	for _, k := range keys {
		answers = append(answers, fmt.Sprintf("%s × %d", k, res.Answers[k]))
	}
	fmt.Fprintf(stdout, "slow senders: %d × (declare %d MiB, send %d B) for %s\n", res.Senders, res.Declared>>20, res.Sent, cfg.duration)
	fmt.Fprintf(stdout, "  RSS before %.1f MiB, peak %.1f MiB (+%.1f MiB), at the end %.1f MiB\n",
		mib(res.RSSBefore), mib(res.RSSPeak), mib(res.RSSPeak-res.RSSBefore), mib(res.RSSEnd))
	fmt.Fprintf(stdout, "  small write meanwhile: %d in %d ms; senders' answers: %s\n", res.SmallWrite, res.SmallMillis, strings.Join(answers, ", "))
	return res, nil
}
