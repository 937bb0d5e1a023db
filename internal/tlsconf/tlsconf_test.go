package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"hash/fnv"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/testpki"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// idOf is a stand-in for the member-name hash kvd uses.
func idOf(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// source writes a certificate for leaf from ca into a fresh directory and
// loads it.
func source(t *testing.T, ca *testpki.CA, leaf testpki.Leaf) (*tlsconf.Source, testpki.Files) {
	t.Helper()
	f := testpki.WriteFiles(t, t.TempDir(), "m", ca, ca.Issue(t, leaf))
	src, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, nil)
	require.NoError(t, err)
	return src, f
}

// handshake runs both sides over a loopback connection and returns each side's
// error and the states of completed handshakes. In TLS 1.3 a client's
// handshake completes before the server has judged the client's
// certificate, so the client also reads once: the server's verdict arrives
// as an alert or as the byte the server writes on success.
func handshake(t *testing.T, server, client *tls.Config) (sst, cst tls.ConnectionState, serr, cerr error) {
	t.Helper()
	// Loopback TCP, not net.Pipe: its buffering lets a side that failed
	// write its alert and go, where a pipe's writes wait for the reader.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	b, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer b.Close()
	a, err := ln.Accept()
	require.NoError(t, err)
	defer a.Close()
	deadline := time.Now().Add(10 * time.Second) // a failure guard, not a measurement
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	s, c := tls.Server(a, server), tls.Client(b, client)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if serr = s.Handshake(); serr == nil {
			sst = s.ConnectionState()
			_, serr = s.Write([]byte{1})
		}
		if serr != nil {
			a.Close()
		}
	}()
	if cerr = c.Handshake(); cerr == nil {
		cst = c.ConnectionState()
		var one [1]byte
		_, cerr = io.ReadFull(c, one[:])
	}
	b.Close()
	<-done
	return sst, cst, serr, cerr
}

func TestServerClientAuthModes(t *testing.T) {
	ca := testpki.NewCA(t, "client-ca")
	srv, _ := source(t, ca, testpki.Leaf{CN: "server", DNS: []string{"server"}})
	keyPair := func(ca *testpki.CA, cn string) *tls.Certificate {
		f := testpki.WriteFiles(t, t.TempDir(), "c", ca, ca.Issue(t, testpki.Leaf{CN: cn}))
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		require.NoError(t, err)
		return &pair
	}
	cli := keyPair(ca, "client")
	stranger := keyPair(testpki.NewCA(t, "other-ca"), "stranger")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)

	tests := []struct {
		name    string
		auth    tlsconf.ClientAuth
		cert    *tls.Certificate // the client's, if any
		wantErr bool
		wantCN  string // of the client certificate the server saw
	}{
		{"none asks for nothing", tlsconf.NoClientCert, nil, false, ""},
		{"none ignores a certificate", tlsconf.NoClientCert, cli, false, ""},
		{"if-given without one", tlsconf.VerifyIfGiven, nil, false, ""},
		{"if-given verifies one", tlsconf.VerifyIfGiven, cli, false, "client"},
		{"if-given refuses a stranger", tlsconf.VerifyIfGiven, stranger, true, ""},
		{"require refuses none", tlsconf.RequireClientCert, nil, true, ""},
		{"require accepts one", tlsconf.RequireClientCert, cli, false, "client"},
		{"require refuses a stranger", tlsconf.RequireClientCert, stranger, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &tls.Config{RootCAs: pool, ServerName: "server",
				// Presented whatever CAs the server names (Certificates
				// would send nothing rather than a stranger's).
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					if tt.cert == nil {
						return &tls.Certificate{}, nil
					}
					return tt.cert, nil
				}}
			sst, _, serr, cerr := handshake(t, srv.Server(tls.VersionTLS12, tt.auth), client)
			if tt.wantErr {
				assert.Error(t, serr, "server")
				assert.Error(t, cerr, "client")
				return
			}
			require.NoError(t, serr, "server")
			require.NoError(t, cerr, "client")
			if tt.wantCN == "" {
				assert.Empty(t, sst.PeerCertificates)
			} else {
				require.NotEmpty(t, sst.PeerCertificates)
				assert.Equal(t, tt.wantCN, sst.PeerCertificates[0].Subject.CommonName)
			}
		})
	}
}

