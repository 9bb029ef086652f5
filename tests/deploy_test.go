package tests

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// repoRoot is the module's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestStaticBuild runs scripts/build-static.sh (the Dockerfile's build
// step): the binary has no dynamic loader and no shared libraries, its
// version names the module version, the work tree's revision and the Go
// version, and `eosink healthcheck` with the service's own environment (as
// the image's HEALTHCHECK runs it) passes while it serves and fails after.
func TestStaticBuild(t *testing.T) {
	root := repoRoot(t)
	dir := workDir(t)
	bin := filepath.Join(dir, "eosink-static")
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-static.sh"), bin)
	cmd.Env = childEnv(nil)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-static.sh: %v\n%s", err, out)
	}
	report(t, "scripts/build-static.sh built in %s", time.Since(start).Round(100*time.Millisecond))

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader (PT_INTERP)")
		}
	}
	_ = f.Close()
	if len(libs) != 0 {
		t.Errorf("the binary needs shared libraries: %v", libs)
	}

	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("eosink version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	gover, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	wantRev := "revision unknown"
	if rev, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		wantRev = "revision " + strings.TrimSpace(string(rev))
	}
	if !strings.HasPrefix(version, "eosink ") || !strings.Contains(version, wantRev) || !strings.Contains(version, strings.TrimSpace(string(gover))) {
		t.Errorf("eosink version = %q; want the module version, %q and %s", version, wantRev, gover)
	}
	t.Logf("%s", version)

	addr := freeAddr(t)
	env := childEnv([]string{"EOSINK_LISTEN=" + addr, "EOSINK_DATA_DIR=" + filepath.Join(dir, "data"), "EOSINK_CHECKPOINT_INTERVAL=0"})
	health := func() (int, string) {
		c := exec.Command(bin, "healthcheck", "--timeout", "2s")
		c.Env = env
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := health(); code != 1 {
		t.Fatalf("healthcheck with nothing serving: exit %d, want 1\n%s", code, out)
	}
	svc := exec.Command(bin, "serve")
	svc.Env = env
	var logs bytes.Buffer
	svc.Stdout, svc.Stderr = &logs, &logs
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- svc.Wait() }()
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = svc.Process.Kill()
			<-exited
		}
	})
	var code int
	var said string
	eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { code, said = health(); return code == 0 },
		func() string { return fmt.Sprintf("healthcheck never passed: exit %d %s", code, said) })
	if err := svc.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	waited = true
	if err != nil {
		t.Fatalf("static binary after SIGINT: %v\n%s", err, logs.String())
	}
	if code, out := health(); code != 1 {
		t.Fatalf("healthcheck after stop: exit %d, want 1\n%s", code, out)
	}
}

// TestDockerfile holds the Dockerfile to what can be checked without a
// container runtime: it builds with scripts/build-static.sh (the script
// TestStaticBuild runs), ships a minimal static base as a non-root user,
// keeps /data on a volume and checks health with the binary itself.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms, runs []string
	var user, volume, health, entry string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			user = rest
		case "VOLUME":
			volume = rest
		case "HEALTHCHECK":
			health = rest
		case "ENTRYPOINT":
			entry = rest
		}
	}
	builds := 0
	for _, r := range runs {
		if regexp.MustCompile(`(^|\s)scripts/build-static\.sh(\s|$)`).MatchString(r) {
			builds++
		}
		if strings.Contains(r, "go build") {
			t.Errorf("RUN %s: the Dockerfile builds with scripts/build-static.sh only", r)
		}
	}
	if builds != 1 {
		t.Errorf("want exactly one RUN of scripts/build-static.sh, found %d in %q", builds, runs)
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, FROM lines: %q", froms)
	}
	final := froms[len(froms)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && !strings.HasPrefix(final, "scratch") {
		t.Errorf("final stage FROM %s: want distroless static or scratch", final)
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if !strings.Contains(volume, "/data") {
		t.Errorf("VOLUME %q: want /data", volume)
	}
	if !strings.Contains(health, `"/eosink", "healthcheck"`) {
		t.Errorf("HEALTHCHECK %q: want the binary's healthcheck", health)
	}
	if !strings.Contains(entry, "/eosink") {
		t.Errorf("ENTRYPOINT %q", entry)
	}
}

// TestSystemdUnit checks deploy/eosink.service: the sandboxing and restart
// settings, a stop timeout above the shutdown timeout it sets, and (where
// systemd-analyze exists) that systemd parses it without a complaint.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "eosink.service"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("unit line %q: not key=value", line)
			continue
		}
		keys[k] = append(keys[k], v)
	}
	one := func(k string) string {
		if len(keys[k]) == 0 {
			return ""
		}
		return keys[k][len(keys[k])-1]
	}
	for k, want := range map[string]string{"StateDirectory": "eosink", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
		"Restart": "on-failure", "KillSignal": "SIGTERM", "DynamicUser": "yes"} {
		if got := one(k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if !strings.HasSuffix(strings.Fields(one("ExecStart"))[0], "/eosink") {
		t.Errorf("ExecStart=%s", one("ExecStart"))
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", one("TimeoutStopSec"), err)
	}
	shutdown := 30 * time.Second // serve's default
	for _, e := range keys["Environment"] {
		if v, ok := strings.CutPrefix(e, "EOSINK_SHUTDOWN_TIMEOUT="); ok {
			if shutdown, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if stop <= shutdown+5*time.Second {
		t.Errorf("TimeoutStopSec %s: want it well above the shutdown timeout %s, or systemd kills the final checkpoint", stop, shutdown)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found (apt package systemd): the unit's syntax is not checked")
	}
	// verify checks that ExecStart exists: point it at a built binary.
	dir := t.TempDir()
	patched := strings.ReplaceAll(string(unit), "ExecStart=/usr/local/bin/eosink", "ExecStart="+eosinkBin)
	path := filepath.Join(dir, "eosink.service")
	if err := os.WriteFile(path, []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify exits 0 on unknown keys and bad values; any output is a complaint.
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, err := exec.Command(analyze, "security", "--offline=true", path).CombinedOutput(); err == nil {
		if m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out); m != nil {
			report(t, "systemd-analyze security: exposure %s %s", m[1], m[2])
		}
	}
}
