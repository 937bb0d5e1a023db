package transport

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/kvd-project/kvd/internal/testing/testpki"
	"github.com/kvd-project/kvd/internal/tlsconf"
)

// memberID is IDOf for these tests: member "m<n>" has raft ID n.
func memberID(name string) uint64 {
	var id uint64
	if _, err := fmt.Sscanf(name, "m%d", &id); err != nil {
		return 0
	}
	return id
}

// tlsMember writes a certificate for leaf, signed by ca, with trust in
// trust (the peer CA file), into a fresh directory, and loads it.
func tlsMember(t *testing.T, ca, trust *testpki.CA, leaf testpki.Leaf) (*tlsconf.Peer, testpki.Files) {
	t.Helper()
	f := testpki.WriteFiles(t, t.TempDir(), "peer", trust, ca.Issue(t, leaf))
	src, err := tlsconf.Load(tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, nil)
	require.NoError(t, err)
	p, err := tlsconf.NewPeer(src, tls.VersionTLS12)
	require.NoError(t, err)
	return p, f
}

func withTLS(cfg Config, p *tlsconf.Peer) Config {
	if p != nil {
		cfg.TLS, cfg.IDOf = p, memberID
	}
	return cfg
}

// startTCP is newTCP whose refusal warnings are never repeated within a
// test, so that a test can count them without depending on how long it runs.
func startTCP(t *testing.T, cfg Config, h Handler, log *logBuffer) *TCP {
	t.Helper()
	tr, err := NewTCP(cfg, h, newLogger(log))
	require.NoError(t, err)
	tr.refusals = newLogLimiter(24 * time.Hour)
	tr.Start()
	t.Cleanup(func() { tr.Close() })
	return tr
}

// inboundSerial is the serial number of the certificate the established
// inbound connection from id was made with.
func inboundSerial(t *testing.T, tr *TCP, from uint64) *big.Int {
	t.Helper()
	tr.mu.RLock()
	c := tr.inbound[from]
	tr.mu.RUnlock()
	require.NotNil(t, c, "no inbound connection from %d", from)
	tc, ok := c.(tlsConn)
	require.True(t, ok, "inbound connection from %d is not TLS", from)
	return tc.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestTCPTLSMessagesBothWays(t *testing.T) {
	checkNoLeak(t)
	ca := testpki.NewCA(t, "peer-ca")
	p1, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m1"}})
	p2, _ := tlsMember(t, ca, ca, testpki.Leaf{CN: "m2"}) // the common name counts too
	var log1, log2 logBuffer
	rec1, rec2 := newRecorder(), newRecorder()
	t2 := startTCP(t, withTLS(fastConfig(7, 2, nil), p2), rec2, &log2)
	t1 := startTCP(t, withTLS(fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), p1), rec1, &log1)
	t2.AddPeer(1, t1.Addr())

	const n = 500
	for i := uint64(1); i <= n; i++ {
		t1.Send([]*pb.Message{app(1, 2, i)})
		t2.Send([]*pb.Message{app(2, 1, i)})
	}
	waitFor(t, "messages both ways", func() bool { return rec2.count(1) == n && rec1.count(2) == n })
	checkSequence(t, "1 → 2", rec2.from(1), n)
	checkSequence(t, "2 → 1", rec1.from(2), n)
	for _, tr := range []*TCP{t1, t2} {
		s := tr.Stats()
		assert.Zero(t, s.TLSRefused)
		for id, ps := range s.Peers {
			assert.True(t, ps.Connected, "peer %d", id)
			assert.Equal(t, uint64(1), ps.Dials, "peer %d", id)
			assert.Zero(t, ps.DialFailures, "peer %d", id)
		}
	}
}

func TestTCPTLSSnapshotStream(t *testing.T) {
	checkNoLeak(t)
	ca := testpki.NewCA(t, "peer-ca")
	p1, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m1"}})
	p2, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m2"}})
	big := bytes.Repeat([]byte{0xcd}, 1<<20)
	src := &dirSource{files: map[string][]byte{"000009.sst": big}, applied: 100}
	cfg2 := withTLS(streamingConfig(t, 2, nil, &dirSource{}), p2)
	rec2 := &snapRecorder{recorder: newRecorder(), dataDir: cfg2.SnapshotDir}
	var log1, log2 logBuffer
	t2 := startTCP(t, cfg2, rec2, &log2)
	rec1 := newRecorder()
	t1 := startTCP(t, withTLS(streamingConfig(t, 1, map[uint64]string{2: t2.Addr()}, src), p1), rec1, &log1)

	t1.Send([]*pb.Message{app(1, 2, 1), snapMsg(1, 2, 100)})
	waitFor(t, "snapshot streamed over TLS", func() bool {
		return rec2.snaps() == 1 && rec1.hasSnap(snapReport{2, false})
	})
	rec2.mu.Lock()
	got := rec2.got[0]
	rec2.mu.Unlock()
	assert.True(t, bytes.Equal(big, got["000009.sst"]), "received file differs")
	assert.Equal(t, uint64(1), t2.Stats().Snapshots.Received)
	assert.Zero(t, t2.Stats().TLSRefused)
}

