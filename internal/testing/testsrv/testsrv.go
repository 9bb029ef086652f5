// Package testsrv runs a real MinIO server for tests: one process on free
// loopback ports over a temp data directory, stopped by its PID.
//
// The server binary is found at $EOSINK_MINIO_BIN, else at
// $(go env GOPATH)/bin/minio (or $GOBIN/minio), else on $PATH. When it is
// missing, tests skip with a message naming scripts/minio.sh, which installs
// it; with CI=true they fail instead, so a CI run never passes by skipping.
//
// A server can be stopped and started again over the same data directory and
// ports, for outage tests. With Options.CertsDir it speaks HTTPS only.
package testsrv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// EnvBinary names the environment variable that overrides the binary's path.
const EnvBinary = "EOSINK_MINIO_BIN"

// InstallHint tells a developer how to get the binary.
const InstallHint = "run scripts/minio.sh to install the MinIO server"

// ErrNoBinary means the MinIO server binary was not found.
var ErrNoBinary = errors.New("minio server binary not found")

const (
	readyTimeout = 20 * time.Second
	stopTimeout  = 10 * time.Second
	accessKey    = "eosink-test"
	secretKey    = "eosink-test-secret"
)

// MinIO is one running (or stopped) MinIO server.
type MinIO struct {
	Endpoint  string // host:port of the S3 API
	Console   string // host:port of the console
	AccessKey string
	SecretKey string
	Bucket    string // a bucket created at Start, unique to this server
	Dir       string // data directory (the server's log is Dir/minio.log)

	bin  string
	opts Options

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Binary returns the path of the MinIO server binary, or ErrNoBinary.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%w: %s=%s is not an executable file", ErrNoBinary, EnvBinary, p)
	}
	var tried []string
	for _, dir := range goBinDirs() {
		p := filepath.Join(dir, "minio")
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("%w (looked at $%s, %s)", ErrNoBinary, EnvBinary, strings.Join(tried, ", "))
}

func goBinDirs() []string {
	var dirs []string
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
			dirs = append(dirs, strings.TrimSpace(lines[0]))
		}
		if len(lines) > 1 {
			for _, gp := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				if gp != "" {
					dirs = append(dirs, filepath.Join(gp, "bin"))
				}
			}
		}
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Options change how a server runs. The zero value is plain HTTP.
type Options struct {
	// CertsDir is MinIO's --certs-dir: public.crt and private.key (made by
	// the test, e.g. with internal/testcert) for 127.0.0.1. The server
	// then speaks HTTPS only, and Options and Client trust RootCAs.
	CertsDir string
	RootCAs  *x509.CertPool
}

// Start runs a new server with its data under dir (created if missing),
// waits until it is ready and creates Bucket. Stop it with Stop.
func Start(ctx context.Context, dir string) (*MinIO, error) {
	return StartWith(ctx, dir, Options{})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, dir string, o Options) (*MinIO, error) {
	if o.CertsDir != "" && o.RootCAs == nil {
		return nil, errors.New("start minio: Options.CertsDir needs RootCAs")
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	api, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	console, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	m := &MinIO{Endpoint: api, Console: console, AccessKey: accessKey, SecretKey: secretKey, Dir: dir, bin: bin, opts: o}
	if err := m.start(ctx); err != nil {
		return nil, err
	}
	if m.Bucket, err = m.NewBucket(ctx); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// StartMinIO starts a server for one test and stops it when the test ends.
// Without a binary the test skips (fails when CI=true).
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return StartMinIOWith(t, Options{})
}

// StartMinIOWith is StartMinIO with options.
func StartMinIOWith(t testing.TB, o Options) *MinIO {
	t.Helper()
	m, err := StartWith(context.Background(), t.TempDir(), o)
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("stop minio: %v", err)
		}
	})
	return m
}

// Unavailable ends a test that needs a server which could not be started:
// a skip when the binary is missing (a failure when CI=true), a failure
// otherwise.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoBinary) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: %s (CI=true, so this fails instead of skipping)", err, InstallHint)
		}
		t.Skipf("%v: %s", err, InstallHint)
	}
	t.Fatalf("start minio: %v", err)
}

