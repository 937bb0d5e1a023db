package certgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// Usage says what an issued certificate may authenticate.
type Usage int

const (
	// UsageServer is a listener's certificate (ExtKeyUsage serverAuth).
	UsageServer Usage = iota + 1
	// UsageClient is a client's certificate (ExtKeyUsage clientAuth).
	UsageClient
	// UsageBoth is a member's certificate: a member accepts peers and dials
	// them, and calls other members' HTTPS API, so the one certificate is
	// presented on both sides of a connection.
	UsageBoth
)

// String names the usage as the CLI prints it.
func (u Usage) String() string {
	switch u {
	case UsageServer:
		return "server"
	case UsageClient:
		return "client"
	case UsageBoth:
		return "server+client"
	}
	return fmt.Sprintf("Usage(%d)", int(u))
}

func (u Usage) extKeyUsage() ([]x509.ExtKeyUsage, error) {
	switch u {
	case UsageServer:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, nil
	case UsageClient:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	case UsageBoth:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, nil
	}
	return nil, fmt.Errorf("unknown usage %d", int(u))
}

// Request describes a certificate to issue.
type Request struct {
	// CommonName is the subject's CN; for a member, its member name.
	CommonName string
	// DNSNames and IPs are the subject alternative names. TLS clients check
	// the host they dialled against these, not against CommonName.
	DNSNames []string
	IPs      []net.IP
	// URIs are URI subject alternative names: a member's certificate
	// carries kvd-member:NAME (tlsconf.MemberURI).
	URIs []*url.URL
	// ValidFor is the lifetime from now. It is capped at the CA's own
	// expiry: past it the chain fails to verify anyway.
	ValidFor time.Duration
	// Usage is server, client or both.
	Usage Usage
}

// clockSkew backdates NotBefore so that a certificate made on one host is
// already valid on another whose clock is a little behind.
const clockSkew = time.Minute

// NewCA makes a self-signed CA certificate and its private key, both PEM.
// The CA signs leaf certificates only (path length 0): kvd has no use for
// intermediates, and forbidding them limits what a leaked leaf key can do.
func NewCA(commonName string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("certgen: CA common name must not be empty")
	}
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("certgen: CA validity %s must be positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: create CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// Issue makes a certificate for req signed by the CA whose certificate and
// key are given (PEM), and returns it with its new private key (PEM).
func Issue(caCertPEM, caKeyPEM []byte, req Request) (certPEM, keyPEM []byte, err error) {
	ca, err := ParseCertificate(caCertPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("certgen: CA certificate %q is not a CA (basic constraints)", ca.Subject.CommonName)
	}
	caKey, err := ParsePrivateKey(caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: CA key: %w", err)
	}
	if !publicKeysEqual(caKey.Public(), ca.PublicKey) {
		return nil, nil, fmt.Errorf("certgen: CA key does not belong to CA certificate %q", ca.Subject.CommonName)
	}
	if req.CommonName == "" {
		return nil, nil, errors.New("certgen: common name must not be empty")
	}
	if req.ValidFor <= 0 {
		return nil, nil, fmt.Errorf("certgen: validity %s must be positive", req.ValidFor)
	}
	for _, name := range req.DNSNames {
		if err := checkDNSName(name); err != nil {
			return nil, nil, fmt.Errorf("certgen: DNS name %q: %w", name, err)
		}
	}
	ext, err := req.Usage.extKeyUsage()
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: %w", err)
	}
	now := time.Now()
	if !now.Before(ca.NotAfter) {
		return nil, nil, fmt.Errorf("certgen: CA certificate %q expired at %s", ca.Subject.CommonName, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(req.ValidFor)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		URIs:         req.URIs,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		// An ECDSA key signs the handshake; it never encrypts a key, so
		// keyEncipherment (an RSA key-transport usage) is left out.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           ext,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: create certificate for %q: %w", req.CommonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// ParseCertificate decodes the first CERTIFICATE block of a PEM file.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		return cert, nil
	}
}

// ParsePrivateKey decodes a PEM private key: PKCS#8 (what this package
// writes), SEC 1 EC or PKCS#1 RSA, so that a CA made elsewhere (openssl,
// cfssl) can sign kvd's certificates too.
func ParsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM private key block")
		}
		switch block.Type {
		case "PRIVATE KEY":
			key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse PKCS#8 key: %w", err)
			}
			signer, ok := key.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("a %T key cannot sign", key)
			}
			return signer, nil
		case "EC PRIVATE KEY":
			key, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse EC key: %w", err)
			}
			return key, nil
		case "RSA PRIVATE KEY":
			key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse RSA key: %w", err)
			}
			return key, nil
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("the key is encrypted; decrypt it first (kvd reads unencrypted keys only)")
		}
	}
}

// newSerial returns a random positive 128-bit serial number. Random serials
// keep two certificates from one CA distinct without a counter to persist.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certgen: serial number: %w", err)
	}
	if serial.Sign() == 0 {
		// A zero serial is invalid in RFC 5280; one chance in 2^128.
		serial.SetInt64(1)
	}
	return serial, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certgen: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// checkDNSName refuses what CreateCertificate would otherwise turn into an
// opaque encoding error: a SAN dNSName is an IA5String (ASCII), and an empty
// or spaced one can never match a host.
func checkDNSName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	for _, r := range name {
		switch {
		case r > 0x7e || r < 0x21:
			return errors.New("a DNS name is printable ASCII without spaces")
		}
	}
	return nil
}

// Verify checks that certPEM was signed by the CA in caCertPEM, is valid at
// now and may be used as usage (both usages, for UsageBoth). It is how a
// re-run of `kvd certs cluster` tells a certificate it may keep from one
// left over from another CA.
func Verify(caCertPEM, certPEM []byte, usage Usage, now time.Time) error {
	ca, err := ParseCertificate(caCertPEM)
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return err
	}
	ext, err := usage.extKeyUsage()
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	// x509 accepts a chain if any one of KeyUsages is allowed; each usage
	// is checked on its own so that UsageBoth needs both.
	for _, u := range ext {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, err)
		}
	}
	return nil
}

// KeyMatches checks that keyPEM is the private key of the certificate in
// certPEM.
func KeyMatches(certPEM, keyPEM []byte) error {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return err
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return err
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return fmt.Errorf("the key is not the key of certificate %q", cert.Subject.CommonName)
	}
	return nil
}