func TestTCPTLSRefusals(t *testing.T) {
	ca := testpki.NewCA(t, "peer-ca")
	other := testpki.NewCA(t, "other-ca")
	good1 := func(t *testing.T) *tlsconf.Peer {
		p, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m1"}})
		return p
	}
	good2 := func(t *testing.T) *tlsconf.Peer {
		p, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m2"}})
		return p
	}
	tests := []struct {
		name         string
		dialer       func(t *testing.T) *tlsconf.Peer // node 1; nil: plaintext
		acceptor     func(t *testing.T) *tlsconf.Peer // node 2
		acceptorWarn string                           // logged at warn once, then at debug
		acceptorLog  string                           // more the acceptor's log must hold
		dialerLog    string
	}{
		{
			name: "dialer's certificate names another member",
			dialer: func(t *testing.T) *tlsconf.Peer {
				p, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m3"}})
				return p
			},
			acceptor:     good2,
			acceptorWarn: "its certificate does not name the member it claims to be",
			acceptorLog:  "claimed=1 cert_names=[m3]",
			dialerLog:    "our certificate does not name the member our handshake claims",
		},
		{
			name:   "acceptor's certificate names another member",
			dialer: good1,
			acceptor: func(t *testing.T) *tlsconf.Peer {
				p, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m3"}, CN: "m4"})
				return p
			},
			dialerLog: "the certificate names m3, m4, not member 2",
		},
		{
			name: "certificate from another CA",
			dialer: func(t *testing.T) *tlsconf.Peer {
				p, _ := tlsMember(t, other, ca, testpki.Leaf{DNS: []string{"m1"}})
				return p
			},
			acceptor:     good2,
			acceptorWarn: "refused peer connection: TLS handshake failed",
			acceptorLog:  "unknown authority",
			dialerLog:    "bad certificate",
		},
		{
			name: "expired certificate",
			dialer: func(t *testing.T) *tlsconf.Peer {
				p, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m1"},
					NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
				return p
			},
			acceptor:     good2,
			acceptorWarn: "refused peer connection: TLS handshake failed",
			acceptorLog:  "expired",
		},
		{
			name:         "plaintext dialer",
			acceptor:     good2,
			acceptorWarn: "plaintext or non-TLS peer",
		},
		{
			name:        "TLS dialer, plaintext acceptor",
			dialer:      good1,
			acceptorLog: "bad handshake magic",
			dialerLog:   "the peer closed the connection (does it run without peer TLS?)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeak(t)
			var p1, p2 *tlsconf.Peer
			if tt.dialer != nil {
				p1 = tt.dialer(t)
			}
			if tt.acceptor != nil {
				p2 = tt.acceptor(t)
			}
			var log1, log2 logBuffer
			rec1, rec2 := newRecorder(), newRecorder()
			t2 := startTCP(t, withTLS(fastConfig(7, 2, nil), p2), rec2, &log2)
			t1 := startTCP(t, withTLS(fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), p1), rec1, &log1)

			// Three refused dials: the first refusal at warn, the next at
			// debug. A message per poll: one sent while the writer drops
			// what was queued at a failed dial would not make it dial.
			var i uint64
			waitFor(t, "three refused dials", func() bool {
				i++
				t1.Send([]*pb.Message{app(1, 2, i)})
				ps := t1.Stats().Peers[2]
				return ps.DialFailures >= 3 || ps.Connected
			})
			require.False(t, t1.Connected(2), "connected despite: %s\n%s", tt.name, strings.Join(log1.lines(), "\n"))
			assert.Zero(t, rec2.count(1), "messages delivered")
			if tt.acceptorWarn != "" {
				waitFor(t, "refusals counted", func() bool { return t2.Stats().TLSRefused >= 3 })
				lines := 0
				for _, l := range log2.lines() {
					if strings.Contains(l, "level=WARN") && strings.Contains(l, tt.acceptorWarn) {
						lines++
					}
				}
				assert.Equal(t, 1, lines, "warnings for %q in:\n%s", tt.acceptorWarn, strings.Join(log2.lines(), "\n"))
				assert.True(t, log2.contains("level=DEBUG"), "repeats logged at debug")
			}
			if tt.acceptorLog != "" {
				waitFor(t, "acceptor log "+tt.acceptorLog, func() bool { return log2.contains(tt.acceptorLog) })
			}
			if tt.dialerLog != "" {
				assert.True(t, log1.contains(tt.dialerLog), "dialer log lacks %q:\n%s", tt.dialerLog, strings.Join(log1.lines(), "\n"))
			}
		})
	}
}

