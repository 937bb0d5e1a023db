// Package testpki makes certificate authorities and certificates for tests
// of kvd's TLS (internal/tlsconf, the peer transport, end-to-end clusters):
// ECDSA P-256 keys, PEM encoded, written into a test's directory. Only tests
// import it.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, as a trusted-CA file holds it.
	PEM []byte
}

// serial numbers certificates uniquely within a test process.
var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return k
}

// NewCA makes a CA whose common name is name, valid from an hour ago for a
// day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf describes a certificate to issue. The zero validity is from an hour
// ago for a day.
type Leaf struct {
	CN  string
	DNS []string
	// URIs are URI subject alternative names ("kvd-member:n1").
	URIs []string
	// ClientOnly issues a client's certificate (clientAuth only), not a
	// member's.
	ClientOnly bool
	// NotBefore and NotAfter, when set, replace the default validity (an
	// expired certificate: both in the past).
	NotBefore, NotAfter time.Time
}

// Pair is an issued certificate and its key, PEM encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for l, usable by servers and clients alike (as
// a member's is: it accepts and dials), valid for 127.0.0.1 too.
func (ca *CA) Issue(t testing.TB, l Leaf) Pair {
	t.Helper()
	key := newKey(t)
	nb, na := l.NotBefore, l.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(24 * time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if l.ClientOnly {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	var uris []*url.URL
	for _, u := range l.URIs {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatalf("URI SAN %q: %v", u, err)
		}
		uris = append(uris, parsed)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		URIs:         uris,
		Subject:      pkix.Name{CommonName: l.CN},
		DNSNames:     l.DNS,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("issue certificate: %v", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Files are the paths WriteFiles wrote.
type Files struct {
	Cert, Key, CA string
}

// WriteFiles writes p as <name>.crt and <name>.key, and the CA certificate
// as <name>-ca.crt, into dir (overwriting them: a rotation rewrites the
// same paths).
func WriteFiles(t testing.TB, dir, name string, ca *CA, p Pair) Files {
	t.Helper()
	f := Files{
		Cert: filepath.Join(dir, name+".crt"),
		Key:  filepath.Join(dir, name+".key"),
		CA:   filepath.Join(dir, name+"-ca.crt"),
	}
	for path, data := range map[string][]byte{f.Cert: p.CertPEM, f.Key: p.KeyPEM, f.CA: ca.PEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	return f
}