func TestParseMinVersion(t *testing.T) {
	tests := []struct {
		in      string
		want    uint16
		wantErr bool
	}{
		{"", tls.VersionTLS12, false},
		{"1.2", tls.VersionTLS12, false},
		{"1.3", tls.VersionTLS13, false},
		{"1.1", 0, true},
	}
	for _, tt := range tests {
		got, err := tlsconf.ParseMinVersion(tt.in)
		if tt.wantErr {
			assert.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func newPeer(t *testing.T, src *tlsconf.Source, v uint16) *tlsconf.Peer {
	t.Helper()
	p, err := tlsconf.NewPeer(src, v)
	require.NoError(t, err)
	return p
}

func TestPeerBothSides(t *testing.T) {
	ca := testpki.NewCA(t, "peer-ca")
	other := testpki.NewCA(t, "other-ca")
	m1, _ := source(t, ca, testpki.Leaf{CN: "m1", DNS: []string{"m1"}})
	m2, _ := source(t, ca, testpki.Leaf{DNS: []string{"m2"}})
	cnOnly, _ := source(t, ca, testpki.Leaf{CN: "m3"})
	foreign, _ := source(t, other, testpki.Leaf{DNS: []string{"m2"}})
	expired, _ := source(t, ca, testpki.Leaf{DNS: []string{"m2"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	// A member whose peer CA file holds another CA: it trusts nobody here.
	f := testpki.WriteFiles(t, t.TempDir(), "x", other, ca.Issue(t, testpki.Leaf{DNS: []string{"m2"}}))
	mistrusting, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, nil)
	require.NoError(t, err)

	tests := []struct {
		name           string
		server, client *tlsconf.Source
		version        uint16
		wantErr        bool
		serverName     string // the member the client's certificate names
	}{
		{"min TLS 1.2", m1, m2, tls.VersionTLS12, false, "m2"},
		{"min TLS 1.3", m1, m2, tls.VersionTLS13, false, "m2"},
		{"common name only", m1, cnOnly, tls.VersionTLS13, false, "m3"},
		{"client from another CA", m1, foreign, tls.VersionTLS13, true, ""},
		{"server from another CA", foreign, m1, tls.VersionTLS13, true, ""},
		{"expired client", m1, expired, tls.VersionTLS13, true, ""},
		{"expired server", expired, m1, tls.VersionTLS12, true, ""},
		{"client trusts another CA", m1, mistrusting, tls.VersionTLS13, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sst, cst, serr, cerr := handshake(t, newPeer(t, tt.server, tt.version).ServerConfig(),
				newPeer(t, tt.client, tt.version).ClientConfig())
			if tt.wantErr {
				assert.Error(t, serr, "server")
				assert.Error(t, cerr, "client")
				return
			}
			require.NoError(t, serr, "server")
			require.NoError(t, cerr, "client")
			assert.GreaterOrEqual(t, sst.Version, tt.version)
			// Each side knows the member of the other.
			assert.NoError(t, tlsconf.CheckMember(sst, idOf(tt.serverName), idOf))
			assert.NoError(t, tlsconf.CheckMember(cst, idOf("m1"), idOf))
		})
	}
}

func TestNewPeerNeedsCA(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	f := testpki.WriteFiles(t, t.TempDir(), "m", ca, ca.Issue(t, testpki.Leaf{CN: "m1"}))
	src, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key}, nil)
	require.NoError(t, err)
	_, err = tlsconf.NewPeer(src, tls.VersionTLS12)
	assert.Error(t, err)
}

func TestCheckMember(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cert := func(l testpki.Leaf) *x509.Certificate {
		src, _ := source(t, ca, l)
		return src.Leaf()
	}
	tests := []struct {
		name    string
		certs   []*x509.Certificate
		member  string
		wantErr error
	}{
		{"DNS SAN names it", []*x509.Certificate{cert(testpki.Leaf{DNS: []string{"m1"}})}, "m1", nil},
		{"second DNS SAN names it", []*x509.Certificate{cert(testpki.Leaf{DNS: []string{"kvd.example", "m2"}})}, "m2", nil},
		{"common name names it", []*x509.Certificate{cert(testpki.Leaf{CN: "m1"})}, "m1", nil},
		{"another member", []*x509.Certificate{cert(testpki.Leaf{CN: "m1", DNS: []string{"m1"}})}, "m2", tlsconf.ErrWrongMember},
		{"a client's, naming the member", []*x509.Certificate{cert(testpki.Leaf{CN: "m1", ClientOnly: true})}, "m1", tlsconf.ErrClientOnly},
		{"no certificate", nil, "m1", errors.New("any")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tlsconf.CheckMember(tls.ConnectionState{PeerCertificates: tt.certs}, idOf(tt.member), idOf)
			switch {
			case tt.wantErr == nil:
				assert.NoError(t, err)
			case errors.Is(tt.wantErr, tlsconf.ErrWrongMember), errors.Is(tt.wantErr, tlsconf.ErrClientOnly):
				assert.ErrorIs(t, err, tt.wantErr)
			default:
				assert.Error(t, err)
			}
		})
	}
}

// TestVouched: only a kvd-member URI naming the sender vouches for it,
// escaped member names included; what the certificate otherwise names
// does not.
func TestVouched(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	cert := func(l testpki.Leaf) []*x509.Certificate {
		src, _ := source(t, ca, l)
		return []*x509.Certificate{src.Leaf()}
	}
	tests := []struct {
		name   string
		certs  []*x509.Certificate
		member string
		want   bool
	}{
		{"marked", cert(testpki.Leaf{DNS: []string{"m1"}, URIs: []string{tlsconf.MemberURI("m1").String()}}), "m1", true},
		{"marked, escaped name", cert(testpki.Leaf{DNS: []string{"m1"}, URIs: []string{tlsconf.MemberURI("a?b#c%d").String()}}), "a?b#c%d", true},
		{"marked for another member", cert(testpki.Leaf{DNS: []string{"m1"}, URIs: []string{tlsconf.MemberURI("m2").String()}}), "m1", false},
		{"named only", cert(testpki.Leaf{CN: "m1", DNS: []string{"m1"}}), "m1", false},
		{"another scheme", cert(testpki.Leaf{DNS: []string{"m1"}, URIs: []string{"spiffe://example.org/m1"}}), "m1", false},
		{"no certificate", nil, "m1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tlsconf.Vouched(tls.ConnectionState{PeerCertificates: tt.certs}, idOf(tt.member), idOf))
		})
	}
}

