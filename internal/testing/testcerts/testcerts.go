// Package testcerts writes a throwaway CA and a certificate it signed, for
// tests of TLS clients and listeners. Tests only: the keys are generated per
// call and the files live in the test's temporary directory.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Files are the PEM files New wrote.
type Files struct {
	// CA is the CA certificate.
	CA string
	// Cert and Key are a certificate the CA signed for 127.0.0.1 and
	// localhost, usable by a server and by a client (as member
	// certificates are), and its key.
	Cert, Key string
}

// New writes a CA and a certificate it signed into t's temporary directory.
func New(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "n1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost", "n1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "n1.crt"), Key: filepath.Join(dir, "n1.key")}
	write := func(path, typ string, der []byte) {
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	write(f.CA, "CERTIFICATE", caDER)
	write(f.Cert, "CERTIFICATE", der)
	write(f.Key, "PRIVATE KEY", keyDER)
	return f
}
