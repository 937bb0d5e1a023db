package certgen_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/certgen"
)

const day = 24 * time.Hour

func newCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := certgen.NewCA("kvd test CA", 365*day)
	require.NoError(t, err)
	return certPEM, keyPEM
}

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	cert, err := certgen.ParseCertificate(certPEM)
	require.NoError(t, err)
	return cert
}

func TestNewCA(t *testing.T) {
	certPEM, keyPEM := newCA(t)
	ca := parse(t, certPEM)
	assert.True(t, ca.IsCA)
	assert.True(t, ca.MaxPathLenZero, "no intermediates")
	assert.Equal(t, "kvd test CA", ca.Subject.CommonName)
	assert.NotZero(t, ca.KeyUsage&x509.KeyUsageCertSign)
	assert.Equal(t, x509.ECDSA, ca.PublicKeyAlgorithm)
	assert.Equal(t, elliptic.P256(), ca.PublicKey.(*ecdsa.PublicKey).Curve)
	assert.WithinDuration(t, time.Now().Add(-time.Minute), ca.NotBefore, 5*time.Second, "backdated for clock skew")
	assert.WithinDuration(t, time.Now().Add(365*day), ca.NotAfter, 5*time.Second)

	key, err := certgen.ParsePrivateKey(keyPEM)
	require.NoError(t, err)
	assert.True(t, key.Public().(*ecdsa.PublicKey).Equal(ca.PublicKey))

	// The CA verifies as its own root.
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = ca.Verify(x509.VerifyOptions{Roots: roots})
	require.NoError(t, err)
}

func TestNewCARefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cn       string
		validFor time.Duration
		want     string
	}{
		{"empty name", "", day, "common name"},
		{"zero validity", "ca", 0, "validity"},
		{"negative validity", "ca", -day, "validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := certgen.NewCA(tc.cn, tc.validFor)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestIssuedCertificatesVerifyWithTheirUsages(t *testing.T) {
	caCert, caKey := newCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(parse(t, caCert))
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	for _, tc := range []struct {
		usage   certgen.Usage
		allowed []x509.ExtKeyUsage
		refused []x509.ExtKeyUsage
	}{
		{certgen.UsageServer, []x509.ExtKeyUsage{server}, []x509.ExtKeyUsage{client}},
		{certgen.UsageClient, []x509.ExtKeyUsage{client}, []x509.ExtKeyUsage{server}},
		{certgen.UsageBoth, []x509.ExtKeyUsage{server, client}, nil},
	} {
		t.Run(tc.usage.String(), func(t *testing.T) {
			certPEM, keyPEM, err := certgen.Issue(caCert, caKey, certgen.Request{
				CommonName: "n1", DNSNames: []string{"n1"}, ValidFor: day, Usage: tc.usage,
			})
			require.NoError(t, err)
			cert := parse(t, certPEM)
			assert.False(t, cert.IsCA)
			assert.ElementsMatch(t, tc.allowed, cert.ExtKeyUsage)
			for _, u := range tc.allowed {
				_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}})
				assert.NoError(t, err, "usage %v", u)
			}
			for _, u := range tc.refused {
				_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}})
				assert.Error(t, err, "usage %v", u)
			}
			require.NoError(t, certgen.Verify(caCert, certPEM, tc.usage, time.Now()))

			key, err := certgen.ParsePrivateKey(keyPEM)
			require.NoError(t, err)
			assert.True(t, key.Public().(*ecdsa.PublicKey).Equal(cert.PublicKey), "the key is the certificate's")
		})
	}
}

func TestCertificateFromAnotherCADoesNotVerify(t *testing.T) {
	caCert, _ := newCA(t)
	otherCert, otherKey := newCA(t)
	certPEM, _, err := certgen.Issue(otherCert, otherKey, certgen.Request{CommonName: "n1", ValidFor: day, Usage: certgen.UsageBoth})
	require.NoError(t, err)

	roots := x509.NewCertPool()
	roots.AddCert(parse(t, caCert))
	_, err = parse(t, certPEM).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	require.Error(t, err)
	require.Error(t, certgen.Verify(caCert, certPEM, certgen.UsageBoth, time.Now()))
}

func TestIssuedCertificateNamesAndAddresses(t *testing.T) {
	caCert, caKey := newCA(t)
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.7"), net.ParseIP("::1")}
	certPEM, _, err := certgen.Issue(caCert, caKey, certgen.Request{
		CommonName: "n1",
		DNSNames:   []string{"n1", "localhost", "n1.kvd.svc.cluster.local"},
		IPs:        ips,
		ValidFor:   day,
		Usage:      certgen.UsageBoth,
	})
	require.NoError(t, err)
	cert := parse(t, certPEM)
	assert.Equal(t, "n1", cert.Subject.CommonName)
	assert.Equal(t, []string{"n1", "localhost", "n1.kvd.svc.cluster.local"}, cert.DNSNames)
	require.Len(t, cert.IPAddresses, len(ips))
	for i, ip := range ips {
		assert.True(t, ip.Equal(cert.IPAddresses[i]), "%s", ip)
	}
	for _, host := range []string{"n1", "localhost", "n1.kvd.svc.cluster.local", "127.0.0.1", "10.0.0.7", "::1"} {
		assert.NoError(t, cert.VerifyHostname(host), host)
	}
	assert.Error(t, cert.VerifyHostname("n2"))
}

