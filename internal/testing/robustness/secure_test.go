package robustness

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// secureEcho stands in for member's TLS peer listener: it requires a
// client certificate from the run's CA, sends back the name that
// certificate carries, then echoes.
func secureEcho(t *testing.T, s *Security, member string) string {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.members[member]},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: s.pool}
	return serveLoopback(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		name := tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		_, _ = io.WriteString(tc, name+"\n")
		_, _ = io.Copy(tc, tc)
	})
}

// secureRoundTrip dials the proxy with TLS as member from (presenting its
// certificate, wanting one that names to), sends the hello and a payload,
// and returns the name the listener saw and the echo.
func secureRoundTrip(s *Security, addr, from, to string, fromID, toID uint64) (string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.pool, ServerName: to}
	if from != "" {
		cfg.Certificates = []tls.Certificate{s.members[from]}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	msg := append(testHello(fromID, toID), "ping"...)
	if _, err := c.Write(msg); err != nil {
		return "", err
	}
	got := make([]byte, len(from)+1+len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return "", err
	}
	return string(got[:len(from)]), nil
}

// TestSecureNetwork: a secured proxy answers as the member behind it,
// reaches the member as the dialer (whose certificate it checked), and
// cuts by the hello it reads inside TLS.
func TestSecureNetwork(t *testing.T) {
	s, err := NewSecurity(t.TempDir(), []string{"n1", "n2", "n3"})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNetwork()
	n.sec = s
	t.Cleanup(func() { _ = n.Close() })
	addr, err := n.addProxy("n2", secureEcho(t, s, "n2"))
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := secureRoundTrip(s, addr, "n1", "n2", 1, 2); err != nil || seen != "n1" {
		t.Fatalf("n1 to n2: the listener saw %q, %v; want n1", seen, err)
	}
	if _, err := secureRoundTrip(s, addr, "", "n2", 1, 2); err == nil {
		t.Fatal("a dialer without a certificate got through")
	}
	n.Cut(1, 2)
	if _, err := secureRoundTrip(s, addr, "n1", "n2", 1, 2); err == nil {
		t.Fatal("a cut pair connected")
	}
	if seen, err := secureRoundTrip(s, addr, "n3", "n2", 3, 2); err != nil || seen != "n3" {
		t.Fatalf("n3 to n2 during the cut of n1 to n2: the listener saw %q, %v; want n3", seen, err)
	}
	if eff := n.Heal(); eff.Cut == 0 {
		t.Fatalf("the cut counted no refusal: %+v", eff)
	}
	if _, err := secureRoundTrip(s, addr, "n1", "n2", 1, 2); err != nil {
		t.Fatalf("healed: %v", err)
	}
}