// TestResumedSessionReverified: a session cannot outlive the CA that
// trusted it. The client ports keep tickets, and crypto/tls checks a
// resumed client certificate against the current client CAs (which
// GetConfigForClient gives per handshake); the peer port, whose check is
// kvd's own VerifyConnection, issues no tickets at all.
func TestResumedSessionReverified(t *testing.T) {
	ca, next := testpki.NewCA(t, "ca"), testpki.NewCA(t, "next-ca")
	srv, f := source(t, ca, testpki.Leaf{CN: "server", DNS: []string{"server"}})
	_, cf := source(t, ca, testpki.Leaf{CN: "m2", DNS: []string{"m2"}})
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cache := tls.NewLRUClientSessionCache(4)
	clientCfg := func() *tls.Config {
		return &tls.Config{RootCAs: pool, ServerName: "server", ClientSessionCache: cache,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				c, err := tls.LoadX509KeyPair(cf.Cert, cf.Key)
				return &c, err
			}}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		server := srv.Server(v, tlsconf.RequireClientCert)
		c := clientCfg()
		c.MaxVersion = v
		_, _, serr, cerr := handshake(t, server, c)
		require.NoError(t, serr)
		require.NoError(t, cerr)
		sst, _, serr, cerr := handshake(t, server, c)
		require.NoError(t, serr)
		require.NoError(t, cerr)
		require.True(t, sst.DidResume, "TLS %x: the second handshake resumes", v)
	}

	// The peer port issues no tickets: every handshake is a full one,
	// verified against the CA of the day.
	peer := newPeer(t, srv, tls.VersionTLS12).ServerConfig()
	pc := clientCfg()
	pc.InsecureSkipVerify = true //nolint:gosec // the peer server's name is not what this checks
	for range 2 {
		sst, _, serr, cerr := handshake(t, peer, pc)
		require.NoError(t, serr)
		require.NoError(t, cerr)
		require.False(t, sst.DidResume, "a peer session was resumed")
	}

	// The client CA file now holds another CA: the client's certificate
	// is no longer trusted, and neither is its session.
	require.NoError(t, os.WriteFile(f.CA, next.PEM, 0o600))
	changed, err := srv.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := clientCfg()
		c.MaxVersion = v
		_, _, serr, _ := handshake(t, srv.Server(v, tlsconf.RequireClientCert), c)
		require.Error(t, serr, "TLS %x: a resumed session outlived the CA that trusted it", v)
	}

}

