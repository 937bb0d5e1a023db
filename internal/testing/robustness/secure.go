package robustness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-project/kvd/internal/certgen"
)

// Security is a secured run's certificates and credentials (-secure, make
// robustness SECURE=1): every member serves memcache and HTTP over TLS,
// speaks mutual TLS to its peers and wants a password from every client.
//
//   - One CA per run; each member's certificate names the member (its raft
//     name, as peer mTLS requires), localhost and 127.0.0.1, for both
//     server and client use. Clients verify ServerName "localhost".
//   - One user in an htpasswd file. Text and meta clients log in with
//     memcached's text exchange (a set whose data is "user password"),
//     binary clients with SASL PLAIN, before their first request; a failed
//     login is a request not sent.
//   - HTTP: the harness writes http:// URLs throughout (check.go among
//     others); the cluster's clients turn them into https:// with Basic
//     credentials (secureTransport). Only the URLs that leave the process
//     (a joiner's --join, kvd cluster add) are written as https.
//   - Peer proxies: kvd runs the TLS handshake before its 32-byte hello, so
//     a byte proxy cannot read which pair a connection carries. The proxy
//     therefore terminates TLS as the member it stands for (it holds every
//     member's certificate), learns the dialer from its verified client
//     certificate, reads the hello in the clear, and dials the member with
//     TLS as the dialer. Both members still verify a certificate naming the
//     member they expect; cuts, delays and resets act on the same messages.
type Security struct {
	// Dir holds ca.crt, <member>.crt/.key and the htpasswd file.
	Dir            string
	User, Password string
	pool           *x509.CertPool
	members        map[string]tls.Certificate
}