func TestIssuedCertificateExpiry(t *testing.T) {
	caCert, caKey := newCA(t)
	certPEM, _, err := certgen.Issue(caCert, caKey, certgen.Request{CommonName: "n1", ValidFor: 10 * day, Usage: certgen.UsageBoth})
	require.NoError(t, err)
	now := time.Now()
	for _, tc := range []struct {
		name  string
		at    time.Time
		valid bool
	}{
		{"now", now, true},
		{"30s ago, within the clock-skew allowance", now.Add(-30 * time.Second), true},
		{"an hour ago, before NotBefore", now.Add(-time.Hour), false},
		{"in 9 days", now.Add(9 * day), true},
		{"in 11 days, expired", now.Add(11 * day), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := certgen.Verify(caCert, certPEM, certgen.UsageBoth, tc.at)
			if tc.valid {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

// A certificate never outlives its CA: past the CA's expiry the chain
// fails anyway, so a longer request is capped.
func TestIssuedCertificateIsCappedAtTheCAExpiry(t *testing.T) {
	caCertPEM, caKey, err := certgen.NewCA("short CA", 2*day)
	require.NoError(t, err)
	certPEM, _, err := certgen.Issue(caCertPEM, caKey, certgen.Request{CommonName: "n1", ValidFor: 825 * day, Usage: certgen.UsageBoth})
	require.NoError(t, err)
	assert.Equal(t, parse(t, caCertPEM).NotAfter, parse(t, certPEM).NotAfter)
}

func TestSerialsAreRandomAndLarge(t *testing.T) {
	caCert, caKey := newCA(t)
	seen := map[string]bool{}
	for range 8 {
		certPEM, _, err := certgen.Issue(caCert, caKey, certgen.Request{CommonName: "c", ValidFor: day, Usage: certgen.UsageClient})
		require.NoError(t, err)
		serial := parse(t, certPEM).SerialNumber
		assert.Positive(t, serial.Sign())
		assert.LessOrEqual(t, serial.BitLen(), 128)
		assert.False(t, seen[serial.String()], "serial %s repeated", serial)
		seen[serial.String()] = true
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	caCert, caKey := newCA(t)
	_, otherKey := newCA(t)
	leafCert, leafKey, err := certgen.Issue(caCert, caKey, certgen.Request{CommonName: "leaf", ValidFor: day, Usage: certgen.UsageServer})
	require.NoError(t, err)
	ok := certgen.Request{CommonName: "n1", ValidFor: day, Usage: certgen.UsageBoth}
	for _, tc := range []struct {
		name          string
		caCert, caKey []byte
		req           certgen.Request
		want          string
	}{
		{"no CA certificate", nil, caKey, ok, "CA certificate"},
		{"garbage CA key", caCert, []byte("not a key"), ok, "CA key"},
		{"key of another CA", caCert, otherKey, ok, "does not belong"},
		{"leaf as CA", leafCert, leafKey, ok, "not a CA"},
		{"empty common name", caCert, caKey, certgen.Request{ValidFor: day, Usage: certgen.UsageBoth}, "common name"},
		{"zero validity", caCert, caKey, certgen.Request{CommonName: "n1", Usage: certgen.UsageBoth}, "validity"},
		{"no usage", caCert, caKey, certgen.Request{CommonName: "n1", ValidFor: day}, "usage"},
		{"non-ASCII DNS name", caCert, caKey, certgen.Request{CommonName: "n1", DNSNames: []string{"nœud"}, ValidFor: day, Usage: certgen.UsageBoth}, "nœud"},
		{"empty DNS name", caCert, caKey, certgen.Request{CommonName: "n1", DNSNames: []string{""}, ValidFor: day, Usage: certgen.UsageBoth}, "DNS name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := certgen.Issue(tc.caCert, tc.caKey, tc.req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestKeyMatches(t *testing.T) {
	caCert, caKey := newCA(t)
	certPEM, keyPEM, err := certgen.Issue(caCert, caKey, certgen.Request{CommonName: "n1", ValidFor: day, Usage: certgen.UsageBoth})
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		cert, key []byte
		ok        bool
	}{
		{"its own key", certPEM, keyPEM, true},
		{"the CA's key", certPEM, caKey, false},
		{"no certificate", nil, keyPEM, false},
		{"no key", certPEM, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := certgen.KeyMatches(tc.cert, tc.key)
			assert.Equal(t, tc.ok, err == nil, "%v", err)
		})
	}
}
