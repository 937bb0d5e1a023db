// Package tlsconf owns kvd's TLS material at run time: the certificate, key
// and CA files a listener or a dialer uses, re-read without a restart (on
// SIGHUP, or when a file changes), and the tls.Config each side builds from
// the current copy. It also owns the rule that ties a peer certificate to a
// member: the certificate must name the member (a DNS subject alternative
// name, or the common name, equal to the member name) and serve both ends
// of a connection, and one that also carries the URI kvd-member:NAME is
// vouched for as a member's even by a node that does not know NAME yet.
//
// Every tls.Config here picks the current material per handshake
// (GetConfigForClient, GetCertificate, VerifyConnection), so a reload
// applies to the next connection and never disturbs an established one.
package tlsconf

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Files names the PEM files of one TLS identity. CA is optional for a
// server that does not ask for client certificates.
type Files struct {
	Cert, Key, CA string
}

// material is one consistent reading of Files.
type material struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool // nil without a CA file
	sum  [32]byte       // of the three files' bytes: what Run compares
}

// Source holds the current material of Files and reloads it.
type Source struct {
	files  Files
	logger *slog.Logger
	cur    atomic.Pointer[material]
	mu     sync.Mutex // serialises reloads
}

// Load reads files once; the error names the file that failed.
func Load(files Files, logger *slog.Logger) (*Source, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: files, logger: logger}
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

func (s *Source) read() (*material, error) {
	certPEM, err := os.ReadFile(s.files.Cert)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(s.files.Key)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load key pair %s, %s: %w", s.files.Cert, s.files.Key, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse certificate %s: %w", s.files.Cert, err)
	}
	pair.Leaf = leaf
	h := sha256.New()
	h.Write(certPEM)
	h.Write(keyPEM)
	m := &material{cert: &pair, leaf: leaf}
	if s.files.CA != "" {
		caPEM, err := os.ReadFile(s.files.CA)
		if err != nil {
			return nil, fmt.Errorf("read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", s.files.CA)
		}
		m.pool = pool
		h.Write(caPEM)
	}
	copy(m.sum[:], h.Sum(nil))
	return m, nil
}

// Reload re-reads the files. On error the current material stays, so a
// half-written certificate never takes a listener down; the caller logs it.
// It reports whether anything changed.
func (s *Source) Reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.read()
	if err != nil {
		return false, err
	}
	if old := s.cur.Load(); bytes.Equal(old.sum[:], m.sum[:]) {
		return false, nil
	}
	s.cur.Store(m)
	s.logger.Info("TLS certificate reloaded", "cert", s.files.Cert, "subject", m.leaf.Subject.String(),
		"not_after", m.leaf.NotAfter.UTC().Format(time.RFC3339))
	return true, nil
}

// Run reloads the files every interval until ctx ends: a certificate
// renewed in place (cert-manager, a cron job) applies without a signal.
// A reload that fails is logged and retried at the next tick.
func (s *Source) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Reload(); err != nil {
			// Logged once per distinct error: a file being rewritten
			// fails a tick or two, a file deleted fails every tick.
			if err.Error() != lastErr {
				s.logger.Error("TLS certificate reload failed; keeping the current one", "err", err)
				lastErr = err.Error()
			}
		} else {
			lastErr = ""
		}
	}
}

// Leaf is the current certificate (for expiry metrics and logs).
func (s *Source) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// ClientAuth says what a server asks of clients.
type ClientAuth int

const (
	// NoClientCert asks for none.
	NoClientCert ClientAuth = iota
	// VerifyIfGiven asks for a certificate and verifies one if given
	// (memcached's ssl_verify_mode "request").
	VerifyIfGiven
	// RequireClientCert refuses a client without a certificate the CA
	// signed.
	RequireClientCert
)

// ParseMinVersion maps "1.2" and "1.3" to their tls constants.
func ParseMinVersion(v string) (uint16, error) {
	switch v {
	case "1.2", "":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("TLS version %q: want 1.2 or 1.3", v)
}

// Server is the tls.Config of a client-facing listener (memcache, HTTP).
// The certificate and the client CA are the current ones at each
// handshake.
func (s *Source) Server(minVersion uint16, auth ClientAuth) *tls.Config {
	return &tls.Config{
		MinVersion: minVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			c := &tls.Config{MinVersion: minVersion, Certificates: []tls.Certificate{*m.cert}}
			if m.pool != nil {
				c.ClientCAs = m.pool
				switch auth {
				case VerifyIfGiven:
					c.ClientAuth = tls.VerifyClientCertIfGiven
				case RequireClientCert:
					c.ClientAuth = tls.RequireAndVerifyClientCert
				}
			}
			return c, nil
		},
	}
}

// Client is the tls.Config for calling another member's HTTPS API (a join,
// a forwarded admin request, a version probe): it presents this source's
// certificate (listeners that require client certificates accept it) and
// verifies the server against the CA, or the system roots without one.
func (s *Source) Client(serverName string) *tls.Config {
	m := s.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		ServerName:   serverName,
		RootCAs:      m.pool,
		Certificates: []tls.Certificate{*m.cert},
	}
}

// ErrWrongMember is a peer certificate that does not name the member it
// speaks for.
var ErrWrongMember = errors.New("peer certificate does not name the member")

// Names are the names a certificate is issued to: its DNS subject
// alternative names, then its common name.
func Names(cert *x509.Certificate) []string {
	names := append([]string(nil), cert.DNSNames...)
	if cert.Subject.CommonName != "" {
		names = append(names, cert.Subject.CommonName)
	}
	return names
}

