package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// startTLS runs the TLS handshake on a fresh connection (closing it on
// failure) within timeout.
func (m memcacheDriver) startTLS(ctx context.Context, nc net.Conn, addr string, timeout time.Duration) (net.Conn, error) {
	cfg := m.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(nc, cfg)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		_ = nc.Close()
		return nil, &OpError{Kind: ErrConnect, Msg: "TLS handshake with " + addr + ": " + err.Error()}
	}
	return tc, nil
}

// authenticate sends memcached's text-protocol authentication: a set of
// any key whose data is "user password", answered STORED when accepted
// and CLIENT_ERROR otherwise. (kvd and memcached -Y take it from any text
// or meta protocol client.)
func (c *mcConn) authenticate(user, password string) *OpError {
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return classifyIO(err)
	}
	cred := user + " " + password
	c.w.WriteString("set auth 0 0 " + strconv.Itoa(len(cred)) + "\r\n" + cred + "\r\n")
	if err := c.w.Flush(); err != nil {
		return classifyIO(err)
	}
	line, e := c.readLine()
	if e != nil {
		return e
	}
	switch {
	case bytes.Equal(line, []byte("STORED")):
		return nil
	case bytes.HasPrefix(line, []byte("CLIENT_ERROR")), bytes.HasPrefix(line, []byte("SERVER_ERROR")), bytes.Equal(line, []byte("ERROR")):
		return &OpError{Kind: ErrAuth, Msg: fmt.Sprintf("authentication as %q refused: %s", user, trunc(line, 200))}
	}
	return &OpError{Kind: ErrProtocol, Msg: fmt.Sprintf("unexpected reply to authentication: %.80q", line)}
}

// checkCredentials fails the run when a server refuses cfg's credentials:
// every connection would be refused the same way, and a report of nothing
// but errors would hide why. Servers that cannot be reached are left to
// the probe, which reports them.
func checkCredentials(ctx context.Context, drv Driver, cfg Config) error {
	if cfg.User == "" {
		return nil
	}
	for _, addr := range cfg.Servers {
		c, err := drv.Dial(ctx, addr, cfg.Timeout)
		if err == nil {
			_ = c.Close()
			continue
		}
		if oe := (*OpError)(nil); errors.As(err, &oe) && oe.Kind == ErrAuth {
			return fmt.Errorf("--user: server %s: %s", addr, oe.Msg)
		}
	}
	return nil
}
