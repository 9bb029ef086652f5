// Package testcert makes TLS certificates for tests: a throwaway CA and
// server certificates it signs for loopback names (127.0.0.1, ::1,
// localhost), written as PEM files. Nothing here is for production use.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	tmpl := template(t, name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	key, cert, certPEM := issue(t, "CA", tmpl, nil, nil)
	return &CA{Cert: cert, CertPEM: certPEM, key: key}
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteCA writes the CA certificate to path.
func (ca *CA) WriteCA(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, ca.CertPEM, 0o644); err != nil {
		t.Fatalf("write CA certificate: %v", err)
	}
}

// Leaf is a server certificate and its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte // the certificate only
	KeyPEM  []byte // PKCS #8
}

// Server makes a server certificate for 127.0.0.1, ::1 and localhost (and
// any extra DNS names), signed by ca, with commonName cn.
func (ca *CA) Server(t testing.TB, cn string, dnsNames ...string) *Leaf {
	t.Helper()
	tmpl := template(t, cn)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames = append([]string{"localhost"}, dnsNames...)
	tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	key, cert, certPEM := issue(t, "server", tmpl, ca.Cert, ca.key)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal server key: %v", err)
	}
	return &Leaf{Cert: cert, CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// template is a certificate of the tests' organisation for commonName cn,
// valid from an hour ago (clock skew) for a day, with a new serial.
func template(t testing.TB, cn string) *x509.Certificate {
	t.Helper()
	return &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"eosink tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

// issue makes a P-256 key and a certificate of tmpl for it, signed by
// parent's key (nil parent: self-signed); what names the certificate in
// messages.
func issue(t testing.TB, what string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate %s key: %v", what, err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("create %s certificate: %v", what, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse %s certificate: %v", what, err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// Write writes the certificate and key to certPath and keyPath (key mode
// 0600), each through a temp file and a rename, as a certificate manager
// would, so a reader never sees half a file.
func (l *Leaf) Write(t testing.TB, certPath, keyPath string) {
	t.Helper()
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{certPath, l.CertPEM, 0o644}, {keyPath, l.KeyPEM, 0o600}} {
		tmp := filepath.Join(filepath.Dir(f.path), "."+filepath.Base(f.path)+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			t.Fatalf("write %s: %v", tmp, err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatalf("rename %s: %v", tmp, err)
		}
	}
}

// TLSCertificate returns the pair for a tls.Config.
func (l *Leaf) TLSCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatalf("key pair: %v", err)
	}
	return c
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		t.Fatalf("serial number: %v", err)
	}
	return n
}

// TLSConfig is a server tls.Config presenting the certificate.
func (l *Leaf) TLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{l.TLSCertificate(t)}}
}
