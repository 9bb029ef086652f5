package main

import (
	"bufio"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
)

// TestFlagDefaults: each serve flag's default is its package's Default
// const (stated once), and every default the command-line tables of
// docs/design.md (binding) and README.md state is the flag's.
func TestFlagDefaults(t *testing.T) {
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ got, want any }{
		"listen":                {f.listen, defaultListen},
		"data-dir":              {f.dataDir, defaultDataDir},
		"checkpoint-interval":   {f.interval, server.DefaultCheckpointInterval},
		"commit-linger":         {f.commitLinger, server.DefaultCommitLinger},
		"orphan-sweep-interval": {f.sweepInterval, server.DefaultSweepInterval},
		"producer-expiry":       {f.producerExpiry, server.DefaultProducerExpiry},
		"idempotency-window":    {f.idemWindow, server.DefaultIdempotencyWindow},
		"idempotency-max-keys":  {int(f.idemMaxKeys), server.DefaultMaxKeys},
		"lease-timeout":         {f.leaseTimeout, server.DefaultLeaseTimeout},
		"roll-size":             {int64(f.rollSize), int64(server.DefaultRollBytes)},
		"max-uncommitted":       {int64(f.maxUncommitted), int64(server.DefaultMaxUncommittedBytes)},
		"checkpoint-retention":  {int(f.retention), recovery.DefaultRetain},
		"max-body":              {int64(f.maxBody), int64(api.DefaultMaxBody)},
		"max-record":            {int64(f.maxRecord), int64(api.DefaultMaxRecord)},
		"max-inflight-body":     {int64(f.maxInflight), int64(api.DefaultMaxInflightBody)},
		"wait-timeout":          {f.waitTimeout, api.DefaultWaitTimeout},
		"body-timeout":          {f.bodyTimeout, api.DefaultBodyTimeout},
		"download-stall":        {f.downloadStall, api.DefaultDownloadStall},
		"shutdown-timeout":      {f.shutdownTimeout, defaultShutdownTimeout},
	} {
		if c.got != c.want {
			t.Errorf("--%s defaults to %v, want %v", name, c.got, c.want)
		}
	}
	if got := defaultHealthURL("", false); got != "http://"+defaultListen+"/healthz" {
		t.Errorf("healthcheck's default URL %s is not of serve's --listen default %s", got, defaultListen)
	}

	for _, doc := range []string{"../../docs/design.md", "../../README.md"} {
		rows := docDefaults(t, doc)
		if len(rows) < 8 {
			t.Fatalf("%s: %d flag defaults found; the table's form changed?", doc, len(rows))
		}
		for name, want := range rows {
			fl := fs.Lookup(name)
			if fl == nil {
				t.Errorf("%s: --%s is not a serve flag", doc, name)
				continue
			}
			// The documented value, set on a fresh flag set, must print as
			// the default does (64MiB and 67108864, 168h and 168h0m0s).
			other := serveFlagSet(&serveFlags{}, io.Discard)
			if err := other.Set(name, want); err != nil {
				t.Errorf("%s: --%s default %q: %v", doc, name, want, err)
				continue
			}
			if got := other.Lookup(name).Value.String(); got != fl.Value.String() {
				t.Errorf("%s: --%s default %q, the flag's is %s", doc, name, want, fl.Value.String())
			}
		}
	}
}

// docDefaults reads a markdown table of "| `--flag` | `default` | ... |"
// rows (a row may pair two flags and two defaults with " / ") and returns
// the defaults given as code; prose defaults ("host name",
// "file://<data-dir>/files") are skipped.
func docDefaults(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| (`--[a-z0-9-]+`(?: / `--[a-z0-9-]+`)*) \\| ([^|]*) \\|")
	code := regexp.MustCompile("^`([^`]*)`$")
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		names, defs := strings.Split(m[1], " / "), strings.Split(strings.TrimSpace(m[2]), " / ")
		if len(defs) != len(names) {
			continue
		}
		for i, n := range names {
			if d := code.FindStringSubmatch(defs[i]); d != nil && !strings.Contains(d[1], "<") {
				out[strings.Trim(n, "`-")] = d[1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDurationFlags: every duration flag has one meaning of zero, said in
// its help: off where off makes sense (check accepts 0), otherwise 0 is a
// usage error naming the flag.
func TestDurationFlags(t *testing.T) {
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, d := range f.durations() {
		rules[d.name] = d.off
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if g, ok := fl.Value.(flag.Getter); !ok {
			return
		} else if _, ok := g.Get().(time.Duration); !ok {
			return
		}
		off, ok := rules[fl.Name]
		if !ok {
			t.Errorf("--%s is a duration flag missing from serveFlags.durations", fl.Name)
			return
		}
		says := regexp.MustCompile(`\b0 (means|turns|keeps|leaves)\b`).MatchString(fl.Usage)
		if off != says {
			t.Errorf("--%s: 0 is off: %v, but its help %q says so: %v", fl.Name, off, fl.Usage, says)
		}
		if !off && !strings.Contains(fl.Usage, "above 0") && !strings.Contains(fl.Usage, "at least") {
			t.Errorf("--%s: its help %q does not say it must be above 0", fl.Name, fl.Usage)
		}
		var g serveFlags
		gs := serveFlagSet(&g, io.Discard)
		if err := envFlags(gs, []string{"--node", "n1", "--" + fl.Name, "0"}); err != nil {
			t.Fatal(err)
		}
		err := g.check()
		if off && err != nil {
			t.Errorf("--%s 0 (off): %v", fl.Name, err)
		}
		if !off && (err == nil || !strings.Contains(err.Error(), "--"+fl.Name+" 0")) {
			t.Errorf("--%s 0: %v, want a usage error naming it", fl.Name, err)
		}
	})
}

func TestMaxOpenFilesDefault(t *testing.T) {
	for soft, want := range map[uint64]int{
		1024:    448,   // half, less the reserve
		256:     64,    // a small limit: a quarter
		20000:   9936,  // half, less the reserve
		1 << 62: 65536, // unlimited: capped
		8:       2,
		2:       1,
	} {
		if got := maxOpenFilesFor(soft); got != want {
			t.Errorf("soft limit %d: %d, want %d", soft, got, want)
		}
	}
	var f serveFlags
	fs := serveFlagSet(&f, io.Discard)
	if err := envFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if f.maxOpenFiles < 1 {
		t.Fatalf("default --max-open-files %d", f.maxOpenFiles)
	}
	t.Setenv("EOSINK_MAX_OPEN_FILES", "7")
	if err := envFlags(serveFlagSet(&f, io.Discard), nil); err != nil || f.maxOpenFiles != 7 {
		t.Fatalf("--max-open-files from the environment: %d %v", f.maxOpenFiles, err)
	}
	if err := envFlags(serveFlagSet(&f, io.Discard), []string{"--max-open-files", "0"}); err == nil {
		t.Fatal("--max-open-files 0 accepted")
	}
}
