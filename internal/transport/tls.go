package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvd-project/kvd/internal/tlsconf"
)

// peerTLS is Config.TLS with what the transport derives from it once: the
// acceptor's tls.Config picks the current certificate per handshake
// (tlsconf), so one serves every connection; the dialer's is built per dial,
// since it carries the certificate current at that moment.
type peerTLS struct {
	peer   *tlsconf.Peer
	idOf   func(name string) uint64
	server *tls.Config
}

func newPeerTLS(p *tlsconf.Peer, idOf func(string) uint64) *peerTLS {
	if p == nil {
		return nil
	}
	return &peerTLS{peer: p, idOf: idOf, server: p.ServerConfig()}
}

// tlsConn is a peer connection over TLS whose Close closes the TCP
// connection at once, without the close_notify alert tls.Conn.Close writes
// first: that write may wait up to 5s on a peer that stopped reading, and
// Close of the transport promises not to wait for write timeouts. The wire
// format frames everything, so a connection cut short is noticed anyway.
// Being one pointer, it goes into a net.Conn without an allocation.
type tlsConn struct{ *tls.Conn }

func (c tlsConn) Close() error { return c.NetConn().Close() }

// clientHandshake runs the dialer's TLS handshake on conn, whose deadline
// the caller has set. The error says what most likely went wrong.
func (s *peerTLS) clientHandshake(conn net.Conn) (*tls.Conn, error) {
	tc := tls.Client(conn, s.peer.ClientConfig())
	if err := tc.Handshake(); err != nil {
		if closedEarly(err) {
			return nil, fmt.Errorf("TLS handshake: the peer closed the connection (does it run without peer TLS?): %w", err)
		}
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// closedEarly is a handshake the other side ended by closing, which is how
// a plaintext kvd member answers a TLS hello (its magic is wrong).
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// memberError is a peer whose certificate, verified against the CA, names
// another member than the one it speaks for.
type memberError struct {
	claimed uint64
	names   []string
	err     error // from tlsconf.CheckMember
}

func (e *memberError) Error() string {
	if !errors.Is(e.err, tlsconf.ErrWrongMember) {
		return fmt.Sprintf("member %d: %v", e.claimed, e.err)
	}
	return fmt.Sprintf("the certificate names %s, not member %d", strings.Join(e.names, ", "), e.claimed)
}

func (e *memberError) Unwrap() error { return e.err }

// checkMember is tlsconf.CheckMember with the names kept for the log.
func (s *peerTLS) checkMember(state tls.ConnectionState, id uint64) error {
	err := tlsconf.CheckMember(state, id, s.idOf)
	if err == nil {
		return nil
	}
	var names []string
	if len(state.PeerCertificates) > 0 {
		names = tlsconf.Names(state.PeerCertificates[0])
	}
	return &memberError{claimed: id, names: names, err: err}
}

// vouched is tlsconf.Vouched with the transport's ID mapping.
func (s *peerTLS) vouched(state tls.ConnectionState, id uint64) bool {
	return tlsconf.Vouched(state, id, s.idOf)
}

// refusalLogInterval is how often the acceptor logs at warn one kind of TLS
// refusal from one host; repeats in between go to debug. A misconfigured
// member redials every backoff step (up to once a second) for as long as
// it runs, and one line a minute says as much as sixty.
const refusalLogInterval = time.Minute

// maxLimitKeys bounds what logLimiter remembers: refusals from many hosts
// (a scan of the peer port) must not grow it without bound.
const maxLimitKeys = 256

// logLimiter decides whether a message, named by its key, is logged at warn
// now: once per interval per key.
type logLimiter struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*limitEntry
}

type limitEntry struct {
	at         time.Time // of the last warn
	suppressed uint64    // repeats since then
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, seen: make(map[string]*limitEntry)}
}

// allow reports whether key may be logged at warn at now, and if so how
// many repeats were logged at debug since its last warn.
func (l *logLimiter) allow(key string, now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.seen[key]; e != nil {
		if now.Sub(e.at) < l.every {
			e.suppressed++
			return false, 0
		}
		n := e.suppressed
		e.at, e.suppressed = now, 0
		return true, n
	}
	if len(l.seen) >= maxLimitKeys {
		for k, e := range l.seen {
			if now.Sub(e.at) >= l.every {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= maxLimitKeys {
			clear(l.seen) // at worst, a repeat is logged at warn again
		}
	}
	l.seen[key] = &limitEntry{at: now}
	return true, 0
}

// refusalKind names the reason of a refusal without what changes from one
// attempt to the next (an expiry error quotes the current time).
func refusalKind(err error) string {
	var (
		rh      tls.RecordHeaderError
		me      *memberError
		invalid x509.CertificateInvalidError
		unknown x509.UnknownAuthorityError
	)
	switch {
	case errors.As(err, &rh):
		return "not TLS"
	case errors.As(err, &me):
		return me.Error()
	case errors.Is(err, errUnvouched):
		return "unvouched non-member"
	case errors.As(err, &invalid):
		return fmt.Sprintf("invalid certificate %d", invalid.Reason)
	case errors.As(err, &unknown):
		return "unknown authority"
	}
	return failureKey(err)
}

// logRefusal logs an inbound connection refused for TLS (a failed TLS
// handshake, a certificate that is not the claimed member's, or a
// stranger's that nothing vouches for) at warn once per
// refusalLogInterval per host and reason, at debug otherwise, and counts it.
func (t *TCP) logRefusal(remote string, err error) {
	t.tlsRefused.Add(1)
	host, _, splitErr := net.SplitHostPort(remote)
	if splitErr != nil {
		host = remote
	}
	msg := "refused peer connection: TLS handshake failed"
	var args []any
	var rh tls.RecordHeaderError
	var me *memberError
	switch {
	case errors.As(err, &rh):
		msg = "refused peer connection: plaintext or non-TLS peer (peer TLS is on here; is it configured on that member?)"
	case errors.As(err, &me) && errors.Is(err, tlsconf.ErrClientOnly):
		msg = "refused peer connection: its certificate is not a member's (issued for clients only)"
		args = append(args, "claimed", me.claimed, "cert_names", me.names)
	case errors.As(err, &me):
		msg = "refused peer connection: its certificate does not name the member it claims to be"
		args = append(args, "claimed", me.claimed, "cert_names", me.names)
	case errors.Is(err, errUnvouched):
		msg = "refused peer connection: not a member here, and its certificate does not vouch for it as one"
	}
	warn, suppressed := t.refusals.allow(host+"|"+refusalKind(err), time.Now())
	args = append(args, "remote", remote, "err", err)
	if !warn {
		t.log.Debug(msg, args...)
		return
	}
	if suppressed > 0 {
		args = append(args, "repeats_since_last_warning", suppressed)
	}
	t.log.Warn(msg, args...)
}