// Peer is mutual TLS between members: both sides present a certificate and
// verify the other's chain against the peer CA. Host names are not checked
// (members dial addresses, often IPs, that certificates need not list);
// what is checked is the member: after the handshake the transport learns
// which member the other side speaks for and asks CheckMember.
type Peer struct {
	src        *Source
	minVersion uint16
}

// NewPeer uses src (which must have a CA) for peer connections.
func NewPeer(src *Source, minVersion uint16) (*Peer, error) {
	if src.cur.Load().pool == nil {
		return nil, errors.New("peer TLS needs a trusted CA file")
	}
	return &Peer{src: src, minVersion: minVersion}, nil
}

// Source is the material behind p (for reloads).
func (p *Peer) Source() *Source { return p.src }

// verify checks a peer's chain against the current CA for usage. It runs
// as VerifyConnection, which unlike VerifyPeerCertificate also runs on a
// resumed session: a ticket issued before a CA change must not let its
// holder skip the check.
func (p *Peer) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage) error {
	return verifyChain(certs, p.src.cur.Load().pool, usage)
}

// verifyChain checks that roots sign certs[0] (through certs[1:]) for usage.
func verifyChain(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(certs) == 0 {
		return errors.New("peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		// Named by all its names: a member certificate often has only a SAN.
		return fmt.Errorf("verify peer certificate %q: %w", Names(certs[0]), err)
	}
	return nil
}

// ServerConfig is the accepting side: a client certificate is required and
// must chain to the peer CA (as a TLS client).
func (p *Peer) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: p.minVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := p.src.cur.Load()
			return &tls.Config{
				MinVersion:   p.minVersion,
				Certificates: []tls.Certificate{*m.cert},
				// Verified below against the current pool; RequireAnyClientCert
				// makes the handshake fail without one.
				ClientAuth: tls.RequireAnyClientCert,
				// Members do not resume sessions (the dialer keeps no
				// cache); refusing tickets leaves no path around verify.
				SessionTicketsDisabled: true,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return p.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
				},
			}, nil
		},
	}
}

// ClientConfig is the dialling side: it presents this member's certificate
// and verifies the other's chain (as a TLS server); the member it names is
// checked by the caller with CheckMember.
func (p *Peer) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: p.minVersion,
		// The certificate current at the handshake, like the server side:
		// a config kept across dials must not keep presenting the old one.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return p.src.cur.Load().cert, nil
		},
		// Chain verification happens in VerifyConnection against the
		// current CA; the host name is deliberately not checked (see Peer).
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return p.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		},
	}
}

// ErrClientOnly is a peer certificate whose extended key usage does not
// allow serving TLS: a member accepts connections as well as dialling
// them, so its certificate serves both ends, and one issued for clients
// only (kvd certs client) is a client's, whatever it names.
var ErrClientOnly = errors.New("peer certificate is not a member's: its extended key usage lacks serverAuth")

// CheckMember reports whether the verified certificate of a connection is a
// member's (usable by servers and clients, see ErrClientOnly) and names the
// member whose raft ID is id; idOf maps a member name to its ID (the
// transport knows IDs, the certificates names).
func CheckMember(state tls.ConnectionState, id uint64, idOf func(string) uint64) error {
	if len(state.PeerCertificates) == 0 {
		return errors.New("peer presented no certificate")
	}
	cert := state.PeerCertificates[0]
	if !serves(cert) {
		return fmt.Errorf("%w (it names %q)", ErrClientOnly, Names(cert))
	}
	for _, n := range Names(cert) {
		if idOf(n) == id {
			return nil
		}
	}
	return fmt.Errorf("%w %x: it names %q", ErrWrongMember, id, Names(cert))
}

// serves reports whether cert may authenticate a TLS server: no extended
// key usage (any use) or one listing serverAuth or any.
func serves(cert *x509.Certificate) bool {
	if len(cert.ExtKeyUsage) == 0 && len(cert.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// MemberScheme is the URI scheme of the subject alternative name that
// vouches for a certificate as a member's: kvd-member:NAME.
const MemberScheme = "kvd-member"

// MemberURI is the subject alternative name kvd certs member writes into
// the certificate of member name. The name is escaped: a member name may
// hold '?', '#' or '%', which a URI reserves.
func MemberURI(name string) *url.URL {
	return &url.URL{Scheme: MemberScheme, Opaque: url.PathEscape(name)}
}

// memberOfURI is the member name a kvd-member URI vouches for.
func memberOfURI(u *url.URL) (string, bool) {
	if u.Scheme != MemberScheme || u.Opaque == "" {
		return "", false
	}
	name, err := url.PathUnescape(u.Opaque)
	return name, err == nil
}

// Vouched reports whether the connection's certificate carries the URI
// kvd-member:NAME of the member whose raft ID is id. A node lets a sender
// it does not count as a member through only if so (membership's
// notMember): without the mark, any certificate of the peer CA that merely
// names a stranger, a client's for one, could speak raft to it.
func Vouched(state tls.ConnectionState, id uint64, idOf func(string) uint64) bool {
	if len(state.PeerCertificates) == 0 {
		return false
	}
	for _, u := range state.PeerCertificates[0].URIs {
		if name, ok := memberOfURI(u); ok && idOf(name) == id {
			return true
		}
	}
	return false
}