func (m *MinIO) start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("start minio: already running as pid %d", m.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(m.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	args := []string{"server", "--quiet", "--address", m.Endpoint, "--console-address", m.Console}
	if m.opts.CertsDir != "" {
		args = append(args, "--certs-dir", m.opts.CertsDir)
	}
	cmd := exec.Command(m.bin, append(args, filepath.Join(m.Dir, "data"))...)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start minio %s: %w", m.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	m.cmd, m.exited = cmd, exited
	if err := m.waitReady(ctx, exited); err != nil {
		m.killLocked()
		return err
	}
	return nil
}

func (m *MinIO) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	url := m.scheme() + "://" + m.Endpoint + "/minio/health/ready"
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.opts.RootCAs}}}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for minio: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			// Ready can answer before the object layer takes requests.
			if resp.StatusCode == http.StatusOK && m.serving(ctx) {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("wait for minio: process exited early; log:\n%s", m.logTail())
		case <-ctx.Done():
			return fmt.Errorf("wait for minio on %s: not ready after %s; log:\n%s", m.Endpoint, readyTimeout, m.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serving reports whether the server answers an S3 request.
func (m *MinIO) serving(ctx context.Context) bool {
	c, err := m.Client()
	if err != nil {
		return false
	}
	_, err = c.ListBuckets(ctx)
	return err == nil
}

// Stop ends the server: SIGTERM to its PID, SIGKILL if it has not exited
// within a few seconds. Stopping a stopped server does nothing.
func (m *MinIO) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		m.killLocked()
		return nil
	}
	select {
	case <-m.exited:
		m.cmd, m.exited = nil, nil
		return nil
	case <-time.After(stopTimeout):
		m.killLocked()
		return fmt.Errorf("stop minio: no exit %s after SIGTERM; killed", stopTimeout)
	}
}

// Kill ends the server with SIGKILL, as a crash would.
func (m *MinIO) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killLocked()
}

func (m *MinIO) killLocked() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
	m.cmd, m.exited = nil, nil
}

// Restart starts a stopped server again on the same ports and data.
func (m *MinIO) Restart(ctx context.Context) error {
	return m.start(ctx)
}

// Options returns fresh client options for this server. MaxRetries is 1:
// tests want failures fast, not minio-go's retries.
func (m *MinIO) Options() *minio.Options {
	o := &minio.Options{
		Creds:      credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		Secure:     m.opts.CertsDir != "",
		Region:     "us-east-1",
		MaxRetries: 1,
	}
	if o.Secure {
		tr, _ := minio.DefaultTransport(true) // never fails
		tr.TLSClientConfig.RootCAs = m.opts.RootCAs
		o.Transport = tr
	}
	return o
}

func (m *MinIO) scheme() string {
	if m.opts.CertsDir != "" {
		return "https"
	}
	return "http"
}

// Client returns a new client for this server.
func (m *MinIO) Client() (*minio.Client, error) {
	c, err := minio.New(m.Endpoint, m.Options())
	if err != nil {
		return nil, fmt.Errorf("new minio client: %w", err)
	}
	return c, nil
}

// NewBucket creates a bucket with a unique name and returns the name.
func (m *MinIO) NewBucket(ctx context.Context) (string, error) {
	c, err := m.Client()
	if err != nil {
		return "", err
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new bucket: %w", err)
	}
	name := "eosink-test-" + hex.EncodeToString(b[:])
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return "", fmt.Errorf("make bucket %s: %w", name, err)
	}
	return name, nil
}

func (m *MinIO) logPath() string { return filepath.Join(m.Dir, "minio.log") }

func (m *MinIO) logTail() string {
	b, err := os.ReadFile(m.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freeAddr returns a loopback address with a port free at the time of asking.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find free port: %w", err)
	}
	return addr, nil
}

// Shared starts one server per test binary, on first use, and stops it
// after all tests ran. Declare one in a _test.go file and call Run from
// TestMain:
//
//	var shared testsrv.Shared
//
//	func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		srv := shared.Get(t) // skips (fails with CI=true) without a binary
//		...
//	}
type Shared struct {
	once sync.Once
	dir  string
	srv  *MinIO
	err  error
}

// Get returns the shared server, starting it on the first call. Without a
// server the test ends as Unavailable says.
func (s *Shared) Get(t testing.TB) *MinIO {
	t.Helper()
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "eosink-minio-")
		if s.err != nil {
			return
		}
		s.srv, s.err = Start(context.Background(), s.dir)
	})
	if s.err != nil {
		Unavailable(t, s.err)
	}
	return s.srv
}

// Run runs the tests, then stops the server if one was started and removes
// its data.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if s.srv != nil {
		if err := s.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testsrv:", err)
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	return code
}
