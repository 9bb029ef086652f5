package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// envPromtool overrides where promtool is; the default is the one on $PATH,
// where scripts/promtool.sh puts Debian's.
const envPromtool = "EOSINK_PROMTOOL"

// promtool returns promtool's path. Without it the test is skipped, or
// fails when CI=true: CI must lint the metrics.
func promtool(t testing.TB) string {
	t.Helper()
	p := os.Getenv(envPromtool)
	var err error
	if p == "" {
		p, err = exec.LookPath("promtool")
	} else {
		_, err = os.Stat(p)
	}
	if err != nil {
		msg := fmt.Sprintf("promtool not found (set %s, or run scripts/promtool.sh to install it): %v", envPromtool, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// scrape returns the text of /metrics.
func (p *proc) scrape(ctx context.Context) string {
	p.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/metrics", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		p.t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// wantLines fails the test for every line of want that text (what) lacks.
func wantLines(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w+"\n") {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// TestMetrics scrapes the binary's /metrics after writes (one refused), a
// checkpoint, a file download, a UI page and a 404, checks the series users
// expect — HTTP requests by route pattern (never the raw path), code and
// duration; build info; every checkpoint state and rejection reason present
// from 0 — and pipes the scrape through `promtool check metrics`.
func TestMetrics(t *testing.T) {
	tool := promtool(t)
	dir := workDir(t)
	p := newProc(t, dir, procConfig{Args: []string{"--dest", "file://" + filepath.Join(dir, "dest"), "--node", "metrics", "--checkpoint-interval", "0"}})
	p.StartReady()
	ctx := t.Context()

	// Before any traffic: every state and reason is there, at 0.
	wantLines(t, "/metrics before any write", p.scrape(ctx),
		`eosink_checkpoints_total{state="committed"} 0`,
		`eosink_checkpoints_total{state="aborted"} 0`,
		`eosink_batches_rejected_total{reason="unknown_producer"} 0`,
		`eosink_batches_rejected_total{reason="producer_fenced"} 0`,
		`eosink_batches_rejected_total{reason="out_of_order_sequence"} 0`,
		`eosink_batches_rejected_total{reason="backpressure"} 0`,
	)

	// status sends a request and returns its answer's status.
	status := func(method, path string, body io.Reader, hdr ...string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, p.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := p.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	post := func(stream, body string, hdr ...string) int {
		t.Helper()
		return status(http.MethodPost, "/v1/streams/"+stream+"/records", strings.NewReader(body),
			append([]string{"Content-Type", "application/x-ndjson"}, hdr...)...)
	}
	get := func(path string) int {
		t.Helper()
		return status(http.MethodGet, path, nil)
	}
	for i := range 3 {
		if st := post(fmt.Sprintf("s%d", i), "{\"n\":1}\n{\"n\":2}\n"); st != http.StatusAccepted {
			t.Fatalf("write %d: %d", i, st)
		}
	}
	if st := post("s0", "{}\n", "Producer-Id", "nobody", "Producer-Epoch", "0", "Producer-Seq", "0"); st != http.StatusConflict {
		t.Fatalf("write of an unknown producer: %d, want 409", st)
	}
	ck, err := p.Checkpoint(ctx)
	if err != nil || ck.State != "committed" || len(ck.Files) != 3 {
		t.Fatalf("checkpoint: %+v %v", ck, err)
	}
	if st := get("/v1/files/" + ck.Files[0].Path); st != http.StatusOK {
		t.Fatalf("download: %d", st)
	}
	if st := get("/ui/files/" + ck.Files[0].Path); st != http.StatusOK {
		t.Fatalf("UI file page: %d", st)
	}
	if st := get("/no/such/path/" + ck.Files[1].Path); st != http.StatusNotFound {
		t.Fatalf("unknown path: %d", st)
	}

	text := p.scrape(ctx)
	wantLines(t, "/metrics", text,
		`eosink_http_requests_total{code="202",method="POST",route="/v1/streams/{stream}/records"} 3`,
		`eosink_http_requests_total{code="409",method="POST",route="/v1/streams/{stream}/records"} 1`,
		`eosink_http_requests_total{code="200",method="POST",route="/v1/checkpoints"} 1`,
		`eosink_http_requests_total{code="200",method="GET",route="/v1/files/*"} 1`,
		`eosink_http_requests_total{code="200",method="GET",route="/ui/*"} 1`,
		`eosink_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`eosink_http_request_duration_seconds_count{code="202",method="POST",route="/v1/streams/{stream}/records"} 3`,
		`eosink_checkpoints_total{state="committed"} 1`,
		`eosink_checkpoints_total{state="aborted"} 0`,
		`eosink_batches_rejected_total{reason="unknown_producer"} 1`,
		`eosink_batches_rejected_total{reason="producer_fenced"} 0`,
	)
	// Bounded labels: no stream name, file name or unknown path as a route.
	for _, raw := range []string{`route="/v1/streams/s0`, ck.Files[0].Path, "/no/such/path"} {
		if strings.Contains(text, raw) {
			t.Errorf("/metrics holds a raw path %q", raw)
		}
	}
	if m := regexp.MustCompile(`(?m)^eosink_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).FindString(text); m == "" {
		t.Errorf("/metrics lacks eosink_build_info with goversion, revision and version")
	} else {
		t.Log(m)
	}

	// promtool reads the exposition from stdin and says what it dislikes.
	cmd := exec.CommandContext(ctx, tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}
