package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// target is a server under load: eosink or the baseline, as a child
// process (pid > 0) or in this process (pid == 0).
type target struct {
	Kind    string // "eosink" or "baseline"
	URL     string
	Dest    string // eosink: the destination directory
	PID     int
	LogPath string
	Data    string // eosink: the data directory
	// DestBytes and DestFiles: the committed data files (manifests not
	// counted) once the process stopped, before its data dir is removed.
	DestBytes int64
	DestFiles int
	stop      func(timeout time.Duration) (time.Duration, error)
	// sigkill, when set, kills the process by pid with SIGKILL and waits
	// for it to exit, leaving its data dir in place.
	sigkill func()
}

// Kill9 ends the target with SIGKILL (no graceful stop) and keeps its data
// directory, so a restart on it measures recovery after a crash.
func (t *target) Kill9() {
	if t.sigkill == nil {
		return
	}
	t.sigkill()
	t.stop, t.sigkill = nil, nil
}

// Stop ends the target: SIGTERM to its pid, SIGKILL after timeout. It
// returns how long the process took to exit.
func (t *target) Stop(timeout time.Duration) (time.Duration, error) {
	if t.stop == nil {
		return 0, nil
	}
	stop := t.stop
	t.stop = nil
	return stop(timeout)
}

// child is a started process and what it said on stdout.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed after Wait returned
	err    error         // Wait's result, once exited is closed
}

// childEnv is the environment minus EOSINK_* variables, so that a setting
// of the caller's shell cannot change the service's flags behind the
// harness's back.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EOSINK_") {
			env = append(env, kv)
		}
	}
	return env
}

// startChild runs bin with args, stderr to logPath, and waits (up to 30s)
// for a stdout line "... listening on http://ADDR", whose ADDR must be a
// loopback address.
func startChild(ctx context.Context, bin string, args []string, logPath string) (*child, string, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv()
	cmd.Stderr = logf
	// Its own process group, so a Ctrl-C at the terminal reaches only the
	// harness, which then stops the child by pid; and killed if the
	// harness dies without doing so.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if _, u, ok := strings.Cut(line, " listening on "); ok && !sent {
				addr <- strings.TrimSpace(u)
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, out)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case u := <-addr:
		pu, err := url.Parse(u)
		if err != nil || !isLoopbackHost(pu.Host) {
			c.kill(5 * time.Second)
			return nil, "", fmt.Errorf("%s announced %q, not a loopback URL", bin, u)
		}
		return c, u, nil
	case <-c.exited:
		return nil, "", fmt.Errorf("%s exited before listening: %v (log: %s)", bin, c.err, logPath)
	case <-timer.C:
		c.kill(5 * time.Second)
		return nil, "", fmt.Errorf("%s did not announce its address in 30s (log: %s)", bin, logPath)
	case <-ctx.Done():
		c.kill(5 * time.Second)
		return nil, "", ctx.Err()
	}
}

// kill sends SIGTERM to the child's pid and SIGKILL if it has not exited
// after timeout.
func (c *child) kill(timeout time.Duration) (time.Duration, error) {
	begin := time.Now()
	select {
	case <-c.exited:
		return 0, fmt.Errorf("exited early: %v", c.err)
	default:
	}
	_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.exited:
		return time.Since(begin), c.err
	case <-t.C:
		_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
		return time.Since(begin), fmt.Errorf("did not stop %s after SIGTERM; killed", timeout)
	}
}

func isLoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// waitReady polls GET /readyz until it answers 200.
func waitReady(ctx context.Context, hc *http.Client, base string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/readyz not ready after %s", base, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("exited while waiting for /readyz")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startEosink starts the service on a fresh data dir under dir.
func startEosink(ctx context.Context, cfg *config, bin, dir, label string) (*target, error) {
	return startEosinkAt(ctx, cfg, bin, dir, filepath.Join(dir, "data-"+label), label, cfg.checkpointInterval)
}

// startEosinkAt starts the service on the data dir data, which may hold
// the state of an earlier process, and waits for /readyz.
func startEosinkAt(ctx context.Context, cfg *config, bin, dir, data, label string, interval time.Duration) (*target, error) {
	args := []string{"serve",
		"--listen", "127.0.0.1:0",
		"--data-dir", data,
		"--checkpoint-interval", interval.String(),
		"--node", "bench",
		"--log-format", "json",
		"--log-level", "warn",
	}
	args = append(args, cfg.eosinkFlags...)
	logPath := filepath.Join(dir, "eosink-"+label+".log")
	c, u, err := startChild(ctx, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	t := &target{Kind: "eosink", URL: u, PID: c.cmd.Process.Pid, LogPath: logPath, Dest: filepath.Join(data, "files"), Data: data}
	t.sigkill = func() {
		_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
	t.stop = func(timeout time.Duration) (time.Duration, error) {
		d, err := c.kill(timeout)
		t.DestBytes, t.DestFiles = dataFiles(t.Dest)
		if !cfg.keep {
			_ = os.RemoveAll(data)
		}
		return d, err
	}
	if err := waitReady(ctx, plainClient(), u, c.exited, 60*time.Second); err != nil {
		_, _ = t.Stop(cfg.stopTimeout)
		return nil, fmt.Errorf("eosink: %w (log: %s)", err, logPath)
	}
	return t, nil
}

// startBaselineTarget starts the baseline as a child process (this same
// program re-executed) or, with --baseline inproc, in this process.
func startBaselineTarget(ctx context.Context, cfg *config, dir, label string) (*target, error) {
	path := filepath.Join(dir, "baseline-"+label+".out")
	remove := func() {
		if !cfg.keep {
			_ = os.Remove(path)
		}
	}
	if cfg.baselineMode == "inproc" {
		s, err := startBaseline(path, cfg.baselineAlloc == "pool")
		if err != nil {
			return nil, err
		}
		return &target{Kind: "baseline", URL: s.URL, PID: 0, stop: func(time.Duration) (time.Duration, error) {
			begin := time.Now()
			err := s.Close()
			remove()
			return time.Since(begin), err
		}}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable for the baseline: %w", err)
	}
	logPath := filepath.Join(dir, "baseline-"+label+".log")
	c, u, err := startChild(ctx, self, []string{baselineArg, "--file", path, "--alloc", cfg.baselineAlloc}, logPath)
	if err != nil {
		return nil, err
	}
	t := &target{Kind: "baseline", URL: u, PID: c.cmd.Process.Pid, LogPath: logPath}
	t.stop = func(timeout time.Duration) (time.Duration, error) {
		d, err := c.kill(timeout)
		remove()
		return d, err
	}
	if err := waitReady(ctx, plainClient(), u, c.exited, 30*time.Second); err != nil {
		_, _ = t.Stop(cfg.stopTimeout)
		return nil, fmt.Errorf("baseline: %w (log: %s)", err, logPath)
	}
	return t, nil
}

// dataFiles sums the committed data files under dest (not _manifests/ or
// _nodes/).
func dataFiles(dest string) (bytes int64, files int) {
	_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), "_") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
				files++
			}
		}
		return nil
	})
	return bytes, files
}
