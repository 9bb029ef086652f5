package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The load balancers of the load-balancer tests (lb_test.go), run as the
// test's children: nginx and HAProxy.

// envNginx and envHAProxy name the load balancers' binaries; default
// /usr/sbin/nginx and /usr/sbin/haproxy (scripts/nginx.sh and
// scripts/haproxy.sh install them), else on PATH.
const (
	envNginx   = "EOSINK_NGINX"
	envHAProxy = "EOSINK_HAPROXY"
)

// nginxBinary finds nginx, or ends the test: skip, or fail with CI=true.
func nginxBinary(t testing.TB) string {
	t.Helper()
	return findBinary(t, envNginx, "nginx", "scripts/nginx.sh")
}

// haproxyBinary finds haproxy, or ends the test: skip, or fail with CI=true.
func haproxyBinary(t testing.TB) string {
	t.Helper()
	return findBinary(t, envHAProxy, "haproxy", "scripts/haproxy.sh")
}

func findBinary(t testing.TB, env, name, script string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		return v
	}
	if _, err := os.Stat("/usr/sbin/" + name); err == nil {
		return "/usr/sbin/" + name
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found ($%s, /usr/sbin/%s, PATH): run %s (as root) to install it", name, env, name, script)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// deployConf reads deploy/<name> and puts the test's nodes and listen
// address in it: each of the three node addresses (eosink-<i>.eosink:8080)
// must occur exactly once and becomes nodes[i], and bind (such as
// "listen 80;") must occur exactly once and becomes bindTo. edit, if
// set, changes the result further (a variant that shows what goes wrong
// without a rule). A file that no longer has these fails the test: tests
// and docs run one configuration.
func deployConf(t testing.TB, name string, nodes []string, bind, bindTo string, edit func(string) string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	if len(nodes) != 3 {
		t.Fatalf("deploy/%s has 3 nodes; the test gave %d", name, len(nodes))
	}
	for i, addr := range nodes {
		old := fmt.Sprintf(" eosink-%d.eosink:8080", i)
		if n := strings.Count(conf, old); n != 1 {
			t.Fatalf("deploy/%s: %q occurs %d times, want once", name, old, n)
		}
		conf = strings.Replace(conf, old, " "+addr, 1)
	}
	if n := strings.Count(conf, bind); n != 1 {
		t.Fatalf("deploy/%s: %q occurs %d times, want once", name, bind, n)
	}
	conf = strings.Replace(conf, bind, bindTo, 1)
	if edit != nil {
		conf = edit(conf)
	}
	return conf
}

// deployNginxConf is deploy/nginx.conf for the test's nodes.
func deployNginxConf(t testing.TB, nodes []string, listen string, edit func(string) string) string {
	t.Helper()
	return deployConf(t, "nginx.conf", nodes, "listen 80;", "listen "+listen+";", edit)
}

// deployHAProxyConf is deploy/haproxy.cfg for the test's nodes.
func deployHAProxyConf(t testing.TB, nodes []string, listen string, edit func(string) string) string {
	t.Helper()
	return deployConf(t, "haproxy.cfg", nodes, "bind :80\n", "bind "+listen+"\n", edit)
}

// nginxProc is nginx run as the test's child: its own prefix, logs, pid
// file and temp paths in a directory of the test, `daemon off` and
// `master_process off` (one process: it runs as the test's user, so it can
// read the test's directories; no workers outlive a stop), listening on a
// free loopback port. Only its own PID is ever signalled.
type nginxProc struct {
	t         testing.TB
	Addr, URL string
	AccessLog string
	ErrorLog  string
	cmd       *exec.Cmd
	done      chan struct{}
	stopOnce  sync.Once
}

// startNginx runs nginx in dir with site, an http-context snippet such as
// deployNginxConf's, and waits until it accepts connections on addr.
func startNginx(t testing.TB, dir, addr, site string) *nginxProc {
	t.Helper()
	bin := nginxBinary(t)
	dir = filepath.Join(dir, "nginx")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	site = strings.TrimSpace(site)
	if err := os.WriteFile(filepath.Join(dir, "eosink.conf"), []byte(site+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &nginxProc{t: t, Addr: addr, URL: "http://" + addr,
		AccessLog: filepath.Join(dir, "logs", "access.log"), ErrorLog: filepath.Join(dir, "logs", "error.log")}
	main := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[2]s notice;
events { worker_connections 4096; }
http {
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
    include %[1]s/eosink.conf;
    access_log %[3]s eosink;
}
`, dir, n.ErrorLog, n.AccessLog)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", dir + "/", "-c", conf, "-e", n.ErrorLog}
	if out, err := exec.Command(bin, append([]string{"-t", "-q"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\nconfiguration:\n%s", err, out, site)
	}
	out, err := os.Create(filepath.Join(dir, "logs", "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = out, out
	// Should the test binary die, so does nginx.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start nginx: %v", err)
	}
	n.done = make(chan struct{})
	go func() {
		_ = n.cmd.Wait()
		_ = out.Close()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			t.Logf("nginx logs: %s, %s", n.ErrorLog, n.AccessLog)
		}
	})
	waitAccepting(t, "nginx", addr, n.cmd, n.done, "error log", n.ErrorLog)
	return n
}

// waitAccepting waits until the load balancer name, running as cmd until
// done closes, accepts connections on addr; it ends the test, with the log
// at logPath, if the process exits first, and after 10s.
func waitAccepting(t testing.TB, name, addr string, cmd *exec.Cmd, done <-chan struct{}, logName, logPath string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited at start (%s); %s:\n%s", name, cmd.ProcessState, logName, b)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept connections on %s after 10s", name, addr)
		}
	}
}

// Stop ends nginx with SIGTERM (SIGKILL after 10 s) and waits for it.
func (n *nginxProc) Stop() {
	n.stopOnce.Do(func() {
		// os.Process signals through a pidfd: never a reused PID.
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			n.t.Errorf("nginx: SIGTERM: %v", err)
		}
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
			n.t.Errorf("nginx did not stop within 10s of SIGTERM; killed")
		}
	})
}

// accessEntry is one line of the access log (log_format eosink of
// deploy/nginx.conf).
type accessEntry struct {
	Request, Route, Upstream string
	Status                   int
}

var accessRE = regexp.MustCompile(`"([^"]*)" (\d{3}) \d+ route="([^"]*)" upstream=(\S+)`)

// Access reads the access log.
func (n *nginxProc) Access() []accessEntry {
	n.t.Helper()
	f, err := os.Open(n.AccessLog)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	var out []accessEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		m := accessRE.FindStringSubmatch(sc.Text())
		if m == nil {
			n.t.Fatalf("access log line %q: not log_format eosink", sc.Text())
		}
		var status int
		fmt.Sscan(m[2], &status)
		out = append(out, accessEntry{Request: m[1], Status: status, Route: m[3], Upstream: m[4]})
	}
	if err := sc.Err(); err != nil {
		n.t.Fatal(err)
	}
	return out
}

// startHAProxy runs haproxy in the foreground (-db) in dir with cfg, such
// as deployHAProxyConf's, and waits until it accepts connections on addr.
// It stops at the test's end.
func startHAProxy(t testing.TB, dir, addr, cfg string) {
	t.Helper()
	bin := haproxyBinary(t)
	dir = filepath.Join(dir, "haproxy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\nconfiguration:\n%s", err, out, cfg)
	}
	logPath := filepath.Join(dir, "haproxy.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start haproxy: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	t.Cleanup(func() {
		// os.Process signals through a pidfd: never a reused PID.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("haproxy did not stop within 10s of SIGTERM; killed")
		}
		if t.Failed() {
			t.Logf("haproxy log: %s", logPath)
		}
	})
	waitAccepting(t, "haproxy", addr, cmd, done, "log", logPath)
}
