package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/testsrv"
	"github.com/spf13/afero"
)

var shared testsrv.Shared

func TestMain(m *testing.M) {
	// No test of this package may reach the real EC2 metadata service
	// (169.254.169.254): a test that wants the IAM provider points it at
	// a fake on loopback.
	os.Setenv(envIMDSDisabled, "true")
	os.Exit(shared.Run(m))
}

// awsEnv clears every AWS_* variable the credential chain reads, gives the
// test an empty HOME (no ~/.aws of the developer's) and disables the EC2
// metadata service; then sets kv.
func awsEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_PROFILE", "AWS_REGION", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", envIMDSEndpoint} {
		t.Setenv(k, "")
	}
	t.Setenv(envIMDSDisabled, "true")
	t.Setenv("HOME", t.TempDir())
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// fakeMetadata is an EC2 instance metadata service (IMDSv2) and an ECS
// credentials endpoint on loopback, handing out the given keys.
type fakeMetadata struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newFakeMetadata(t *testing.T, access, secret string) *fakeMetadata {
	t.Helper()
	f := &fakeMetadata{hits: map[string]int{}}
	creds := func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(map[string]any{"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": access,
			"SecretAccessKey": secret, "Token": "", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	}
	const tok = "imds-session-token"
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.Method+" "+r.URL.Path]++
		f.mu.Unlock()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			io.WriteString(w, tok)
		case r.Header.Get("X-aws-ec2-metadata-token") != tok && strings.HasPrefix(r.URL.Path, "/latest/"):
			http.Error(w, "no IMDSv2 token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			io.WriteString(w, "eosink-role\n")
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/eosink-role", r.URL.Path == "/ecs/creds":
			creds(w)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeMetadata) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *fakeMetadata) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, v := range f.hits {
		n += v
	}
	return n
}

