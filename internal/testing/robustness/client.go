package robustness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// mcConn is one memcache text-protocol connection with a deadline on every
// exchange. After any error the connection's state is unknown (a reply may
// still be on its way), so the caller must close it and dial again.
type mcConn struct {
	c  net.Conn
	r  *bufio.Reader
	to time.Duration
}

// dialMC connects to addr; with sec (a secured run) over TLS, logged in
// before it is returned. A failed login is a request not sent.
func dialMC(addr string, timeout time.Duration, sec *Security) (*mcConn, error) {
	if sec == nil {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, fmt.Errorf("%w: dial %s: %v", errNotSent, addr, err)
		}
		return &mcConn{c: c, r: bufio.NewReader(c), to: timeout}, nil
	}
	c, err := sec.dial(addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", errNotSent, addr, err)
	}
	m := &mcConn{c: c, r: bufio.NewReader(c), to: timeout}
	if err := sec.loginText(m); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: log in to %s: %v", errNotSent, addr, err)
	}
	return m, nil
}

func (m *mcConn) Close() error { return m.c.Close() }

// errNotSent marks a request that never left the client: it cannot have
// taken effect, so it is left out of the history.
var errNotSent = errors.New("not sent")

// errServer is a SERVER_ERROR (or a refused connection's "ERROR Too many
// open connections"): for a write, its outcome is unknown.
var errServer = errors.New("server error")

// errProtocol is a reply no memcached would send to the request (a wrong
// key or flags, a bad data block, an unknown reply word): a server bug. For
// a write its outcome is unknown, as for errServer; unlike errServer it
// fails the run, since a read that garbles its reply would otherwise just
// be dropped from the history, unchecked.
var errProtocol = errors.New("protocol violation")

func (m *mcConn) exchange(req string) error {
	// Requests are never pipelined and every reply is read to its end, so
	// bytes already waiting answer nothing asked: a server that replied
	// twice. Read on, they would pass for this request's reply.
	if n := m.r.Buffered(); n > 0 {
		return fmt.Errorf("%w: %d unsolicited bytes before the request", errProtocol, n)
	}
	if err := m.c.SetDeadline(time.Now().Add(m.to)); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	if _, err := io.WriteString(m.c, req); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

func (m *mcConn) line() (string, error) {
	l, err := m.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read reply: %w", err)
	}
	l = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
	// A bare ERROR is the reply to a command the server does not know: to
	// the workload's well-formed requests only a misparse (a framing bug)
	// gives it, so it must fail the run rather than pass as an unknown
	// outcome. "ERROR Too many open connections" is a refusal, as memcached
	// sends it, and counts as a server error.
	if l == "ERROR" {
		return "", fmt.Errorf("%w: %q to a well-formed request", errProtocol, l)
	}
	if strings.HasPrefix(l, "SERVER_ERROR") || strings.HasPrefix(l, "ERROR ") {
		return "", fmt.Errorf("%w: %q", errServer, l)
	}
	return l, nil
}

// item is a read's result.
type item struct {
	Found bool
	Value string
	CAS   uint64
}

// get runs get (withCAS false) or gets on one key.
func (m *mcConn) get(key string, withCAS bool) (item, error) {
	verb := "get"
	if withCAS {
		verb = "gets"
	}
	if err := m.exchange(verb + " " + key + "\r\n"); err != nil {
		return item{}, err
	}
	l, err := m.line()
	if err != nil {
		return item{}, err
	}
	if l == "END" {
		return item{}, nil
	}
	// The workload stores every item with flags 0, so other flags are
	// corruption, as is a cas field on a plain get or none on gets.
	fields := 4
	if withCAS {
		fields = 5
	}
	f := strings.Fields(l)
	if len(f) != fields || f[0] != "VALUE" || f[1] != key || f[2] != "0" {
		return item{}, fmt.Errorf("%w: unexpected %s header %q", errProtocol, verb, l)
	}
	size, err := strconv.Atoi(f[3])
	if err != nil || size < 0 || size > 1<<20 {
		return item{}, fmt.Errorf("%w: bad size in %q", errProtocol, l)
	}
	it := item{Found: true}
	if withCAS {
		if it.CAS, err = strconv.ParseUint(f[4], 10, 64); err != nil {
			return item{}, fmt.Errorf("%w: bad cas in %q", errProtocol, l)
		}
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(m.r, data); err != nil {
		return item{}, fmt.Errorf("read value: %w", err)
	}
	if string(data[size:]) != "\r\n" {
		return item{}, fmt.Errorf("%w: %d-byte value of %q not followed by \\r\\n", errProtocol, size, key)
	}
	it.Value = string(data[:size])
	if l, err = m.line(); err != nil {
		return item{}, err
	}
	if l != "END" {
		return item{}, fmt.Errorf("%w: %q after the value, want END", errProtocol, l)
	}
	return it, nil
}

// store runs set, add, replace or (with a non-zero token) cas and returns
// the reply word: STORED, NOT_STORED, EXISTS or NOT_FOUND.
func (m *mcConn) store(verb, key, value string, token uint64) (string, error) {
	req := fmt.Sprintf("%s %s 0 0 %d\r\n%s\r\n", verb, key, len(value), value)
	if verb == "cas" {
		req = fmt.Sprintf("cas %s 0 0 %d %d\r\n%s\r\n", key, len(value), token, value)
	}
	if err := m.exchange(req); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	switch l {
	case "STORED", "NOT_STORED", "EXISTS", "NOT_FOUND":
		return l, nil
	}
	return "", fmt.Errorf("%w: %s reply %q", errProtocol, verb, l)
}

// storeTTL runs set with a relative lifetime of exptime seconds and
// returns the reply word (the expiry probe's set, expiry.go).
func (m *mcConn) storeTTL(key, value string, exptime int) (string, error) {
	if err := m.exchange(fmt.Sprintf("set %s 0 %d %d\r\n%s\r\n", key, exptime, len(value), value)); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	if l != "STORED" && l != "NOT_STORED" {
		return "", fmt.Errorf("%w: set reply %q", errProtocol, l)
	}
	return l, nil
}

func (m *mcConn) delete(key string) (string, error) {
	if err := m.exchange("delete " + key + "\r\n"); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	if l != "DELETED" && l != "NOT_FOUND" {
		return "", fmt.Errorf("%w: delete reply %q", errProtocol, l)
	}
	return l, nil
}

// arith runs incr or decr; the reply is the new value or NOT_FOUND.
func (m *mcConn) arith(verb, key string, delta uint64) (string, error) {
	if err := m.exchange(fmt.Sprintf("%s %s %d\r\n", verb, key, delta)); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	if l == "NOT_FOUND" {
		return l, nil
	}
	if _, err := strconv.ParseUint(l, 10, 64); err != nil {
		return "", fmt.Errorf("%w: %s reply %q", errProtocol, verb, l)
	}
	return l, nil
}
