package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// awsEndpoint is the S3 endpoint when --s3-endpoint is empty; minio-go
// sends each request to the bucket's regional endpoint.
const awsEndpoint = "s3.amazonaws.com"

// Environment of the AWS SDKs that eosink honours beyond what minio-go's
// providers read themselves. AWS_EC2_METADATA_SERVICE_ENDPOINT is how the
// tests point the EC2 provider at a fake on loopback.
const (
	envIMDSDisabled = "AWS_EC2_METADATA_DISABLED"
	envIMDSEndpoint = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
)

// addS3Flags registers the S3 client flags beyond --s3-endpoint and
// --s3-insecure, for serve and verify alike.
func addS3Flags(fs *flag.FlagSet, df *destFlags) {
	fs.StringVar(&df.region, "s3-region", "", "S3 region; default AWS_REGION, else the bucket's location (needs s3:GetBucketLocation)")
	fs.StringVar(&df.caFile, "s3-ca-file", "", "PEM file of CA certificates to trust for the S3 endpoint, besides the system's")
	fs.StringVar(&df.lookup, "s3-lookup", "auto", "S3 bucket addressing: auto (minio-go's choice by endpoint), path (host/bucket/key) or dns (bucket.host/key)")
}

// newS3Client makes the client for an s3:// destination: the endpoint (AWS
// when none is given), region, addressing, trusted CAs and credentials.
// It returns the endpoint it talks to.
func newS3Client(df destFlags, log *slog.Logger) (*minio.Client, string, error) {
	endpoint := df.endpoint
	if endpoint == "" {
		endpoint = awsEndpoint
	}
	region := df.region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	var lookup minio.BucketLookupType
	switch df.lookup {
	case "", "auto":
		lookup = minio.BucketLookupAuto
	case "path":
		lookup = minio.BucketLookupPath
	case "dns":
		lookup = minio.BucketLookupDNS
	default:
		return nil, "", fmt.Errorf("%w: --s3-lookup %q: want auto, path or dns", errUsage, df.lookup)
	}
	tr, err := minio.DefaultTransport(!df.insecure)
	if err != nil {
		return nil, "", fmt.Errorf("s3 transport: %w", err)
	}
	if df.caFile != "" {
		if df.insecure {
			return nil, "", fmt.Errorf("%w: --s3-ca-file with --s3-insecure: plain HTTP checks no certificate", errUsage)
		}
		pool, err := caPool(df.caFile)
		if err != nil {
			return nil, "", err
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	cl, err := minio.New(endpoint, &minio.Options{
		Creds:        s3Credentials(log),
		Secure:       !df.insecure,
		Region:       region,
		BucketLookup: lookup,
		Transport:    tr,
	})
	if err != nil {
		return nil, "", fmt.Errorf("s3 client for %s: %w", endpoint, err)
	}
	return cl, endpoint, nil
}

// caPool is the system's roots plus the certificates in file.
func caPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: read --s3-ca-file: %w", errUsage, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: --s3-ca-file %s: no PEM certificate in it", errUsage, file)
	}
	return pool, nil
}

// untrustedCert reports whether err is a TLS certificate the client does
// not trust: a configuration error, not an outage to wait out.
func untrustedCert(err error) bool {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &cv)
}

// s3Credentials is the usual AWS chain: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then the
// shared files (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, and
// AWS_CONFIG_FILE or ~/.aws/config; profile AWS_PROFILE or default), then
// the IAM provider: EKS web identity (AWS_WEB_IDENTITY_TOKEN_FILE,
// AWS_ROLE_ARN), ECS task role (AWS_CONTAINER_CREDENTIALS_*), else the EC2
// instance metadata service. AWS_EC2_METADATA_DISABLED=true leaves the
// last one out; AWS_EC2_METADATA_SERVICE_ENDPOINT moves it. Each time the
// source changes, it is logged (never a secret).
func s3Credentials(log *slog.Logger) *credentials.Credentials {
	note := &sourceLog{log: log}
	providers := []credentials.Provider{
		&namedProvider{Provider: &credentials.EnvAWS{}, source: "environment", note: note},
		&namedProvider{Provider: &credentials.FileAWSCredentials{}, source: "shared credentials file", note: note},
	}
	if iam := iamProvider(); iam != nil {
		providers = append(providers, &namedProvider{Provider: iam, source: "iam", note: note})
	}
	providers = append(providers, &noCredentials{note: note})
	return credentials.NewChainCredentials(providers)
}

// iamProvider returns minio-go's IAM provider, nil when only the EC2
// metadata service could answer and AWS_EC2_METADATA_DISABLED is true
// (minio-go does not read that variable itself).
func iamProvider() *credentials.IAM {
	iam := &credentials.IAM{Client: &http.Client{Timeout: 10 * time.Second}}
	container := false
	for _, k := range []string{"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		if os.Getenv(k) != "" {
			container = true
		}
	}
	if container {
		return iam
	}
	if strings.EqualFold(os.Getenv(envIMDSDisabled), "true") {
		return nil
	}
	iam.Endpoint = os.Getenv(envIMDSEndpoint) // "" is minio-go's default, 169.254.169.254
	return iam
}

// namedProvider tells the log which provider answered.
type namedProvider struct {
	credentials.Provider
	source string
	note   *sourceLog
}

func (p *namedProvider) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	v, err := p.Provider.RetrieveWithCredContext(cc)
	if err == nil && (v.AccessKeyID != "" || v.SecretAccessKey != "") {
		p.note.used(p.source, fmt.Sprintf("%T", p.Provider))
	}
	return v, err
}

func (p *namedProvider) Retrieve() (credentials.Value, error) {
	return p.RetrieveWithCredContext(nil)
}

// noCredentials ends the chain: it answers nothing, and notes that no
// provider did (requests then go unsigned and S3 refuses them).
type noCredentials struct {
	credentials.Expiry
	note *sourceLog
}

func (p *noCredentials) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	p.note.used("none", "")
	return credentials.Value{}, errors.New("no credentials")
}

func (p *noCredentials) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

func (p *noCredentials) IsExpired() bool { return true }

// sourceLog logs the credential source when it changes.
type sourceLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last string
}

func (s *sourceLog) used(source, provider string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == source {
		return
	}
	s.last = source
	if source == "none" {
		s.log.Warn("s3 credentials: none found (environment, shared credentials file, IAM); requests go unsigned")
		return
	}
	s.log.Info("s3 credentials", "source", source, "provider", provider)
}
