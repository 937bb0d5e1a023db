package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/testcerts"
)

// authServer accepts connections on loopback (wrapped by wrap when set)
// and answers memcached's text authentication: STORED for "alice
// s3cret", CLIENT_ERROR otherwise; then "version" until the client
// closes. It returns the address.
func authServer(t *testing.T, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if wrap != nil {
		ln = wrap(ln)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveAuth(c)
		}
	}()
	return ln.Addr().String()
}

func serveAuth(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 5 && f[0] == "set" && f[1] == "auth":
			n, _ := strconv.Atoi(f[4])
			data := make([]byte, n+2)
			if _, err := io.ReadFull(r, data); err != nil {
				return
			}
			reply := "CLIENT_ERROR authentication failure\r\n"
			if string(data[:n]) == "alice s3cret" {
				reply = "STORED\r\n"
			}
			_, _ = io.WriteString(c, reply)
		case len(f) == 1 && f[0] == "version":
			_, _ = io.WriteString(c, "VERSION 1.6.0\r\n")
		default:
			_, _ = io.WriteString(c, "ERROR\r\n")
		}
	}
}

// Each connection authenticates before its first request when the driver
// has a user; a refused password is an auth error that quotes the server.
func TestMemcacheDialAuthenticates(t *testing.T) {
	addr := authServer(t, nil)
	for _, tc := range []struct {
		name, user, password string
		wantErr              string
	}{
		{name: "accepted", user: "alice", password: "s3cret"},
		{name: "refused", user: "alice", password: "guess", wantErr: "CLIENT_ERROR authentication failure"},
		{name: "no user: no handshake", user: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := memcacheDriver{user: tc.user, password: tc.password}.Dial(t.Context(), addr, 5*time.Second)
			if tc.wantErr != "" {
				var oe *OpError
				require.True(t, errors.As(err, &oe), "err: %v", err)
				require.Equal(t, ErrAuth, oe.Kind)
				require.Contains(t, oe.Msg, tc.wantErr)
				require.NotContains(t, oe.Msg, tc.password)
				return
			}
			require.NoError(t, err)
			require.NoError(t, c.Close())
		})
	}
}

// A run whose credentials a server refuses fails at once with the
// server's reply, instead of reporting nothing but errors.
func TestRunFailsOnRefusedCredentials(t *testing.T) {
	addr := authServer(t, nil)
	cfg := Config{Target: "memcache", Servers: []string{addr}, Concurrency: []int{1}, Duration: time.Second, Repeat: 1,
		Timeout: 5 * time.Second, MaxOps: 10, LoadTimeout: time.Second, User: "alice", Password: "guess"}
	cfg.Workload, _ = Preset("custom")
	_, err := Run(context.Background(), cfg)
	require.ErrorContains(t, err, "--user: server "+addr+": authentication as \"alice\" refused: CLIENT_ERROR authentication failure")
}

// With a TLS configuration the connection speaks TLS, verifying the
// server's certificate against the given CA for its host, and
// authenticates inside it.
func TestMemcacheDialTLS(t *testing.T) {
	files := testcerts.New(t)
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	require.NoError(t, err)
	addr := authServer(t, func(ln net.Listener) net.Listener {
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	})
	caPEM, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))

	d := memcacheDriver{tls: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, user: "alice", password: "s3cret"}
	c, err := d.Dial(t.Context(), addr, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	info, err := d.Info(t.Context(), addr, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "1.6.0", info["version"])

	// The system roots do not know the test CA: verification is not skipped.
	_, err = memcacheDriver{tls: &tls.Config{MinVersion: tls.VersionTLS12}}.Dial(t.Context(), addr, 5*time.Second)
	require.ErrorContains(t, err, fmt.Sprintf("TLS handshake with %s", addr))
}