// rewrite replaces the files of f with a new certificate from ca.
func rewrite(t *testing.T, f testpki.Files, ca *testpki.CA, leaf testpki.Leaf) {
	t.Helper()
	p := ca.Issue(t, leaf)
	require.NoError(t, os.WriteFile(f.Cert, p.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(f.Key, p.KeyPEM, 0o600))
}

func TestReloadNextHandshakeOnly(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv, f := source(t, ca, testpki.Leaf{DNS: []string{"old"}})
	cli, _ := source(t, ca, testpki.Leaf{DNS: []string{"client"}})
	server := newPeer(t, srv, tls.VersionTLS13).ServerConfig()
	client := newPeer(t, cli, tls.VersionTLS13)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	require.NoError(t, err)
	defer ln.Close()
	// The server echoes every byte on every connection.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", ln.Addr().String(), client.ClientConfig())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a failure guard
		return c
	}
	echo := func(c *tls.Conn, b byte) {
		_, err := c.Write([]byte{b})
		require.NoError(t, err)
		var got [1]byte
		_, err = io.ReadFull(c, got[:])
		require.NoError(t, err)
		require.Equal(t, b, got[0])
	}
	names := func(c *tls.Conn) []string { return tlsconf.Names(c.ConnectionState().PeerCertificates[0]) }

	before := dial()
	echo(before, 1)
	assert.Equal(t, []string{"old"}, names(before))

	// Unchanged files: nothing to do.
	changed, err := srv.Reload()
	require.NoError(t, err)
	assert.False(t, changed)

	rewrite(t, f, ca, testpki.Leaf{DNS: []string{"new"}})
	changed, err = srv.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"new"}, srv.Leaf().DNSNames)

	after := dial()
	echo(after, 2)
	assert.Equal(t, []string{"new"}, names(after))
	// The connection made before the reload carries on with its session.
	echo(before, 3)
	assert.Equal(t, []string{"old"}, names(before))
}

func TestReloadKeepsCurrentOnBadFiles(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	tests := []struct {
		name  string
		spoil func(t *testing.T, f testpki.Files)
	}{
		{"garbage certificate", func(t *testing.T, f testpki.Files) {
			require.NoError(t, os.WriteFile(f.Cert, []byte("not PEM"), 0o600))
		}},
		{"key of another certificate", func(t *testing.T, f testpki.Files) {
			p := ca.Issue(t, testpki.Leaf{DNS: []string{"x"}})
			require.NoError(t, os.WriteFile(f.Key, p.KeyPEM, 0o600))
		}},
		{"CA file without a certificate", func(t *testing.T, f testpki.Files) {
			require.NoError(t, os.WriteFile(f.CA, []byte("\n"), 0o600))
		}},
		{"certificate removed", func(t *testing.T, f testpki.Files) {
			require.NoError(t, os.Remove(f.Cert))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, f := source(t, ca, testpki.Leaf{DNS: []string{"m1"}})
			cli, _ := source(t, ca, testpki.Leaf{DNS: []string{"m2"}})
			tt.spoil(t, f)
			changed, err := src.Reload()
			require.Error(t, err)
			assert.False(t, changed)
			assert.Equal(t, []string{"m1"}, src.Leaf().DNSNames)
			// Handshakes still use the material loaded before.
			_, cst, serr, cerr := handshake(t, newPeer(t, src, tls.VersionTLS13).ServerConfig(),
				newPeer(t, cli, tls.VersionTLS13).ClientConfig())
			require.NoError(t, serr)
			require.NoError(t, cerr)
			assert.Equal(t, []string{"m1"}, tlsconf.Names(cst.PeerCertificates[0]))
		})
	}
}

func TestLoadNamesTheFailingFile(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	f := testpki.WriteFiles(t, t.TempDir(), "m", ca, ca.Issue(t, testpki.Leaf{CN: "m1"}))
	tests := []struct {
		name  string
		files tlsconf.Files
		want  string
	}{
		{"no certificate", tlsconf.Files{Cert: f.Cert + ".missing", Key: f.Key}, "read certificate"},
		{"no key", tlsconf.Files{Cert: f.Cert, Key: f.Key + ".missing"}, "read key"},
		{"no CA", tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA + ".missing"}, "read CA"},
		{"key for certificate", tlsconf.Files{Cert: f.CA, Key: f.Key}, f.CA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tlsconf.Load(tt.files, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