// TestS3CredentialChain opens an s3:// destination on MinIO with
// credentials from each source of the chain, and checks which one the
// log names. No test reaches anything off this machine: the IAM provider
// talks to a fake on 127.0.0.1, or is disabled.
func TestS3CredentialChain(t *testing.T) {
	srv := shared.Get(t)
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, md *fakeMetadata)
		source string // "" means refused
		imds   bool   // the fake EC2 metadata service was asked
	}{
		{"environment", func(t *testing.T, _ *fakeMetadata) {
			awsEnv(t, "AWS_ACCESS_KEY_ID", srv.AccessKey, "AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		}, "environment", false},
		{"environment before the file", func(t *testing.T, _ *fakeMetadata) {
			awsEnv(t, "AWS_ACCESS_KEY_ID", srv.AccessKey, "AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			writeCreds(t, filepath.Join(os.Getenv("HOME"), ".aws", "credentials"), "default", "wrong", "wrong-secret")
		}, "environment", false},
		{"shared file in HOME with AWS_PROFILE", func(t *testing.T, _ *fakeMetadata) {
			awsEnv(t, "AWS_PROFILE", "eosink")
			home := os.Getenv("HOME")
			writeCreds(t, filepath.Join(home, ".aws", "credentials"), "default", "wrong", "wrong-secret")
			writeCreds(t, filepath.Join(home, ".aws", "credentials"), "eosink", srv.AccessKey, srv.SecretKey)
		}, "shared credentials file", false},
		{"AWS_SHARED_CREDENTIALS_FILE", func(t *testing.T, _ *fakeMetadata) {
			p := filepath.Join(t.TempDir(), "creds")
			writeCreds(t, p, "default", srv.AccessKey, srv.SecretKey)
			awsEnv(t, "AWS_SHARED_CREDENTIALS_FILE", p)
		}, "shared credentials file", false},
		{"EC2 instance profile (fake IMDS)", func(t *testing.T, md *fakeMetadata) {
			awsEnv(t, envIMDSDisabled, "", envIMDSEndpoint, md.URL)
		}, "iam", true},
		{"ECS task role (fake endpoint)", func(t *testing.T, md *fakeMetadata) {
			awsEnv(t, "AWS_CONTAINER_CREDENTIALS_FULL_URI", md.URL+"/ecs/creds")
		}, "iam", false},
		{"nothing, metadata disabled", func(t *testing.T, md *fakeMetadata) {
			awsEnv(t, envIMDSEndpoint, md.URL) // even pointed at the fake, never asked
		}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := newFakeMetadata(t, srv.AccessKey, srv.SecretKey)
			tc.setup(t, md)
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			df := destFlags{dest: "s3://" + srv.Bucket + "/creds", endpoint: srv.Endpoint, insecure: true}
			dest, _, err := openDest(t.Context(), df, afero.NewMemMapFs(), "", "creds", log)
			if tc.source == "" {
				if err == nil || !strings.Contains(err.Error(), "check bucket") {
					t.Fatalf("open without credentials: %v, want refused", err)
				}
				if !strings.Contains(logs.String(), "s3 credentials: none found") {
					t.Errorf("log does not say no credentials were found:\n%s", logs.String())
				}
			} else {
				if err != nil {
					t.Fatalf("open: %v\nlog:\n%s", err, logs.String())
				}
				if _, err := dest.List(t.Context(), ""); err != nil {
					t.Fatalf("list with %s credentials: %v", tc.source, err)
				}
				if want := `msg="s3 credentials" source="` + tc.source + `"`; !strings.Contains(logs.String(), want) &&
					!strings.Contains(logs.String(), `msg="s3 credentials" source=`+tc.source+` `) {
					t.Errorf("log does not name source %q:\n%s", tc.source, logs.String())
				}
			}
			if strings.Contains(logs.String(), srv.SecretKey) {
				t.Errorf("the secret key is in the log:\n%s", logs.String())
			}
			if got := md.count("GET /latest/meta-data/iam/security-credentials/eosink-role") > 0; got != tc.imds {
				t.Errorf("fake IMDS asked for the role's keys: %v, want %v (hits %v)", got, tc.imds, md.hits)
			}
			if tc.source == "" && md.total() != 0 {
				t.Errorf("metadata disabled, yet the fake was asked: %v", md.hits)
			}
		})
	}
}

func writeCreds(t *testing.T, path, profile, access, secret string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("[" + profile + "]\naws_access_key_id = " + access + "\naws_secret_access_key = " + secret + "\n\n"); err != nil {
		t.Fatal(err)
	}
}

// TestS3ClientConfig checks the endpoint, region, addressing and CA flags
// against a fake S3 on loopback that records what it is sent. Nothing
// contacts AWS: the client for the AWS default is only inspected.
func TestS3ClientConfig(t *testing.T) {
	awsEnv(t, "AWS_ACCESS_KEY_ID", "AKIDTEST", "AWS_SECRET_ACCESS_KEY", "secret-test")
	log := slog.New(slog.DiscardHandler)

	cl, endpoint, err := newS3Client(destFlags{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if u := cl.EndpointURL(); endpoint != "s3.amazonaws.com" || u.Host != "s3.amazonaws.com" || u.Scheme != "https" {
		t.Fatalf("empty --s3-endpoint: %s (%s), want https://s3.amazonaws.com", u, endpoint)
	}

	type seen struct{ host, path, query, scope string }
	var mu sync.Mutex
	var reqs []seen
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scope := ""
		if i := strings.Index(auth, "Credential="); i >= 0 {
			scope = strings.SplitN(auth[i+len("Credential="):], ",", 2)[0]
		}
		mu.Lock()
		reqs = append(reqs, seen{r.Host, r.URL.Path, r.URL.RawQuery, scope})
		mu.Unlock()
		if _, ok := r.URL.Query()["location"]; ok {
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">eu-west-3</LocationConstraint>`)
		}
	}))
	t.Cleanup(fake.Close)
	host := strings.TrimPrefix(fake.URL, "http://")
	for _, tc := range []struct {
		name      string
		df        destFlags
		env       string // AWS_REGION
		wantScope string // the region in the signature's scope
		location  bool   // the bucket's location was asked
		wantPath  string
	}{
		{"--s3-region", destFlags{region: "us-west-2", lookup: "path"}, "", "/us-west-2/s3/", false, "/bkt/"},
		{"--s3-region wins over AWS_REGION", destFlags{region: "us-west-2", lookup: "path"}, "ap-south-1", "/us-west-2/s3/", false, "/bkt/"},
		{"AWS_REGION", destFlags{lookup: "path"}, "ap-south-1", "/ap-south-1/s3/", false, "/bkt/"},
		{"the bucket's location", destFlags{lookup: "path"}, "", "/eu-west-3/s3/", true, "/bkt/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AWS_REGION", tc.env)
			mu.Lock()
			reqs = nil
			mu.Unlock()
			tc.df.endpoint, tc.df.insecure = host, true
			cl, _, err := newS3Client(tc.df, log)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.BucketExists(t.Context(), "bkt"); err != nil {
				t.Fatalf("bucket exists: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			last := reqs[len(reqs)-1]
			if !strings.Contains(last.scope, tc.wantScope) || last.path != tc.wantPath {
				t.Errorf("request %+v: want scope with %q and path %q", last, tc.wantScope, tc.wantPath)
			}
			asked := false
			for _, r := range reqs {
				asked = asked || strings.Contains(r.query, "location")
			}
			if asked != tc.location {
				t.Errorf("bucket location asked: %v, want %v (%+v)", asked, tc.location, reqs)
			}
		})
	}

	for _, tc := range []struct {
		name string
		df   destFlags
		want string
	}{
		{"bad lookup", destFlags{lookup: "virtual"}, "--s3-lookup"},
		{"missing CA file", destFlags{caFile: filepath.Join(t.TempDir(), "none.pem")}, "read --s3-ca-file"},
		{"CA file without PEM", destFlags{caFile: writeFile(t, "garbage")}, "no PEM certificate"},
		{"CA file with --s3-insecure", destFlags{caFile: writeFile(t, "x"), insecure: true}, "--s3-insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := newS3Client(tc.df, log); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newS3Client(%+v): %v, want %q", tc.df, err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