// NewSecurity creates a CA, a certificate for each member and one user
// under dir.
func NewSecurity(dir string, members []string) (*Security, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	s := &Security{Dir: dir, User: "robustness", Password: "harness-password", members: map[string]tls.Certificate{}}
	caCert, caKey, err := certgen.NewCA("kvd robustness CA", 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	s.pool = x509.NewCertPool()
	s.pool.AppendCertsFromPEM(caCert)
	if err := os.WriteFile(s.caFile(), caCert, 0o644); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	for _, m := range members {
		cert, key, err := certgen.Issue(caCert, caKey, certgen.Request{CommonName: m,
			DNSNames: []string{m, "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			ValidFor: 24 * time.Hour, Usage: certgen.UsageBoth})
		if err != nil {
			return nil, fmt.Errorf("pki: certificate of %s: %w", m, err)
		}
		if err := certgen.PairIn(dir, m).Write(cert, key, true); err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("pki: %s: %w", m, err)
		}
		s.members[m] = pair
	}
	// bcrypt's minimum cost: the server caches verified passwords anyway,
	// and the run is about faults, not hashing.
	hash, err := bcrypt.GenerateFromPassword([]byte(s.Password), bcrypt.MinCost)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(s.authFile(), []byte(s.User+":"+string(hash)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return s, nil
}

func (s *Security) caFile() string   { return filepath.Join(s.Dir, "ca.crt") }
func (s *Security) authFile() string { return filepath.Join(s.Dir, "kvd.htpasswd") }

// flags are member's TLS, peer mTLS and authentication flags.
func (s *Security) flags(member string) []string {
	p := certgen.PairIn(s.Dir, member)
	return []string{"--cert-file", p.Cert, "--key-file", p.Key,
		"--peer-cert-file", p.Cert, "--peer-key-file", p.Key, "--peer-trusted-ca-file", s.caFile(),
		"--auth-file", s.authFile()}
}

// clientTLS is what every client of the run trusts: the run's CA, for the
// name localhost, which every member's certificate carries.
func (s *Security) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: s.pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// dial opens a TLS connection to a memcache port, handshake included,
// within timeout.
func (s *Security) dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, s.clientTLS())
	if err != nil {
		return nil, err
	}
	return c, nil
}

// loginText is memcached's text-protocol authentication on a fresh
// connection: a set whose data is "user password", answered STORED.
func (s *Security) loginText(m *mcConn) error {
	reply, err := m.store(OpSet, "auth", s.User+" "+s.Password, 0)
	if err != nil {
		return err
	}
	if reply != "STORED" {
		return fmt.Errorf("login answered %q", reply)
	}
	return nil
}

// binOpSASLAuth is memcached's SASL authentication request.
const binOpSASLAuth = 0x21

// loginBinary is SASL PLAIN on a fresh binary connection: status 0 is a
// success.
func (s *Security) loginBinary(b *binConn) error {
	rp, err := b.roundTrip(binOpSASLAuth, "PLAIN", nil, "\x00"+s.User+"\x00"+s.Password, 0)
	if err != nil {
		return err
	}
	if rp.status != binOK {
		return fmt.Errorf("SASL PLAIN answered status %#x %q", rp.status, rp.value)
	}
	return nil
}

// httpClient is an HTTP client for the members: it sends the harness's
// http:// URLs as https:// with the run's credentials.
func (s *Security) httpClient(timeout time.Duration) *http.Client {
	base := &http.Transport{TLSClientConfig: s.clientTLS()}
	return &http.Client{Timeout: timeout, Transport: &secureTransport{sec: s, base: base}}
}

// secureTransport upgrades every request to https and adds Basic
// credentials.
type secureTransport struct {
	sec  *Security
	base http.RoundTripper
}

func (t *secureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if r.URL.Scheme == "http" {
		r.URL.Scheme = "https"
	}
	r.SetBasicAuth(t.sec.User, t.sec.Password)
	return t.base.RoundTrip(r)
}

// baseURL is the URL of a member's HTTP listener for a program the harness
// starts: https with the credentials in it when secure, as a joiner's
// --join wants them.
func (s *Security) baseURL(addr string) string {
	if s == nil {
		return "http://" + addr
	}
	return (&url.URL{Scheme: "https", User: url.UserPassword(s.User, s.Password), Host: addr}).String()
}

// cliArgs are the flags kvd cluster needs to reach a secured member.
func (s *Security) cliArgs() []string {
	if s == nil {
		return nil
	}
	return []string{"--cacert", s.caFile(), "--user", s.User + ":" + s.Password}
}

// peerConn is a proxied TLS peer connection whose Close closes the TCP
// connection at once, as kvd's own does: tls.Conn's Close first writes a
// close_notify that may wait on a paused node.
type peerConn struct{ *tls.Conn }

func (c peerConn) Close() error { return c.NetConn().Close() }

// acceptPeer runs the TLS handshake of a connection to member's proxy as
// member, requiring a client certificate from the run's CA, and returns the
// connection and the dialing member named by that certificate.
func (s *Security) acceptPeer(down net.Conn, member string) (net.Conn, string, error) {
	cert, ok := s.members[member]
	if !ok {
		return nil, "", fmt.Errorf("no certificate for %s", member)
	}
	tc := tls.Server(down, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: s.pool})
	if err := tc.Handshake(); err != nil {
		return nil, "", fmt.Errorf("TLS from a peer of %s: %w", member, err)
	}
	peers := tc.ConnectionState().PeerCertificates
	if len(peers) == 0 {
		return nil, "", errors.New("peer presented no certificate")
	}
	return peerConn{tc}, peers[0].Subject.CommonName, nil
}

// dialPeer runs the TLS handshake on up, a connection to member's peer
// listener, presenting dialer's certificate.
func (s *Security) dialPeer(up net.Conn, dialer, member string) (net.Conn, error) {
	cert, ok := s.members[dialer]
	if !ok {
		return nil, fmt.Errorf("no certificate for dialer %q", dialer)
	}
	tc := tls.Client(up, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		RootCAs: s.pool, ServerName: member})
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS to %s as %s: %w", member, dialer, err)
	}
	return peerConn{tc}, nil
}