func TestTCPTLSCertRotation(t *testing.T) {
	checkNoLeak(t)
	ca := testpki.NewCA(t, "peer-ca")
	p1, f1 := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m1"}})
	p2, _ := tlsMember(t, ca, ca, testpki.Leaf{DNS: []string{"m2"}})
	var log1, log2 logBuffer
	rec1, rec2 := newRecorder(), newRecorder()
	t2 := startTCP(t, withTLS(fastConfig(7, 2, nil), p2), rec2, &log2)
	t1 := startTCP(t, withTLS(fastConfig(7, 1, map[uint64]string{2: t2.Addr()}), p1), rec1, &log1)

	next := uint64(1)
	send := func(n int) {
		for range n {
			t1.Send([]*pb.Message{app(1, 2, next)})
			next++
		}
	}
	send(100)
	waitFor(t, "the first messages", func() bool { return rec2.count(1) >= 1 })
	oldSerial := inboundSerial(t, t2, 1)

	// A renewed certificate, written over the old files while messages
	// are still on their way.
	send(100)
	testpki.WriteFiles(t, filepath.Dir(f1.Cert), "peer", ca, ca.Issue(t, testpki.Leaf{DNS: []string{"m1"}}))
	changed, err := p1.Source().Reload()
	require.NoError(t, err)
	require.True(t, changed)
	send(100)
	waitFor(t, "every message", func() bool { return rec2.count(1) == 300 })
	checkSequence(t, "1 → 2 across the reload", rec2.from(1), 300)
	// The established connection carried on.
	assert.Equal(t, uint64(1), t1.Stats().Peers[2].Dials)
	assert.Equal(t, oldSerial, inboundSerial(t, t2, 1))

	// A new connection uses the new certificate.
	t2.mu.RLock()
	t2.inbound[1].Close()
	t2.mu.RUnlock()
	waitFor(t, "the writer to notice the close", func() bool { return !t1.Connected(2) })
	send(100)
	waitFor(t, "the messages after the reconnection", func() bool { return rec2.count(1) == 400 })
	checkSequence(t, "1 → 2 after reconnecting", rec2.from(1), 400)
	assert.Equal(t, p1.Source().Leaf().SerialNumber, inboundSerial(t, t2, 1))
	assert.NotEqual(t, oldSerial, p1.Source().Leaf().SerialNumber)
	assert.Zero(t, t2.Stats().TLSRefused)
}

// lines is what was logged so far, a line per record.
func (b *logBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

func TestLogLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLogLimiter(time.Minute)
	steps := []struct {
		key            string
		at             time.Duration // after t0
		wantWarn       bool
		wantSuppressed uint64
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // another key has its own allowance
		{"a", 59 * time.Second, false, 0},
		{"a", time.Minute, true, 2},
		{"a", time.Minute + time.Second, false, 0},
		{"b", 2 * time.Minute, true, 0},
	}
	for i, s := range steps {
		warn, n := l.allow(s.key, t0.Add(s.at))
		assert.Equal(t, s.wantWarn, warn, "step %d", i)
		assert.Equal(t, s.wantSuppressed, n, "step %d", i)
	}

	// Past maxLimitKeys, expired keys are forgotten first, then all.
	l = newLogLimiter(time.Minute)
	for i := range maxLimitKeys {
		l.allow(fmt.Sprint(i), t0)
	}
	warn, _ := l.allow("new", t0.Add(time.Second))
	assert.True(t, warn)
	assert.LessOrEqual(t, len(l.seen), maxLimitKeys)
	warn, _ = l.allow("new", t0.Add(2*time.Second))
	assert.False(t, warn, "a key remembered after the reset")
}
