package tests

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eosink/eosink/internal/testing/testcert"
	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/minio/minio-go/v7"
)

// TestS3OverTLS runs MinIO with a certificate of the test's private CA and
// the binary with --s3-ca-file: a write and a checkpoint land the object,
// verify passes through the same CA, and without --s3-ca-file the service
// refuses to start, naming the flag (an untrusted certificate is a
// configuration error, not an outage to wait out).
func TestS3OverTLS(t *testing.T) {
	dir := workDir(t)
	ca := testcert.NewCA(t, "minio e2e CA")
	certs := filepath.Join(dir, "minio-certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca.Server(t, "minio").Write(t, filepath.Join(certs, "public.crt"), filepath.Join(certs, "private.key"))
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caFile)
	srv := testsrv.StartMinIOWith(t, testsrv.Options{CertsDir: certs, RootCAs: ca.Pool()})
	ctx := t.Context()
	env := s3Env(srv.AccessKey, srv.SecretKey)
	dest := "s3://" + srv.Bucket + "/tls"

	t.Run("untrusted", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, eosinkBin, "serve", "--listen", freeAddr(t), "--data-dir", filepath.Join(dir, "untrusted-data"),
			"--dest", dest, "--s3-endpoint", srv.Endpoint, "--node", "tls")
		cmd.Env = childEnv(env)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--s3-ca-file") || !strings.Contains(string(out), "certificate") {
			t.Fatalf("serve against an untrusted certificate: %v, want a refusal naming --s3-ca-file:\n%s", err, out)
		}
	})

	p := newProc(t, dir, procConfig{
		Args: []string{"--dest", dest, "--s3-endpoint", srv.Endpoint, "--s3-ca-file", caFile, "--s3-region", "us-east-1",
			"--node", "tls", "--checkpoint-interval", "0"},
		Env: env,
	})
	p.StartReady()
	body := []byte("{\"over\":\"tls\"}\n{\"n\":2}\n")
	postNDJSON(t, p, "secure", body)
	cp, err := p.Checkpoint(ctx)
	if err != nil || cp.State != "committed" || len(cp.Files) != 1 {
		t.Fatalf("checkpoint: %+v %v", cp, err)
	}
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, srv.Bucket, "tls/"+cp.Files[0].Path, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	_ = obj.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("object tls/%s: %q %v, want %q", cp.Files[0].Path, got, err, body)
	}
	b, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(b), `"msg":"s3 credentials","source":"environment"`) {
		t.Errorf("the log does not name the credential source:\n%s", p.logTail(20))
	}
	if strings.Contains(string(b), srv.SecretKey) {
		t.Errorf("the secret key is in the log")
	}
	if code := p.Term(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	requireVerify(t, env, "--dest", dest, "--s3-endpoint", srv.Endpoint, "--s3-ca-file", caFile)
}
